// Marlin kernel tests: the symmetric GEMM, the fused asymmetric wrapper and the unfused
// composition (GEMM + a_group_sum + correction_accum) against fp64 references, on codes and
// scales from the real packer (libconvert), over M x K x N x groupsize; plus the rc contract,
// the workspace staying zeroed and bitwise determinism.
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cuda/cublas_gemm.h"
#include "cuda/device_buffer.h"
#include "cuda/marlin_gemm.h"
#include "cuda/tl_kernels.h"
#include "core/half.h"
#include "gpu_support/gpu_test_util.h"
#include "quant_case.h"

namespace tl::test {
namespace {

// GEMM output (rounded once) + correction (fp32) rounded again: one more 0.5 ULP of C_marlin
// on top of the bound against W_hat, measured at the floor of ref_composed, whose sigma holds
// C_marlin (activations of one sign make it far larger than the result: 11 ULP of the result
// were seen on the H200 at K = 8192 with activations in [3, 5] before the term was there).
constexpr double kMaxUlpComposed = kMaxUlpVsWHat + 1.0;

struct ShapeCases {
  int64_t K, N;
  std::vector<int64_t> Ms;
};

std::vector<ShapeCases> marlin_shapes() {
  const std::vector<int64_t> all_m{1, 7, 16, 17, 64, 100, 256, 1024};
  if (quick_mode())
    return {{128, 128, {1, 17}}, {256, 384, {7, 64, 100}}, {1024, 512, {1, 16}}};
  return {
      {128, 128, all_m},
      {256, 384, {1, 7, 9, 16, 17, 64, 100, 256, 1024}},  // N % 256 != 0: the 128x128 tile also serves M > 16
      {384, 640, all_m},
      {1024, 512, {1, 16, 17, 64, 100, 1024}},
      {4096, 4096, {1, 7, 17, 256}},
      {11008, 256, {1, 64}},      // Llama-2-7B's K (86 k-tiles of 128)
      {128, 8192, {1, 100}},      // one k-tile: every block owns whole n-tiles
      {8192, 128, {1, 9, 16, 17}},  // one n-tile: many blocks reduce into one tile
      {8192, 8192, {1, 64, 1024}},
  };
}

struct Gpu {
  DeviceBuffer<half_bits> A, s, delta, C;
  DeviceBuffer<int32_t> B;
  DeviceBuffer<int> workspace;
  DeviceBuffer<float> a_sum;
  explicit Gpu(const QuantCase& c)
      : A(c.A), s(c.s_marlin), delta(c.delta), C(size_t(c.M * c.N)), B(c.B),
        workspace(tl::cuda::marlin_workspace_ints(int(c.N))), a_sum(size_t(c.M * c.G())) {
    workspace.zero();
  }
};

void check_case(const QuantCase& c, const tl::cuda::KernelOptions& options = {}) {
  Gpu g(c);
  const int M = int(c.M), N = int(c.N), K = int(c.K);
  const std::vector<int64_t> rows = rows_to_check(c.M, c.K, c.N);
  // Grouped scales are applied to the fp16 weights (rounded), per-column ones in fp32 -- except
  // on the dequantize + cuBLAS floor and the Hopper kernel, which round every weight to fp16 once.
  // The Hopper kernel folds per-column scales into the fp16 weights as well.
  using tl::cuda::detail::MarlinRoute;
  const MarlinRoute route = tl::cuda::detail::marlin_route(M, N, K, int(c.group_size), options);
  const bool grouped = c.marlin_gs() > 0 || route == MarlinRoute::kDequant || route == MarlinRoute::kHopper;

  // Symmetric: C = A (q - 8) s.
  g.C.poison();
  TL_REQUIRE_LAUNCH(tl::cuda::marlin_int4_tc_gemm(g.A.half(), g.B.get(), g.C.half(), g.s.half(),
                                                  g.workspace.get(), M, N, K, int(c.group_size),
                                                  nullptr, options));
  std::vector<half_bits> sym = g.C.download();
  CHECK_MESSAGE(count_nonfinite(sym) == 0, c.name() << ": unwritten outputs");
  const Reference ref_sym = ref_marlin(c, rows);
  const CompareResult rs =
      compare_rows("marlin " + c.name(), sym, rows, c.N, ref_sym,
                   grouped ? kMaxUlpRoundedWeights : kMaxUlpExactWeights, kMaxRelFro);
  CHECK_MESSAGE(rs.nonfinite == 0, c.name());
  CHECK_MESSAGE(rs.max_ulp <= (grouped ? kMaxUlpRoundedWeights : kMaxUlpExactWeights),
                c.name() << " max scaled ULP " << rs.max_ulp);
  CHECK_MESSAGE(rs.rel_fro <= kMaxRelFro, c.name() << " rel " << rs.rel_fro);

  // The unfused composition on the symmetric output: + a_group_sum * delta.
  const Reference ref_hat = ref_w_hat(c, rows);
  TL_REQUIRE_LAUNCH(tl::cuda::a_group_sum(g.A.half(), g.a_sum.get(), M, K, int(c.group_size),
                                          nullptr));
  TL_REQUIRE_LAUNCH(tl::cuda::correction_accum(g.C.half(), g.a_sum.get(), g.delta.half(), M, N, K,
                                               int(c.group_size), nullptr));
  const CompareResult rc = compare_rows("marlin+correction " + c.name(), g.C.download(), rows,
                                        c.N, ref_composed(c, rows), kMaxUlpComposed, kMaxRelFro);
  CHECK_MESSAGE(rc.nonfinite == 0, c.name());
  CHECK_MESSAGE(rc.max_ulp <= kMaxUlpComposed, c.name() << " composed " << rc.max_ulp);
  CHECK_MESSAGE(rc.rel_fro <= kMaxRelFro, c.name() << " composed rel " << rc.rel_fro);

  // Fused asymmetric wrapper: C = A W_hat in one launch.
  g.C.poison();
  TL_REQUIRE_LAUNCH(tl::cuda::marlin_mm_asymmetric(g.A.half(), g.B.get(), g.s.half(),
                                                   g.delta.half(), g.C.half(), g.workspace.get(),
                                                   M, N, K, int(c.group_size), nullptr, options));
  const std::vector<half_bits> asym = g.C.download();
  CHECK_MESSAGE(count_nonfinite(asym) == 0, c.name() << ": unwritten outputs (asym)");
  // Against what the kernel computes ((q - 8) s + delta, stored delta): the tight check ...
  const CompareResult rd = compare_rows("marlin_mm_asymmetric (delta form) " + c.name(), asym, rows,
                                        c.N, ref_delta_form(c, rows), kMaxUlpRoundedWeights, kMaxRelFro);
  CHECK_MESSAGE(rd.max_ulp <= kMaxUlpRoundedWeights, c.name() << " asym " << rd.max_ulp);
  CHECK_MESSAGE(rd.rel_fro <= kMaxRelFro, c.name() << " asym rel " << rd.rel_fro);
  // ... and end to end against A W_hat, which includes the rounding of the stored delta.
  const CompareResult ra = compare_rows("marlin_mm_asymmetric (W_hat) " + c.name(), asym, rows, c.N,
                                        ref_hat, kMaxUlpVsWHat, kMaxRelFro);
  CHECK_MESSAGE(ra.max_ulp <= kMaxUlpVsWHat, c.name() << " asym vs W_hat " << ra.max_ulp);
  CHECK_MESSAGE(ra.rel_fro <= kMaxRelFro, c.name() << " asym vs W_hat rel " << ra.rel_fro);

  // The arrival counters are back at zero for the next call.
  for (int v : g.workspace.download()) REQUIRE_MESSAGE(v == 0, c.name() << ": workspace not zeroed");
  MESSAGE(c.name() << "  sym: " << rs.max_ulp << " ULP rel " << rs.rel_fro
                   << "  asym: " << rd.max_ulp << " ULP (vs W_hat " << ra.max_ulp << ") rel "
                   << ra.rel_fro
                   << "  composed: " << rc.max_ulp << " ULP");
}

}  // namespace

TEST_CASE("marlin: symmetric GEMM, fused wrapper and GEMM + correction pair vs fp64") {
  uint64_t stream = 1000;
  for (const ShapeCases& sc : marlin_shapes())
    for (int64_t gs : {int64_t(-1), int64_t(128)})
      for (int64_t M : sc.Ms) {
        const QuantCase c = make_quant_case(M, sc.K, sc.N, gs < 0 ? sc.K : gs, ++stream);
        CAPTURE(c.name());
        check_case(c);
      }
}

TEST_CASE("marlin: the dequantize + cuBLAS floor (prefill), whole and in column chunks") {
  uint64_t stream = 5000;
  struct Shape {
    int64_t K, N;
    std::vector<int64_t> Ms;
    size_t scratch;  // 0: the default 64 MiB (one chunk here); else a cap that forces chunks
  };
  const std::vector<Shape> shapes =
      quick_mode() ? std::vector<Shape>{{256, 384, {17, 100}, 0}, {384, 640, {64}, 384 * 128 * 2}}
                   : std::vector<Shape>{{128, 128, {17, 33, 63, 64, 100}, 0},
                                        {256, 384, {17, 256, 1024}, 0},
                                        {384, 640, {17, 100, 256}, 384 * 128 * 2},       // 5 chunks of 128
                                        {1024, 1152, {64, 1024}, 1024 * 256 * 2 + 100},  // 4 of 256, 1 of 128
                                        {4096, 4096, {256}, 0},
                                        {11008, 256, {100}, 0}};
  for (const Shape& sh : shapes)
    for (int64_t gs : {int64_t(-1), int64_t(128)})
      for (int64_t M : sh.Ms) {
        tl::cuda::KernelOptions o;
        o.dequant_min_m = 17;
        o.dequant_scratch_bytes = sh.scratch;
        const QuantCase c = make_quant_case(M, sh.K, sh.N, gs < 0 ? sh.K : gs, ++stream);
        CAPTURE(c.name());
        tl::cuda::GemmPlan plan;
        REQUIRE(tl::cuda::marlin_plan(int(M), int(sh.N), int(sh.K), int(c.group_size), true, o, &plan) == 0);
        CHECK(plan.kernel == "dequant");
        const int cols = tl::cuda::detail::dequant_chunk_cols(int(sh.N), int(sh.K), o);
        CHECK(plan.slices == int((sh.N + cols - 1) / cols));
        if (sh.scratch > 0) CHECK(plan.slices > 1);
        check_case(c, o);
      }
  // Off by default in the launchers (the tiers test the tiled kernel), on in the runtime's options.
  tl::cuda::GemmPlan plan;
  REQUIRE(tl::cuda::marlin_plan(1024, 4096, 4096, 128, true, tl::cuda::KernelOptions{}, &plan) == 0);
  CHECK(plan.kernel == "tiled");
  CHECK(tl::cuda::runtime_kernel_options().dequant_min_m == tl::cuda::kDefaultDequantMinM);
}

TEST_CASE("marlin: the Hopper kernel (wgmma, sm_90) at every tile variant and grid mode") {
  // Each tile variant (32-, 64- and 128-token tiles), a last tile row cut by M, a ragged N
  // (N % 256 == 128: a tile of two Marlin tiles), per-column and grouped scales, the persistent
  // grid with several tiles per CTA, the k split over clusters of 2 to 8 CTAs, with clusters
  // walking several tiles, and stream-K (tiles cut into 2 to many pieces between CTAs), each
  // against the fp64 references (both wrappers), bitwise reproducible, planned as it ran.
  int device = 0;
  TL_CUDA_THROW(cudaGetDevice(&device));
  tl::cuda::KernelOptions o;
  o.hopper_kernel = true;
  tl::cuda::GemmPlan plan;
  REQUIRE(tl::cuda::marlin_plan(64, 4096, 4096, 128, true, o, &plan) == 0);
  if (!tl::cuda::hopper_kernel_available(device)) {
    CHECK(plan.kernel != "hopper");  // another GPU: the option changes nothing
    MESSAGE("not an sm_90 GPU: the Hopper kernel is not run");
    return;
  }
  CHECK(plan.kernel == "hopper");
  struct Shape {
    int64_t K, N;
    std::vector<int64_t> Ms;
  };
  const std::vector<Shape> shapes =
      quick_mode() ? std::vector<Shape>{{256, 384, {17, 100}}, {4096, 4096, {33, 256}}}
                   : std::vector<Shape>{{128, 128, {17, 32, 33, 64, 65, 129}},   // one k-stage pair, half tile
                                        {256, 384, {17, 40, 100, 256}},          // ragged N, 2 tiles
                                        {1024, 1280, {17, 63, 64, 128, 200}},    // ragged, 5 tiles
                                        {4096, 4096, {17, 33, 100, 256, 1024}},  // splits 8 / 4 / ..
                                        {11008, 4096, {64, 256}},                // 172 stages
                                        {4096, 12288, {17, 40, 1024, 4096}},     // split rounds; persistent
                                        {8192, 256, {17, 100}}};                 // one n-tile, split 8
  uint64_t stream = 8000;
  std::set<int> splits, rows;
  bool several = false, split_rounds = false, ragged = false, cut = false, streamk = false;
  std::set<int> sk_groups;
  auto check_reproducible = [&](const QuantCase& c, const tl::cuda::KernelOptions& opt) {
    Gpu g(c);
    std::vector<half_bits> first;
    for (int run = 0; run < 2; ++run) {
      g.C.poison();
      TL_REQUIRE_LAUNCH(tl::cuda::marlin_mm_asymmetric(g.A.half(), g.B.get(), g.s.half(), g.delta.half(),
                                                       g.C.half(), g.workspace.get(), int(c.M), int(c.N),
                                                       int(c.K), int(c.group_size), nullptr, opt));
      if (run == 0)
        first = g.C.download();
      else
        CHECK_MESSAGE(g.C.download() == first, "second run differs");
    }
  };
  for (const Shape& sh : shapes)
    for (int64_t gs : {int64_t(-1), int64_t(128)})
      for (int64_t M : sh.Ms) {
        const QuantCase c = make_quant_case(M, sh.K, sh.N, gs < 0 ? sh.K : gs, ++stream);
        CAPTURE(c.name());
        REQUIRE(tl::cuda::marlin_plan(int(M), int(sh.N), int(sh.K), int(c.group_size), true, o, &plan) == 0);
        REQUIRE(plan.kernel == "hopper");
        splits.insert(plan.k_splits);
        rows.insert(plan.rows_per_block);
        several = several || (plan.k_splits == 1 && !plan.stream_k && plan.tiles_per_block >= 2);
        streamk = streamk || plan.stream_k;
        split_rounds = split_rounds || (plan.k_splits > 1 && plan.tiles_per_block >= 2);
        ragged = ragged || plan.ragged_n;
        cut = cut || plan.last_slice_rows < plan.rows_per_block;
        MESSAGE(c.name() << ": " << plan.blocks << " CTAs, split " << plan.k_splits << (plan.stream_k ? ", stream-K" : "")
                         << ", " << plan.rows_per_block << "-row tiles, " << plan.tiles_per_block << " tiles per CTA");
        check_case(c, o);
        check_reproducible(c, o);
      }
  // Stream-K forced on where the plan splits or runs whole tiles (small layers: a tile cut
  // into many pieces, a run inside one tile; ragged N; a cut last tile row; each variant; row
  // groups of 2, 3 and 8 CTAs, and 9 row tiles, past a group: the stages end to end), and
  // forced off where the plan takes it (the data-parallel persistent grid).
  struct Forced {
    int64_t K, N, M;
    int stream_k;
  };
  const std::vector<Forced> forced_sk =
      quick_mode() ? std::vector<Forced>{{4096, 4096, 33, 1}, {4096, 12288, 1024, -1}, {1024, 1280, 200, 1},
                                         {512, 2304, 300, 1}, {256, 1280, 1024, 1}}
                   : std::vector<Forced>{{4096, 4096, 17, 1}, {4096, 4096, 100, 1}, {256, 384, 40, 1},
                                         {1024, 1280, 200, 1}, {8192, 256, 17, 1}, {11008, 4096, 256, 1},
                                         {4096, 12288, 1024, -1}, {4096, 12288, 40, -1}, {512, 2304, 300, 1},
                                         {256, 1280, 1024, 1}, {256, 384, 1100, 1}};
  for (const Forced& f : forced_sk)
    for (int64_t gs : {int64_t(-1), int64_t(128)}) {
      tl::cuda::KernelOptions fo = o;
      fo.hopper_stream_k = f.stream_k;
      const QuantCase c = make_quant_case(f.M, f.K, f.N, gs < 0 ? f.K : gs, ++stream);
      CAPTURE(c.name());
      CAPTURE(f.stream_k);
      REQUIRE(tl::cuda::marlin_plan(int(f.M), int(f.N), int(f.K), int(c.group_size), true, fo, &plan) == 0);
      REQUIRE(plan.kernel == "hopper");
      CHECK(plan.stream_k == (f.stream_k > 0));
      streamk = streamk || plan.stream_k;
      if (plan.stream_k) sk_groups.insert(plan.stream_k_group);
      several = several || (plan.k_splits == 1 && !plan.stream_k && plan.tiles_per_block >= 2);
      check_case(c, fo);
      check_reproducible(c, fo);
    }
  // A split forced onto more tiles than its clusters run at once: each cluster walks several
  // tiles, reusing its partial buffers (the cluster barriers' phases over rounds).
  for (int64_t M : quick_mode() ? std::vector<int64_t>{17} : std::vector<int64_t>{17, 64}) {
    tl::cuda::KernelOptions forced = o;
    forced.hopper_split = 4;
    const QuantCase c = make_quant_case(M, 4096, 12288, 128, ++stream);
    CAPTURE(c.name());
    REQUIRE(tl::cuda::marlin_plan(int(M), 12288, 4096, 128, true, forced, &plan) == 0);
    CHECK(plan.k_splits == 4);
    split_rounds = split_rounds || plan.tiles_per_block >= 2;
    check_case(c, forced);
  }
  // The runtime's options: the Hopper kernel from M = 17, the floor from kDefaultHopperMaxM.
  const tl::cuda::KernelOptions rt = tl::cuda::runtime_kernel_options();
  REQUIRE(tl::cuda::marlin_plan(17, 4096, 4096, 128, true, rt, &plan) == 0);
  CHECK(plan.kernel == "hopper");
  REQUIRE(tl::cuda::marlin_plan(tl::cuda::kDefaultHopperMaxM - 1, 4096, 4096, 128, true, rt, &plan) == 0);
  CHECK(plan.kernel == "hopper");
  REQUIRE(tl::cuda::marlin_plan(tl::cuda::kDefaultHopperMaxM, 4096, 4096, 128, true, rt, &plan) == 0);
  CHECK(plan.kernel == "dequant");
  if (!quick_mode()) {
    CHECK(rows == std::set<int>{32, 64, 128});
    CHECK(splits.count(1));
    CHECK(splits.count(2) + splits.count(4) + splits.count(8) >= 2);
    CHECK(several);
    CHECK(streamk);
    CHECK(sk_groups.count(1) == 1);  // one row tile, or more than a raster group of them
    CHECK(sk_groups.size() >= 3);     // and row groups of two sizes at least
    CHECK(split_rounds);  // a cluster reuses its partial buffers tile after tile
    CHECK(ragged);
    CHECK(cut);
  }
}

TEST_CASE("marlin: a crossover table moves one layer shape's hand-over, and only on its own GPU") {
  // A table measured here (bench_kernels --tune) replaces the options' crossovers for the
  // shapes it lists -- (K, N, group size), the group size part of the key -- and leaves every
  // other shape on the options' own; a table of another GPU is refused, not installed.
  int device = 0;
  cudaDeviceProp prop{};
  TL_CUDA_THROW(cudaGetDevice(&device));
  TL_CUDA_THROW(cudaGetDeviceProperties(&prop, device));
  const bool hopper = tl::cuda::hopper_kernel_available(device);
  auto table = std::make_shared<tl::MarlinCrossovers>();
  table->device = tl::cuda::cuda_device_label(prop);
  table->shapes = {{4096, 1024, 128, 64, 64}, {4096, 1024, 4096, 0, 0}};
  tl::cuda::KernelOptions rt = tl::cuda::runtime_kernel_options();
  REQUIRE(tl::cuda::use_crossovers(&rt, table) == "");
  REQUIRE(rt.crossovers.get() == table.get());
  auto kernel = [&](int M, int N, int K, int gs) {
    tl::cuda::GemmPlan plan;
    REQUIRE(tl::cuda::marlin_plan(M, N, K, gs, true, rt, &plan) == 0);
    return std::string(plan.kernel);
  };
  // The listed grouped shape: the floor from M = 64 on (the defaults would keep the Hopper
  // kernel to kDefaultHopperMaxM, or the tiled kernel to kDefaultDequantMinM).
  CHECK(kernel(63, 1024, 4096, 128) == (hopper ? "hopper" : "tiled"));
  CHECK(kernel(64, 1024, 4096, 128) == "dequant");
  // Its per-column twin: no hand-over at all (0), even at M = 4096.
  CHECK(kernel(4096, 1024, 4096, 4096) == (hopper ? "hopper" : "tiled"));
  // A shape the table does not list keeps the options' crossovers.
  CHECK(kernel(100, 2048, 4096, 128) == (hopper ? "hopper" : "tiled"));
  CHECK(kernel(tl::cuda::kDefaultHopperMaxM, 2048, 4096, 128) == "dequant");
  // The result where the table moved the route, against the fp64 references.
  uint64_t stream = 7500;
  for (int64_t M : {int64_t(63), int64_t(100)}) {
    const QuantCase c = make_quant_case(M, 4096, 1024, 128, ++stream);
    CAPTURE(c.name());
    check_case(c, rt);
  }
  // Another GPU's table changes nothing.
  auto other = std::make_shared<tl::MarlinCrossovers>(*table);
  other->device = "Some Other GPU (sm_00)";
  tl::cuda::KernelOptions rt2 = tl::cuda::runtime_kernel_options();
  const std::string why = tl::cuda::use_crossovers(&rt2, other);
  CHECK(why.find("measured on Some Other GPU (sm_00)") != std::string::npos);
  CHECK(!rt2.crossovers);
}

TEST_CASE("marlin: tiled kernel remainder slices and its two-blocks-per-SM mode") {
  // M > 16 runs in slices of 64 rows; a last slice of 1, 8 or 16 rows takes the tiled kernel's
  // 16-row configurations (MB = 1), whose blocks-per-SM choice depends on the layer size. M <= 16
  // with the decode kernel switched off runs those configurations alone, with one and with two
  // blocks per SM forced on a layer large enough to fill the GPU (8192 x 2048: 8192 tiles).
  uint64_t stream = 7000;
  for (int64_t M : {int64_t(65), int64_t(72), int64_t(80), int64_t(129), int64_t(144)})
    for (int64_t gs : {int64_t(128), int64_t(-1)}) {
      const QuantCase c = make_quant_case(M, 1024, 512, gs < 0 ? 1024 : gs, ++stream);
      CAPTURE(c.name());
      check_case(c);
    }
  for (int blocks : {1, 2}) {
    tl::cuda::KernelOptions o;
    o.decode_kernel = false;
    o.tiled_small_m_blocks_per_sm = blocks;
    for (int64_t M : {int64_t(1), int64_t(9), int64_t(16)}) {
      const QuantCase c = make_quant_case(M, 8192, 2048, 128, ++stream);
      CAPTURE(blocks);
      CAPTURE(c.name());
      check_case(c, o);
    }
  }
}

TEST_CASE("marlin: activations far from zero mean") {
  // The decode kernel (M <= 16) keeps half of each fragment at 1024 + q and takes away
  // 1032 * (sum of the activations) per 128-row group in fp32: with activations of one sign
  // that sum is large next to the result and the subtraction cancels. Activations uniform in
  // [3, 5] (mean 4, spread 1) must still meet the same bounds as zero-mean ones.
  uint64_t stream = 5000;
  for (int64_t gs : {int64_t(128), int64_t(-1)})
    for (int64_t M : {int64_t(1), int64_t(8), int64_t(16)}) {
      QuantCase c = make_quant_case(M, 8192, 256, gs < 0 ? 8192 : gs, ++stream);
      for (half_bits& a : c.A) a = float_to_half(half_to_float(a) + 4.0f);
      CAPTURE(c.name());
      check_case(c);
    }
}

TEST_CASE("marlin: group size equal to K is per-column") {
  // K = 128 with group_size 128 has one group; the packer permutes its scales per column
  // (Marlin's groupsize -1), and the kernel must read them that way given group_size 128 == K.
  const QuantCase c = make_quant_case(5, 128, 256, 128, 77);
  Gpu g(c);
  g.C.poison();
  TL_REQUIRE_LAUNCH(tl::cuda::marlin_int4_tc_gemm(g.A.half(), g.B.get(), g.C.half(), g.s.half(),
                                                  g.workspace.get(), 5, 256, 128, 128, nullptr));
  const std::vector<int64_t> rows = rows_to_check(c.M, c.K, c.N);
  const CompareResult r = compare_rows("marlin gs==K", g.C.download(), rows, c.N,
                                       ref_marlin(c, rows), kMaxUlpExactWeights, kMaxRelFro);
  CHECK(r.max_ulp <= kMaxUlpExactWeights);
}

TEST_CASE("marlin: the result is bitwise reproducible") {
  // The cross-block reduction adds the partial tiles in block order, whatever the arrival order.
  const QuantCase c = make_quant_case(quick_mode() ? 16 : 64, 8192, 512, 128, 78);
  Gpu g(c);
  std::vector<half_bits> first;
  for (int run = 0; run < 3; ++run) {
    g.C.poison();
    TL_REQUIRE_LAUNCH(tl::cuda::marlin_mm_asymmetric(g.A.half(), g.B.get(), g.s.half(),
                                                     g.delta.half(), g.C.half(), g.workspace.get(),
                                                     int(c.M), int(c.N), int(c.K), 128, nullptr));
    const std::vector<half_bits> out = g.C.download();
    if (run == 0)
      first = out;
    else
      CHECK_MESSAGE(out == first, "run " << run << " differs from run 0");
  }
}

TEST_CASE("marlin: decode kernel, cluster and flat cross-block reductions") {
  // On sm_90 the decode kernel (M <= 16) combines slices shared by several blocks inside a
  // thread-block cluster (distributed shared memory) where that keeps the warp stripes as
  // short; elsewhere, or with KernelOptions::clusters off, through global slots and arrival counters.
  // Both must meet the bounds and be bitwise reproducible. The shapes put one slice across
  // many blocks (8192 x 128), eight slices of 32 units (4096 x 1024), ten short slices
  // (1024 x 1280) and 101 slices, more than fit in clusters at once, so the last cluster owns
  // fewer slices than the others (1024 x 12928).
  struct Shape {
    int64_t K, N, M;
  };
  std::vector<Shape> shapes = {{8192, 128, 1},   {8192, 128, 9},   {8192, 128, 16},
                               {4096, 1024, 1},  {4096, 1024, 16}, {1024, 1280, 3},
                               {1024, 12928, 1}, {1024, 12928, 16}};
  if (quick_mode()) shapes = {{8192, 128, 16}, {4096, 1024, 1}, {1024, 12928, 16}};
  int device = 0, major = 0;
  TL_CUDA_THROW(cudaGetDevice(&device));
  TL_CUDA_THROW(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  uint64_t stream = 6000;
  for (const bool clusters : {true, false}) {
    tl::cuda::KernelOptions options;
    options.clusters = clusters;
    int clustered = 0;
    for (const Shape& sh : shapes)
      for (int64_t gs : {int64_t(128), int64_t(-1)}) {
        const QuantCase c = make_quant_case(sh.M, sh.K, sh.N, gs < 0 ? sh.K : gs, ++stream);
        CAPTURE(clusters);
        CAPTURE(c.name());
        tl::cuda::detail::SmallMGrid grid{};
        REQUIRE(tl::cuda::detail::marlin_small_m_grid(int(c.M), int(c.N), int(c.K), int(c.group_size), true,
                                                      options, &grid) == 0);
        clustered += grid.cluster > 0;
        check_case(c, options);
        Gpu g(c);
        std::vector<half_bits> first;
        for (int run = 0; run < 2; ++run) {
          g.C.poison();
          TL_REQUIRE_LAUNCH(tl::cuda::marlin_mm_asymmetric(
              g.A.half(), g.B.get(), g.s.half(), g.delta.half(), g.C.half(), g.workspace.get(),
              int(c.M), int(c.N), int(c.K), int(c.group_size), nullptr, options));
          if (run == 0)
            first = g.C.download();
          else
            CHECK_MESSAGE(g.C.download() == first, "second run differs");
        }
      }
    if (!clusters || major < 9)
      CHECK(clustered == 0);
    else
      CHECK_MESSAGE(clustered > 0, "sm_90: no shape ran in cluster mode");
  }
}

TEST_CASE("marlin: decode kernel as a programmatic dependent (PDL): a ping-pong chain, bitwise the plain launches") {
  // KernelOptions::dependent_launch: each decode GEMM may start while the one before it on the
  // stream finishes, reading only weights until griddep_wait. A ping-pong chain -- layer a:
  // x [M, 4096] -> y [M, 1024], layer b: y -> x -- makes every boundary both a read after write
  // (b reads the y a just wrote) and a write after read (b overwrites the x a read), with one
  // workspace (counters zero on entry) and the stream's slots shared by both layers: a read or
  // write before the wait races, and the result differs or varies. Six chains of three round
  // trips from perturbed inputs (magnitudes grow ~12x a round trip: |x| ~ 5e3 after three,
  // inside fp16, checked finite), each compared bit for bit with plain launches; clusters on
  // and off (DSMEM and slot combines). Without sm_90 code the option is ignored and both runs
  // are plain: said, not counted as a PDL test.
  int device = 0, major = 0;
  TL_CUDA_THROW(cudaGetDevice(&device));
  TL_CUDA_THROW(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) MESSAGE("not sm_90: the dependent launches run as plain ones here");
  const int M = quick_mode() ? 5 : 13;
  const QuantCase la = make_quant_case(M, 4096, 1024, 128, 6101), lb = make_quant_case(M, 1024, 4096, 128, 6102);
  Gpu ga(la), gb(lb);
  DeviceBuffer<half_bits> x(size_t(M) * 4096), y(size_t(M) * 1024);
  cudaStream_t stream = nullptr;
  TL_CUDA_THROW(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamOff {
    cudaStream_t s;
    ~StreamOff() { cudaStreamDestroy(s); }
  } off{stream};
  for (const bool clusters : {true, false})
    for (int chain = 0; chain < 6; ++chain) {
      CAPTURE(clusters);
      CAPTURE(chain);
      std::vector<half_bits> a = la.A;
      a[size_t(chain) * 977 % a.size()] = half_bits(a[size_t(chain) * 977 % a.size()] ^ 0x0400u);  // one input per chain
      std::vector<half_bits> want_x, want_y;
      for (const bool dependent : {false, true}) {
        tl::cuda::KernelOptions options;
        options.clusters = clusters;
        options.dependent_launch = dependent;
        TL_CUDA_THROW(cudaMemcpyAsync(x.get(), a.data(), a.size() * sizeof(half_bits), cudaMemcpyHostToDevice, stream));
        for (int trip = 0; trip < 3; ++trip) {
          TL_REQUIRE_LAUNCH(tl::cuda::marlin_mm_asymmetric(x.half(), ga.B.get(), ga.s.half(), ga.delta.half(), y.half(),
                                                           gb.workspace.get(), M, 1024, 4096, 128, stream, options));
          TL_REQUIRE_LAUNCH(tl::cuda::marlin_mm_asymmetric(y.half(), gb.B.get(), gb.s.half(), gb.delta.half(), x.half(),
                                                           gb.workspace.get(), M, 4096, 1024, 128, stream, options));
        }
        TL_CUDA_THROW(cudaStreamSynchronize(stream));
        if (!dependent) {
          want_x = x.download();
          want_y = y.download();
          for (half_bits h : want_x) REQUIRE_MESSAGE((h & 0x7c00u) != 0x7c00u, "the chain left fp16's range");
        } else {
          CHECK_MESSAGE(x.download() == want_x, "x differs from the plain launches");
          CHECK_MESSAGE(y.download() == want_y, "y differs from the plain launches");
        }
      }
    }
}

TEST_CASE("marlin: shape and configuration return codes") {
  const QuantCase c = make_quant_case(4, 256, 256, 128, 79);
  Gpu g(c);
  auto run = [&](int M, int N, int K, int gs) {
    return tl::cuda::marlin_int4_tc_gemm(g.A.half(), g.B.get(), g.C.half(), g.s.half(),
                                         g.workspace.get(), M, N, K, gs, nullptr);
  };
  CHECK(run(4, 192, 256, 128) == tl::cuda::kShapeUnsupported);  // N % 128
  CHECK(run(4, 256, 200, 200) == tl::cuda::kShapeUnsupported);  // K % 128 (per column)
  CHECK(run(0, 256, 256, 128) == tl::cuda::kShapeUnsupported);  // M < 1
  CHECK(run(4, 256, 256, 64) == tl::cuda::kNoConfig);           // group size not built
  CHECK(run(4, 256, 256, 96) == tl::cuda::kNoConfig);
  CHECK(tl::cuda::marlin_int4_tc_gemm(g.A.half(), g.B.get(), g.C.half() + 1, g.s.half(),
                                      g.workspace.get(), 4, 256, 256, 128, nullptr) ==
        tl::cuda::kShapeUnsupported);  // misaligned C
  TL_CUDA_THROW(cudaGetLastError());  // declining launches leave no error behind
  int device = 0;
  TL_CUDA_THROW(cudaGetDevice(&device));
  CHECK(tl::cuda::marlin_available(device));
}

}  // namespace tl::test
