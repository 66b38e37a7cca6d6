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

#include "core/half.h"

namespace tl::test {

// ---- Error bounds (fp16 inputs and outputs, fp32 accumulation) ----
//
// A GEMM output y = sum_k a_k w_k is stored as fp16. Its error against the exact (fp64) value:
//  * the final rounding to fp16: <= 0.5 ULP(y);
//  * fp32 accumulation over K: <= ~K u32 sum|a_k w_k| worst case, ~sqrt(K) u32 |y| typical
//    (u32 = 2^-24): below 1e-5 of |y| for K <= 8192, negligible next to fp16's 2^-11;
//  * weights that the kernel rounds to fp16 (Marlin's grouped (q - 8) * s, and (q - 8) * s +
//    delta in the asymmetric kernel): each w_k gets a relative error <= 2^-11, i.e. an output
//    error of ~2^-11/sqrt(3) * rms(y) RMS for random signs; over ~10^6 outputs the largest is
//    ~5 sigma ~ 3 * 2^-11 * rms(y) ~ 3 ULP at rms(y).
// Elements that cancel to ~0 cannot be judged in their own ULPs (the error scale is set by the
// terms, not the result), so the ULP test measures |out - ref| in ULPs of
// max(|ref|, rms(ref)): "scaled ULP".
constexpr double kMaxUlpExactWeights = 1.0;    // rounding of an almost exact fp32 sum: <= 1 ULP
// 0.5 + ~3 (weights) for independent errors; but per column the rounding errors repeat (a
// column has only 16 distinct weights, each rounded once), so the sum of K terms carries up to
// 16 correlated errors and the extreme over ~10^6 outputs grows past the 5-sigma estimate.
// Measured maxima on the H200: 4.35 and 5.63 (per-column asymmetric, M = 100, K = 128,
// N = 8192); bound 8, the same as tl-verify's wrapper bound (libverify/tolerances.h). A real
// fault (a wrong group, scale or delta) is off by hundreds of ULPs.
constexpr double kMaxUlpRoundedWeights = 8.0;
// The asymmetric paths compute A ((q - 8) s + delta) with delta = fp16(zero + 8 scale) as
// stored: against A W_hat (exact zero) the stored delta's rounding adds an error of the same
// size as the weights' (per-column: one delta for all K, so it does not average out): the 5
// sigma of the sum grows by sqrt(2), ~3 -> ~4.3 ULP, + 0.5 + the margin above.
constexpr double kMaxUlpVsWHat = 7.0;
// Relative Frobenius error: fp16 output rounding alone gives ~2^-11/sqrt(3) ~ 2.8e-4 relative
// RMS, weight rounding about as much again; 1e-3 is ~3x the expected ~3.5e-4.
constexpr double kMaxRelFro = 1e-3;
// fp32 sum of n fp16 values: each addition rounds by <= u32 of the running sum, so the error is
// <= depth * u32 * sum|a| where depth = the longest chain of additions.
constexpr double kU32 = 5.9604644775390625e-08;  // 2^-24

// ---- CUDA checking: the one idiom of cuda/device_buffer.h (a failing call throws, and
// doctest fails the test case with the call, the place and the CUDA error) ----
using tl::cuda::DeviceBuffer;

// A launcher rc must be 0 and the kernel must have finished without a fault.
#define TL_REQUIRE_LAUNCH(rc_expr)                                                        \
  do {                                                                                    \
    const int tl_rc_ = (rc_expr);                                                         \
    REQUIRE_MESSAGE(tl_rc_ == 0, #rc_expr << " returned rc " << tl_rc_);                  \
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

// True when TL_TEST_QUICK=1: the reduced case list (used under compute-sanitizer).
bool quick_mode();

// ---- Comparison ----
struct CompareResult {
  double rel_fro = 0;         // ||out - ref|| / ||ref||
  double max_scaled_ulp = 0;  // max |out - ref| / ULP16(max(|ref|, rms(ref)))
  double max_raw_ulp = 0;     // max distance in fp16 steps from fp16(ref) (DESIGN.md's ULP)
  int64_t nonfinite = 0;      // NaN/Inf outputs: unwritten (poison) or overflow
};

// Compares rows `rows` of out ([*, N] fp16) with ref ([rows.size(), N] fp64, in that order).
// Prints the worst few elements (row, column, out, ref, scaled ULP) when a bound is exceeded.
CompareResult compare_rows(const std::string& what, const std::vector<half_bits>& out,
                           const std::vector<int64_t>& rows, int64_t N,
                           const std::vector<double>& ref, double max_scaled_ulp,
                           double max_rel_fro);

// Rows a test checks against the CPU reference: all of them when rows * K * N is within the
// budget, else the first, the last, and those next to the 16- and 64-row slice boundaries.
std::vector<int64_t> rows_to_check(int64_t M, int64_t K, int64_t N);

// Every element of out (all rows) finite: the kernel wrote the whole poisoned output.
int64_t count_nonfinite(const std::vector<half_bits>& out);

}  // namespace tl::test
