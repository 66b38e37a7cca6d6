// The SwiGLU pair (marlin_swiglu_asymmetric, quant_swiglu): silu(A W_gate + b) * (A W_up + b)
// against the fp64 reference of the swiglu tier (libverify/reference_math.h), fused (the decode
// kernel's pair mode: M <= 16, both of its launch shapes, grouped and per-column scales, cluster
// and flat combines) and unfused (M > 16); bitwise reproducible, workspace left zeroed, a fault
// in one group of W_up alone caught; and the dispatcher's choice and counters.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/nibbles.h"
#include "cuda/tl_kernels.h"
#include "gpu_support/gpu_test_util.h"
#include "libverify/planted_faults.h"
#include "libverify/random_weights.h"
#include "libverify/reference_math.h"
#include "libverify/tolerances.h"

namespace tl::test {
namespace {

// One random pair [K, F] with its Marlin sections, biases and activations, on the host and the device.
struct Pair {
  int M, K, F, gs;
  tl::QuantWeight gate, up;
  std::vector<float> bias_gate, bias_up;
  std::vector<half_bits> A;
  DeviceBuffer<half_bits> dA, dC, scratch, s[2], delta[2];
  DeviceBuffer<int32_t> B[2];
  DeviceBuffer<float> db[2];
  DeviceBuffer<int> work;

  Pair(int M_, int K_, int F_, int gs_, uint64_t stream, bool biases)
      : M(M_), K(K_), F(F_), gs(gs_) {
    tl::verify::Rng rng(test_seed() ^ (stream * 0x9E3779B97F4A7C15ull));
    gate = tl::verify::random_packed_weight(rng, "gate", K, F, gs);
    up = tl::verify::random_packed_weight(rng, "up", K, F, gs);
    A = tl::verify::random_halves(rng, M, K);
    if (biases) {
      std::normal_distribution<float> d(0.f, 1.f);
      for (int n = 0; n < F; ++n) bias_gate.push_back(d(rng)), bias_up.push_back(d(rng));
    }
    dA = DeviceBuffer<half_bits>(A);
    dC = DeviceBuffer<half_bits>(size_t(M) * F);
    scratch = DeviceBuffer<half_bits>(size_t(M) * F);
    const tl::QuantWeight* w[2] = {&gate, &up};
    for (int i = 0; i < 2; ++i) {
      B[i] = DeviceBuffer<int32_t>(w[i]->marlin->B);
      s[i] = DeviceBuffer<half_bits>(w[i]->marlin->s);
      delta[i] = DeviceBuffer<half_bits>(w[i]->marlin->delta);
    }
    if (biases) {
      db[0] = DeviceBuffer<float>(bias_gate);
      db[1] = DeviceBuffer<float>(bias_up);
    }
    work = DeviceBuffer<int>(tl::cuda::marlin_workspace_ints(2 * F));
    work.zero();
  }
  tl::cuda::MarlinOperands operands(int i) const { return {B[i].get(), s[i].half(), delta[i].half()}; }
  const float* bias(int i) const { return (i == 0 ? bias_gate : bias_up).empty() ? nullptr : db[i].get(); }
  std::string name() const {
    return "M=" + std::to_string(M) + " K=" + std::to_string(K) + " F=" + std::to_string(F) +
           " g=" + std::to_string(gs == K ? -1 : gs) + (bias_gate.empty() ? "" : " biases");
  }

  std::vector<half_bits> run(const tl::cuda::KernelOptions& options) {
    dC.poison();
    scratch.poison();
    TL_REQUIRE_LAUNCH(tl::cuda::marlin_swiglu_asymmetric(dA.half(), operands(0), operands(1), bias(0), bias(1),
                                                         dC.half(), scratch.half(), work.get(), M, F, K, gs, nullptr,
                                                         options));
    return dC.download();
  }

