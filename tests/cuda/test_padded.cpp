// Padded Marlin sections (N not a multiple of 128, the head of a 50257-token vocabulary):
// marlin_mm_asymmetric_padded against the wrapper tier's fp64 reference on the weight's own N
// columns, on the decode kernel (M <= 16) and the floor (M > 16); nothing written past C's
// N_out columns (a poisoned tail stays poisoned); and quant_gemm taking the Marlin path for it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/nibbles.h"
#include "cuda/tl_kernels.h"
#include "formats/marlin_layout.h"
#include "gpu_support/gpu_test_util.h"
#include "libverify/random_weights.h"
#include "libverify/reference_math.h"
#include "libverify/tolerances.h"

namespace tl::test {
namespace {

struct PaddedCase {
  int M, K, N, NP, gs;
  tl::QuantWeight w;
  std::vector<half_bits> A;
  DeviceBuffer<half_bits> dA, s, delta, C;
  DeviceBuffer<int32_t> B;
  DeviceBuffer<int> work;
  static constexpr int kTail = 512;  // poisoned halves after C [M, N]: must stay untouched

  PaddedCase(int M_, int K_, int N_, int gs_, uint64_t stream) : M(M_), K(K_), N(N_), gs(gs_) {
    tl::verify::Rng rng(test_seed() ^ (stream * 0x9E3779B97F4A7C15ull));
    w = tl::verify::random_packed_weight(rng, "head", K, N, gs);
    NP = int(w.marlin->columns(N));
    A = tl::verify::random_halves(rng, M, K);
    dA = DeviceBuffer<half_bits>(A);
    s = DeviceBuffer<half_bits>(w.marlin->s);
    delta = DeviceBuffer<half_bits>(w.marlin->delta);
    B = DeviceBuffer<int32_t>(w.marlin->B);
    C = DeviceBuffer<half_bits>(size_t(M) * N + kTail);
    work = DeviceBuffer<int>(tl::cuda::marlin_workspace_ints(NP));
    work.zero();
  }
  std::string name() const {
    return "M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N) + " (padded " +
           std::to_string(NP) + ") g=" + std::to_string(gs == K ? -1 : gs);
  }
  void check(const std::vector<half_bits>& out, const std::string& what) const {
    const std::vector<half_bits> own(out.begin(), out.begin() + size_t(M) * N);
    CHECK_MESSAGE(count_nonfinite(own) == 0, what << ": unwritten outputs");
    for (size_t i = size_t(M) * N; i < out.size(); ++i)
      REQUIRE_MESSAGE(out[i] == 0xffff, what << ": written past C [M, N] at +" << (i - size_t(M) * N));
    const tl::verify::CaseReference r = tl::verify::wrapper_reference(
        A.data(), M, w, tl::column_range(w.marlin->delta.data(), w.groups(), NP, 0, N), tl::verify::kReferenceRowsMax);
    const CompareResult c = compare_rows(what + " " + name(), own, r.rows, N, Reference{r.ref, r.sigma},
                                         kMaxUlpVsWHat, kMaxRelFro);
    CHECK(c.max_ulp <= kMaxUlpVsWHat);
    CHECK(c.rel_fro <= kMaxRelFro);
  }
};

}  // namespace

TEST_CASE("padded section: marlin_mm_asymmetric_padded writes the weight's own columns, decode and floor") {
  // N = 200 (one partial slice), 50257 (GPT-2's vocabulary: 393 slices, odd row stride), 5.
  struct Shape {
    int K, N;
  };
  std::vector<Shape> shapes = {{256, 200}, {512, 50257}, {1024, 5}};
  std::vector<int> Ms = {1, 5, 9, 16, 17, 300};
  if (quick_mode()) Ms = {1, 16, 17};
  uint64_t stream = 9400;
  for (const Shape& sh : shapes)
    for (const int gs : {128, sh.K})
      for (const int M : Ms) {
        PaddedCase p(M, sh.K, sh.N, gs, ++stream);
        CAPTURE(p.name());
        REQUIRE(p.NP == int(tl::marlin_padded_n(sh.N)));
        for (const bool clusters : {true, false}) {
          tl::cuda::KernelOptions o = tl::cuda::runtime_kernel_options();
          o.clusters = clusters;
          p.C.poison();
          TL_REQUIRE_LAUNCH(tl::cuda::marlin_mm_asymmetric_padded(p.dA.half(), p.B.get(), p.s.half(), p.delta.half(),
                                                                  p.C.half(), p.work.get(), M, p.NP, p.N, p.K, gs,
                                                                  nullptr, o));
          p.check(p.C.download(), M <= 16 ? "decode" : "floor");
          for (int v : p.work.download()) REQUIRE_MESSAGE(v == 0, "workspace not zeroed");
        }
      }
}

TEST_CASE("padded section: quant_gemm runs it on Marlin, counted per kernel, no fallback") {
  PaddedCase p(4, 512, 50257, 128, 9500);
  tl::cuda::DeviceQuantWeight d;
  d.name = "head";
  d.K = p.K;
  d.N = p.N;
  d.group_size = p.gs;
  d.marlin_B = p.B.get();
  d.marlin_s = p.s.half();
  d.marlin_delta = p.delta.half();
  d.marlin_workspace = p.work.get();
  d.marlin_N = p.NP;
  // The native view, for the fallback below.
  DeviceBuffer<uint8_t> q(pack_nibbles(p.w.q.data(), p.K, p.N));
  DeviceBuffer<half_bits> scale(p.w.scale), zero(p.w.zero);
  d.q = q.get();
  d.scale = scale.half();
  d.zero = zero.half();
  tl::cuda::KernelOptions o = tl::cuda::runtime_kernel_options();
  o.use_marlin = true;
  tl::cuda::reset_dispatch_stats();
  p.C.poison();
  int rc = -1;
  CHECK(tl::cuda::quant_gemm(d, p.dA.half(), p.C.half(), p.M, nullptr, o, &rc) == tl::cuda::GemmPath::kMarlin);
  REQUIRE(rc == 0);
  TL_CUDA_THROW(cudaDeviceSynchronize());
  p.check(p.C.download(), "quant_gemm");
  const tl::cuda::DispatchStats st = tl::cuda::dispatch_stats();
  CHECK(st.fallbacks.empty());
  CHECK(st.marlin_kernels.at("decode") == 1);
  // A pack whose column count is neither N nor N padded is refused by name.
  d.marlin_N = p.NP + 128;
  tl::cuda::reset_dispatch_stats();
  p.C.poison();
  CHECK(tl::cuda::quant_gemm(d, p.dA.half(), p.C.half(), p.M, nullptr, o, &rc) == tl::cuda::GemmPath::kNativeInt4);
  CHECK(tl::cuda::dispatch_stats().fallbacks.count("marlin pack of 50432 columns for N = 50257") == 1);
  TL_CUDA_THROW(cudaDeviceSynchronize());
  p.check(p.C.download(), "quant_gemm native fallback");
}

}  // namespace tl::test
