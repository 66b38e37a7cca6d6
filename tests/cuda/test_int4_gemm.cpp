// Native int4_gemm (TinyLoop layout) against the fp64 reference: ragged N (odd, below a warp's
// 256 columns), K not a multiple of 128, group sizes 32 / 128 / per-row, a ragged last group
// (K % group_size != 0), the split-K path.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "core/half.h"
#include "cuda/cublas_gemm.h"
#include "cuda/device_buffer.h"
#include "cuda/tl_kernels.h"
#include "gpu_support/gpu_test_util.h"
#include "quant_case.h"

namespace tl::test {
namespace {

struct Int4Case {
  int64_t M, K, N, group_size;  // group_size 0: per row (== K)
};

std::vector<Int4Case> int4_cases() {
  if (quick_mode()) return {{1, 256, 129, 128}, {7, 128, 256, 0}, {17, 512, 100, 32}, {16, 172, 64, 32}};
  std::vector<Int4Case> cases;
  for (int64_t M : {1, 7, 16, 17, 64, 100})
    for (Int4Case s : {Int4Case{0, 128, 128, 128}, Int4Case{0, 256, 129, 128},
                       Int4Case{0, 100, 7, 0}, Int4Case{0, 640, 1000, 32},
                       Int4Case{0, 4096, 4096, 128}})
      cases.push_back({M, s.K, s.N, s.group_size});
  cases.push_back({256, 1024, 512, 128});
  cases.push_back({1024, 512, 256, 0});
  cases.push_back({1, 8192, 8192, 128});
  cases.push_back({4, 11008, 4096, 128});
  // A ragged last group (K % group_size != 0), as upstream GPTQ writes a 172-row down_proj with
  // groups of 32 (5 of 32 + one of 12), and split-K cutting through groups of 128 (K = 1000).
  for (int64_t M : {1, 16, 4096}) cases.push_back({M, 172, 64, 32});
  cases.push_back({3, 1000, 1001, 128});
  cases.push_back({64, 300, 256, 128});
  return cases;
}

}  // namespace

TEST_CASE("int4_gemm: TinyLoop layout vs fp64 reference") {
  uint64_t stream = 2000;
  for (const Int4Case& ic : int4_cases()) {
    const int64_t gs = ic.group_size == 0 ? ic.K : ic.group_size;
    const QuantCase c = make_quant_case(ic.M, ic.K, ic.N, gs, ++stream);
    CAPTURE(c.name());
    DeviceBuffer<half_bits> A(c.A), scale(c.scale), zero(c.zero), C(size_t(c.M * c.N));
    DeviceBuffer<uint8_t> q(c.q_tinyloop);
    C.poison();
    TL_REQUIRE_LAUNCH(tl::cuda::int4_gemm(A.half(), q.get(), scale.half(), zero.half(), C.half(),
                                          int(c.M), int(c.N), int(c.K), int(gs), nullptr));
    const std::vector<half_bits> out = C.download();
    CHECK_MESSAGE(count_nonfinite(out) == 0, c.name() << ": unwritten outputs");
    const std::vector<int64_t> rows = rows_to_check(c.M, c.K, c.N);
    // fp32 dequantization (q * scale + zero: one fma) and fp32 accumulation: weights exact to
    // ~2^-24, so only the final rounding counts.
    const CompareResult r = compare_rows("int4_gemm " + c.name(), out, rows, c.N,
                                         ref_w_hat(c, rows), kMaxUlpExactWeights, kMaxRelFro);
    CHECK_MESSAGE(r.max_ulp <= kMaxUlpExactWeights, c.name() << " " << r.max_ulp);
    CHECK_MESSAGE(r.rel_fro <= kMaxRelFro, c.name() << " rel " << r.rel_fro);
  }
}

TEST_CASE("int4_gemm: the prefill floor (fp16 W_hat in column chunks + cuBLAS) vs fp64, and its tiles are the fp16 copy of W_hat") {
  // Shapes: one chunk and several (a scratch cap of a few 128-column tiles), ragged N (byte
  // loads, scalar stores, a last chunk of any width), a ragged last group, per row, group 32.
  struct FloorCase {
    int64_t M, K, N, group_size;  // group_size 0: per row
    size_t scratch;               // 0: the default 64 MiB
  };
  const std::vector<FloorCase> cases =
      quick_mode() ? std::vector<FloorCase>{{64, 256, 384, 128, 256 * 128 * 2}, {100, 172, 201, 32, 0}}
                   : std::vector<FloorCase>{{64, 128, 128, 128, 0},          {64, 256, 384, 128, 256 * 128 * 2},
                                            {100, 172, 64, 32, 0},           {100, 172, 201, 32, 172 * 128 * 2},
                                            {256, 1024, 1001, 0, 0},         {300, 640, 1000, 32, 640 * 256 * 2 + 8},
                                            {1024, 4096, 4096, 128, 0},      {4096, 11008, 512, 128, 11008 * 128 * 2 * 3}};
  uint64_t stream = 2500;
  for (const FloorCase& fc : cases) {
    const int64_t gs = fc.group_size == 0 ? fc.K : fc.group_size;
    const QuantCase c = make_quant_case(fc.M, fc.K, fc.N, gs, ++stream);
    CAPTURE(c.name());
    tl::cuda::KernelOptions o;
    o.native_floor_min_m = 64;
    o.dequant_scratch_bytes = fc.scratch;
    tl::cuda::GemmPlan plan;
    REQUIRE(tl::cuda::int4_gemm_plan(int(c.M), int(c.N), int(c.K), int(gs), &plan, o) == 0);
    CHECK(plan.kernel == "native-dequant");
    const int cols = tl::cuda::detail::dequant_chunk_cols(int(c.N), int(c.K), o);
    CHECK(plan.slices == int((c.N + cols - 1) / cols));
    if (fc.scratch > 0) CHECK(plan.slices >= 2);
    // Below the crossover the same options keep the CUDA-core kernel.
    REQUIRE(tl::cuda::int4_gemm_plan(63, int(c.N), int(c.K), int(gs), &plan, o) == 0);
    CHECK(plan.kernel == "native");

    DeviceBuffer<half_bits> A(c.A), scale(c.scale), zero(c.zero), C(size_t(c.M * c.N)), C_ref(size_t(c.M * c.N));
    DeviceBuffer<uint8_t> q(c.q_tinyloop);
    C.poison();
    TL_REQUIRE_LAUNCH(tl::cuda::int4_gemm(A.half(), q.get(), scale.half(), zero.half(), C.half(), int(c.M), int(c.N),
                                          int(c.K), int(gs), nullptr, o));
    const std::vector<half_bits> out = C.download();
    CHECK_MESSAGE(count_nonfinite(out) == 0, c.name() << ": unwritten outputs");
    const std::vector<int64_t> rows = rows_to_check(c.M, c.K, c.N);
    // Each weight rounded to fp16 once, fp32 accumulation: the rounded-weight bound.
    const CompareResult r = compare_rows("int4_gemm floor " + c.name(), out, rows, c.N, ref_w_hat(c, rows),
                                         kMaxUlpRoundedWeights, kMaxRelFro);
    CHECK_MESSAGE(r.max_ulp <= kMaxUlpRoundedWeights, c.name() << " " << r.max_ulp);
    CHECK_MESSAGE(r.rel_fro <= kMaxRelFro, c.name() << " rel " << r.rel_fro);

    // Bit for bit what cuBLAS gives on the host's fp16 copy of W_hat (fp32 q * scale + zero,
    // rounded to nearest), chunk by chunk with the same calls: the floor's tiles are that copy.
    C_ref.poison();
    for (int64_t c0 = 0; c0 < c.N; c0 += cols) {
      const int64_t nc = std::min<int64_t>(cols, c.N - c0);
      std::vector<half_bits> tile(size_t(c.K * nc));
      for (int64_t k = 0; k < c.K; ++k)
        for (int64_t n = 0; n < nc; ++n) {
          const size_t gi = size_t((k / gs) * c.N + c0 + n);
          tile[size_t(k * nc + n)] = tl::float_to_half(float(c.codes[size_t(k * c.N + c0 + n)]) * tl::half_to_float(c.scale[gi]) +
                                                       tl::half_to_float(c.zero[gi]));
        }
      DeviceBuffer<half_bits> W(tile);
      TL_REQUIRE_LAUNCH(tl::cuda::detail::cublas_fp16_gemm_ld(A.half(), W.half(), int(nc), C_ref.half() + c0, int(c.N),
                                                              int(c.M), int(nc), int(c.K), nullptr));
      TL_CUDA_THROW(cudaDeviceSynchronize());
    }
    const std::vector<half_bits> want = C_ref.download();
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += want[i] != out[i];
    CHECK_MESSAGE(differ == 0, c.name() << ": " << differ << " outputs differ from cuBLAS on the fp16 copy");
  }
  // Off in the launchers' defaults (the native tier tests the kernel), on in the runtime's options.
  tl::cuda::GemmPlan plan;
  REQUIRE(tl::cuda::int4_gemm_plan(4096, 4096, 4096, 128, &plan) == 0);
  CHECK(plan.kernel == "native");
  CHECK(tl::cuda::runtime_kernel_options().native_floor_min_m == tl::cuda::kDefaultNativeFloorMinM);
}

TEST_CASE("int4_gemm: shape return codes") {
  DeviceBuffer<half_bits> buf(4096);
  DeviceBuffer<uint8_t> q(4096);
  auto run = [&](int M, int N, int K, int gs) {
    return tl::cuda::int4_gemm(buf.half(), q.get(), buf.half(), buf.half(), buf.half(), M, N, K,
                               gs, nullptr);
  };
  CHECK(run(0, 8, 8, 8) == tl::cuda::kShapeUnsupported);
  CHECK(run(1, 8, 100, 128) == tl::cuda::kShapeUnsupported);  // a group larger than K
  CHECK(run(1, 8, 100, 64) == tl::cuda::kOk);                 // a ragged last group of 36 rows
  CHECK(run(1, 8, 8, 0) == tl::cuda::kShapeUnsupported);
  TL_CUDA_THROW(cudaGetLastError());
}

}  // namespace tl::test