  // The swiglu tier's reference and bounds, on every row (the reference is at most 64 rows).
  CompareResult check(const std::vector<half_bits>& out, const std::string& what) const {
    const tl::verify::CaseReference r =
        tl::verify::swiglu_reference(A.data(), M, gate, up, bias_gate, bias_up, tl::verify::kReferenceRowsMax);
    return compare_rows(what + " " + name(), out, r.rows, F, Reference{r.ref, r.sigma}, tl::verify::kSwigluMaxUlp,
                        tl::verify::kSwigluMaxRel);
  }
};

}  // namespace

TEST_CASE("swiglu pair: fused and unfused routes vs fp64, reproducible, workspace left zeroed") {
  struct Shape {
    int K, F;
    std::vector<int> Ms;
  };
  // 4096 x 1024: several units per warp; 1024 x 6400: 100 pair slices (more than fit in clusters
  // at once); 8192 x 128: one slice pair across many blocks; the rows 1..16 of both launch shapes
  // and 17 / 40 on the unfused sequence.
  std::vector<Shape> shapes = {{4096, 1024, {1, 5, 8, 9, 16, 17, 40}}, {1024, 6400, {1, 16}}, {8192, 128, {1, 9, 16}}};
  if (quick_mode()) shapes = {{4096, 1024, {1, 16, 17}}, {8192, 128, {9}}};
  uint64_t stream = 9100;
  int fused = 0, unfused = 0;
  for (const bool clusters : {true, false})
    for (const Shape& sh : shapes)
      for (const int gs : {128, sh.K})
        for (const int M : sh.Ms) {
          ++stream;
          Pair p(M, sh.K, sh.F, gs, stream, /*biases=*/stream % 2 == 0);
          tl::cuda::KernelOptions options;
          options.clusters = clusters;
          CAPTURE(clusters);
          CAPTURE(p.name());
          const std::string route = tl::cuda::marlin_swiglu_route(M, p.F, p.K, gs, options);
          CHECK(route == (M <= 16 ? "fused" : "unfused"));
          (route == "fused" ? fused : unfused)++;
          const std::vector<half_bits> out = p.run(options);
          CHECK_MESSAGE(count_nonfinite(out) == 0, "unwritten outputs");
          const CompareResult r = p.check(out, route);
          CHECK(r.max_ulp <= tl::verify::kSwigluMaxUlp);
          CHECK(r.rel_fro <= tl::verify::kSwigluMaxRel);
          CHECK(p.run(options) == out);  // bitwise the same on a second run
          for (int v : p.work.download()) REQUIRE_MESSAGE(v == 0, "workspace not zeroed");
        }
  CHECK(fused > 0);
  CHECK(unfused > 0);
}

TEST_CASE("swiglu pair: a fault in one group of W_up alone fails the pair's check, fused and unfused") {
  for (const int M : {1, 16, 40}) {
    Pair p(M, 2048, 512, 128, 9200 + uint64_t(M), true);
    CAPTURE(p.name());
    tl::QuantWeight bad = p.up;
    tl::verify::plant_fault(bad, tl::verify::PlantedFault::kOneGroupScales);
    p.s[1].upload(bad.marlin->s);
    const CompareResult r = p.check(p.run({}), "planted");
    CHECK_MESSAGE(r.max_ulp > tl::verify::kSwigluMaxUlp, "the fault went unseen: max ULP " << r.max_ulp);
  }
}

TEST_CASE("quant_swiglu: the pair on Marlin when both weights pass, counted; separate GEMMs otherwise") {
  Pair p(4, 1024, 512, 128, 9300, true);
  auto weight = [&](int i, const tl::QuantWeight& w) {
    tl::cuda::DeviceQuantWeight d;
    d.name = i == 0 ? "gate" : "up";
    d.K = int(w.K);
    d.N = int(w.N);
    d.group_size = int(w.group_size);
    d.marlin_B = p.B[i].get();
    d.marlin_s = p.s[i].half();
    d.marlin_delta = p.delta[i].half();
    d.marlin_workspace = p.work.get();
    return d;
  };
  // The native view too (quant_swiglu's separate route runs it when Marlin is refused).
  DeviceBuffer<uint8_t> q[2];
  DeviceBuffer<half_bits> scale[2], zero[2];
  tl::cuda::DeviceQuantWeight w[2];
  const tl::QuantWeight* hw[2] = {&p.gate, &p.up};
  for (int i = 0; i < 2; ++i) {
    w[i] = weight(i, *hw[i]);
    q[i] = DeviceBuffer<uint8_t>(pack_nibbles(hw[i]->q.data(), hw[i]->K, hw[i]->N));
    scale[i] = DeviceBuffer<half_bits>(hw[i]->scale);
    zero[i] = DeviceBuffer<half_bits>(hw[i]->zero);
    w[i].q = q[i].get();
    w[i].scale = scale[i].half();
    w[i].zero = zero[i].half();
  }
  DeviceBuffer<int> pair_work(tl::cuda::marlin_workspace_ints(2 * p.F));
  pair_work.zero();
  tl::cuda::KernelOptions options;
  options.use_marlin = true;
  auto run = [&](const tl::cuda::DeviceQuantWeight& up, int* work) {
    p.dC.poison();
    int rc = -1;
    const tl::cuda::GemmPath path = tl::cuda::quant_swiglu(w[0], up, p.bias(0), p.bias(1), p.dA.half(), p.dC.half(),
                                                           p.scratch.half(), work, p.M, nullptr, options, &rc);
    REQUIRE(rc == 0);
    TL_CUDA_THROW(cudaDeviceSynchronize());
    const CompareResult r = p.check(p.dC.download(), tl::cuda::gemm_path_name(path));
    CHECK(r.nonfinite == 0);
    CHECK(r.max_ulp <= tl::verify::kSwigluMaxUlp);
    return path;
  };
  tl::cuda::reset_dispatch_stats();
  CHECK(run(w[1], pair_work.get()) == tl::cuda::GemmPath::kMarlin);
  tl::cuda::DispatchStats st = tl::cuda::dispatch_stats();
  CHECK(st.swiglu.at("fused") == 1);
  CHECK(st.dispatches[int(tl::cuda::GemmPath::kMarlin)] == 2);
  CHECK(st.marlin_kernels.at("decode") == 2);
  // Up without a Marlin pack: each weight by quant_gemm (gate on Marlin, up native), then the pass.
  tl::cuda::DeviceQuantWeight up_native = w[1];
  up_native.marlin_B = nullptr;
  tl::cuda::reset_dispatch_stats();
  run(up_native, pair_work.get());
  st = tl::cuda::dispatch_stats();
  CHECK(st.swiglu.at("separate (marlin: no marlin pack)") == 1);
  CHECK(st.dispatches[int(tl::cuda::GemmPath::kMarlin)] == 1);
  CHECK(st.dispatches[int(tl::cuda::GemmPath::kNativeInt4)] == 1);
  // No pair workspace: never fused.
  tl::cuda::reset_dispatch_stats();
  run(w[1], nullptr);
  CHECK(tl::cuda::dispatch_stats().swiglu.at("separate (no pair workspace)") == 1);
}

}  // namespace tl::test
