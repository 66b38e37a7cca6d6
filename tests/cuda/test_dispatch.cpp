// quant_gemm: the path it takes (fp16 copy, Marlin, native) for each condition, the counted
// fallback reasons, the first-dispatch line, and that every path computes A * W_hat.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cuda/tl_kernels.h"
#include "gpu_support/gpu_test_util.h"
#include "quant_case.h"

namespace tl::test {
namespace {

using tl::cuda::GemmPath;

struct DeviceWeight {
  DeviceBuffer<uint8_t> q;
  DeviceBuffer<half_bits> scale, zero, s, delta, fp16;
  DeviceBuffer<int32_t> B;
  DeviceBuffer<int> workspace;
  tl::cuda::DeviceQuantWeight w;
  explicit DeviceWeight(const QuantCase& c)
      : q(c.q_tinyloop), scale(c.scale), zero(c.zero), s(c.s_marlin), delta(c.delta),
        fp16(size_t(c.K * c.N)), B(c.B), workspace(tl::cuda::marlin_workspace_ints(int(c.N))) {
    workspace.zero();
    // The fp16 body cache: W_hat rounded to fp16.
    std::vector<half_bits> w16(size_t(c.K * c.N));
    for (int64_t k = 0; k < c.K; ++k)
      for (int64_t n = 0; n < c.N; ++n) {
        const int64_t g = k / c.group_size;
        w16[size_t(k * c.N + n)] = float_to_half(
            float(double(c.codes[size_t(k * c.N + n)]) * half_to_float(c.scale[size_t(g * c.N + n)]) +
                  half_to_float(c.zero[size_t(g * c.N + n)])));
      }
    fp16.upload(w16);
    w.name = "test.weight";
    w.K = int(c.K);
    w.N = int(c.N);
    w.group_size = int(c.group_size);
    w.q = q.get();
    w.scale = scale.half();
    w.zero = zero.half();
    if (!c.B.empty()) {
      w.marlin_B = B.get();
      w.marlin_s = s.half();
      w.marlin_delta = delta.half();
      w.marlin_workspace = workspace.get();
    }
  }
};

// quant_gemm's options with Marlin dispatch on or off (nothing else differs).
tl::cuda::KernelOptions marlin(bool on) {
  tl::cuda::KernelOptions o;
  o.use_marlin = on;
  return o;
}

// Runs quant_gemm, checks the path and the result against A * W_hat.
void run_and_check(const QuantCase& c, const tl::cuda::DeviceQuantWeight& w, const tl::cuda::KernelOptions& options,
                   GemmPath want) {
  DeviceBuffer<half_bits> A(c.A), Y(size_t(c.M * c.N));
  Y.poison();
  int rc = -1;
  const GemmPath got = tl::cuda::quant_gemm(w, A.half(), Y.half(), int(c.M), nullptr, options, &rc);
  REQUIRE(rc == 0);
  TL_CUDA_THROW(cudaDeviceSynchronize());
  CHECK_MESSAGE(got == want, "took " << tl::cuda::gemm_path_name(got) << ", want "
                                     << tl::cuda::gemm_path_name(want));
  const std::vector<int64_t> rows = rows_to_check(c.M, c.K, c.N);
  // Every path rounds weights at most to fp16 (fp16 copy, Marlin's fma with the stored delta)
  // before an fp32 sum.
  const CompareResult r = compare_rows(std::string("quant_gemm/") + tl::cuda::gemm_path_name(got),
                                       Y.download(), rows, c.N, ref_w_hat(c, rows),
                                       kMaxUlpVsWHat, kMaxRelFro);
  CHECK(r.nonfinite == 0);
  CHECK(r.max_ulp <= kMaxUlpVsWHat);
  CHECK(r.rel_fro <= kMaxRelFro);
}

}  // namespace

TEST_CASE("quant_gemm: path selection, fallback reasons, first-dispatch line") {
  tl::cuda::reset_dispatch_stats();
  const QuantCase c = make_quant_case(16, 1024, 512, 128, 5000);
  DeviceWeight dw(c);

  SUBCASE("fp16 copy wins when present") {
    tl::cuda::DeviceQuantWeight w = dw.w;
    w.fp16_weight = dw.fp16.half();
    run_and_check(c, w, marlin(true), GemmPath::kFp16Copy);
  }
  SUBCASE("dispatch disabled: native, no fallback counted") {
    run_and_check(c, dw.w, marlin(false), GemmPath::kNativeInt4);
    CHECK(tl::cuda::dispatch_stats().fallbacks.empty());
  }
  SUBCASE("dispatch enabled: Marlin, and the first-dispatch line") {
    run_and_check(c, dw.w, marlin(true), GemmPath::kMarlin);
    const tl::cuda::DispatchStats st = tl::cuda::dispatch_stats();
    CHECK(st.dispatches[int(GemmPath::kMarlin)] == 1);
    CHECK(st.first_dispatch_line.rfind("[marlin] first dispatch ok: BT=", 0) == 0);
  }
  SUBCASE("exact_int4 and a missing pack fall back with their reason") {
    tl::cuda::DeviceQuantWeight w = dw.w;
    w.exact_int4 = true;
    run_and_check(c, w, marlin(true), GemmPath::kNativeInt4);
    w = dw.w;
    w.marlin_B = nullptr;
    run_and_check(c, w, marlin(true), GemmPath::kNativeInt4);
    const tl::cuda::DispatchStats st = tl::cuda::dispatch_stats();
    CHECK(st.fallbacks.at("flagged exact_int4") == 1);
    CHECK(st.fallbacks.at("no marlin pack") == 1);
  }
}

TEST_CASE("quant_gemm: N not a multiple of 128 falls back to the native kernel, with the gate's reason") {
  tl::cuda::reset_dispatch_stats();
  const QuantCase c = make_quant_case(3, 256, 192, 128, 5001);  // packable (N % 64), not runnable
  DeviceWeight dw(c);
  run_and_check(c, dw.w, marlin(true), GemmPath::kNativeInt4);
  CHECK(tl::cuda::dispatch_stats().fallbacks.at("marlin pack of 192 columns for N = 192") == 1);
}

TEST_CASE("quant_gemm: a single row goes to Marlin (no lower bound on M)") {
  tl::cuda::reset_dispatch_stats();
  const QuantCase c = make_quant_case(1, 512, 256, 128, 5002);
  DeviceWeight dw(c);
  run_and_check(c, dw.w, marlin(true), GemmPath::kMarlin);
  CHECK(tl::cuda::dispatch_stats().fallbacks.empty());
}

TEST_CASE("quant_gemm: the native floor from native_floor_min_m, counted per kernel, never for exact_int4") {
  tl::cuda::reset_dispatch_stats();
  const QuantCase c = make_quant_case(80, 512, 384, 128, 5003);
  DeviceWeight dw(c);
  tl::cuda::KernelOptions o = marlin(false);
  o.native_floor_min_m = 64;
  // The floor's output is cuBLAS on the fp16 copy of W_hat: bit for bit the fp16 path's.
  run_and_check(c, dw.w, o, GemmPath::kNativeInt4);
  DeviceBuffer<half_bits> A(c.A), Y(size_t(c.M * c.N)), Y16(size_t(c.M * c.N));
  int rc = -1;
  tl::cuda::quant_gemm(dw.w, A.half(), Y.half(), int(c.M), nullptr, o, &rc);
  REQUIRE(rc == 0);
  tl::cuda::DeviceQuantWeight w16 = dw.w;
  w16.fp16_weight = dw.fp16.half();
  tl::cuda::quant_gemm(w16, A.half(), Y16.half(), int(c.M), nullptr, o, &rc);
  REQUIRE(rc == 0);
  TL_CUDA_THROW(cudaDeviceSynchronize());
  CHECK(Y.download() == Y16.download());
  tl::cuda::DispatchStats st = tl::cuda::dispatch_stats();
  CHECK(st.native_kernels.at("dequant") == 2);
  CHECK(st.native_kernels.count("int4") == 0);
  // exact_int4: the CUDA-core kernel (fp32 W_hat) at the same M.
  tl::cuda::DeviceQuantWeight exact = dw.w;
  exact.exact_int4 = true;
  run_and_check(c, exact, o, GemmPath::kNativeInt4);
  // Below the crossover: the kernel.
  const QuantCase small = make_quant_case(63, 512, 384, 128, 5004);
  DeviceWeight ds(small);
  run_and_check(small, ds.w, o, GemmPath::kNativeInt4);
  st = tl::cuda::dispatch_stats();
  CHECK(st.native_kernels.at("dequant") == 2);
  CHECK(st.native_kernels.at("int4") == 2);
}

}  // namespace tl::test
