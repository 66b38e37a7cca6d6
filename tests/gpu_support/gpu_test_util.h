// Shared helpers of the GPU tests: checked device buffers, seeded random inputs, poisoning,
// and the comparison against fp64 references with the named error bounds below.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "cuda/device_buffer.h"
#include "cuda/tl_kernels.h"  // rc_message

#include "core/half.h"
#include "libverify/tolerances.h"
#include "libverify/ulp_stats.h"

namespace tl::test {

// ---- Error bounds: the error model of tl-verify (libverify/tolerances.h) ----
//
// A test and a tier measure the same thing: the floored ULP distance of libverify/ulp_stats.h
// (fp16 steps from the fp16 nearest the fp64 reference, counted at the scale max(|ref|, c *
// sigma), sigma = the root-sum-square of the terms the kernel rounds), and the relative
// Frobenius error. Where a kernel rounds what the tiers bound, the test uses the tier's bound;
// where it provably rounds less, a tighter bound on the same metric:
//   rounded weights (grouped (q - 8) * s, the delta form):   kSymmetricMaxUlp (8)
//   against A * W_hat (the asymmetric wrapper, any path):     kWrapperMaxUlp (8)
//   exact weights (per-column symmetric, int4_gemm's fp32 dequantization, the correction
//   pair's fp32 math): only the final rounding of an almost exact sum, so <= 1 step.
// (The values and their derivation live in libverify/tolerances.h; these are the tests' names.)
constexpr double kMaxUlpExactWeights = tl::verify::kExactWeightsMaxUlp;
constexpr double kMaxUlpRoundedWeights = tl::verify::kSymmetricMaxUlp;
constexpr double kMaxUlpVsWHat = tl::verify::kWrapperMaxUlp;
constexpr double kMaxRelFro = tl::verify::kKernelMaxRelFro;
// fp32 sum of n fp16 values: each addition rounds by <= u32 of the running sum, so the error is
// <= depth * u32 * sum|a| where depth = the longest chain of additions.
constexpr double kU32 = tl::verify::kFloatUnitRoundoff;  // 2^-24

// ---- CUDA checking: the one idiom of cuda/device_buffer.h (a failing call throws, and
// doctest fails the test case with the call, the place and the CUDA error) ----
using tl::cuda::DeviceBuffer;

// A launcher rc must be 0 and the kernel must have finished without a fault.
#define TL_REQUIRE_LAUNCH(rc_expr)                                                        \
  do {                                                                                    \
    const int tl_rc_ = (rc_expr);                                                         \
    REQUIRE_MESSAGE(tl_rc_ == 0, #rc_expr << " returned rc " << tl_rc_ << ": "            \
                                          << tl::cuda::rc_message(tl_rc_));                \
    TL_CUDA_THROW(cudaGetLastError());                                                    \
    TL_CUDA_THROW(cudaDeviceSynchronize());                                               \
  } while (0)

// ---- Seeded random inputs (the seed is printed once; TL_TEST_SEED=... reproduces a run) ----
uint64_t test_seed();

class Rng {
 public:
  explicit Rng(uint64_t stream) : s_(test_seed() ^ (stream * 0x9E3779B97F4A7C15ull)) { next(); }
  uint64_t next() {  // splitmix64
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * double(next() >> 11) * 0x1p-53; }

 private:
  uint64_t s_;
};

// fp16 values uniform in [lo, hi] (never all zero).
std::vector<half_bits> random_halves(Rng& rng, size_t count, double lo, double hi);
// Codes 0..15, one per byte.
std::vector<uint8_t> random_codes(Rng& rng, size_t count);
// n token ids in [0, vocab), from the seeded stream `stream`.
std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t stream);

// True when TL_TEST_QUICK=1: the reduced case list (used under compute-sanitizer).
bool quick_mode();

// ---- Comparison ----

// An fp64 reference and its error model: sigma per element (root-sum-square of the rounded
// terms), both [rows.size(), N].
struct Reference {
  std::vector<double> value, sigma;
};

struct CompareResult {
  double rel_fro = 0;      // ||out - ref|| / ||ref||
  double max_ulp = 0;      // floored ULP (libverify/ulp_stats.h), the metric the bounds gate
  double max_raw_ulp = 0;  // max distance in fp16 steps from fp16(ref) (DESIGN.md's ULP)
  int64_t nonfinite = 0;   // NaN/Inf outputs: unwritten (poison) or overflow
};

// Compares rows `rows` of out ([*, N] fp16) with ref (in that order) through the tiers'
// UlpAccumulator at `floor_factor` (tolerances.h). Prints the worst element when a bound is
// exceeded.
CompareResult compare_rows(const std::string& what, const std::vector<half_bits>& out,
                           const std::vector<int64_t>& rows, int64_t N, const Reference& ref,
                           double max_ulp, double max_rel_fro,
                           double floor_factor = tl::verify::kGemmFloorFactor);

// Rows a test checks against the CPU reference: all of them when rows * K * N is within the
// budget, else the first, the last, and those next to the 16- and 64-row slice boundaries.
std::vector<int64_t> rows_to_check(int64_t M, int64_t K, int64_t N);

// Every element of out (all rows) finite: the kernel wrote the whole poisoned output.
int64_t count_nonfinite(const std::vector<half_bits>& out);

}  // namespace tl::test
