// The GPU model runner (libgpu/model_gpu + cuda/model_ops) against the CPU forward
// (libconvert/model_forward, fp32) on a seeded random TinyLoop model with GQA and a loop block,
// on each GEMM path (fp16 copies, native int4, Marlin + correction); the logits row kernels
// against perplexity.cpp's CPU math; and the e2e tier end to end on a packed file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cuda/model_ops.h"
#include "cuda/tl_kernels.h"
#include "formats/token_file.h"
#include "gpu_support/gpu_test_util.h"
#include "formats/marlin_layout.h"
#include "libconvert/minmax_quantizer.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"
#include "libverify/e2e_tier.h"
#include "libgpu/model_gpu.h"
#include "libverify/perplexity.h"
#include "family_fixtures.h"

namespace {

using tl::gpu::GpuPath;

// GPU logits vs the CPU fp32 forward, relative Frobenius error. Each GEMM input is rounded to
// fp16 (relative RMS error 2^-11/sqrt(3) ~ 2.8e-4), ~7 such roundings per block plus q/k/v and
// attention outputs; errors add in quadrature through the residual stream over 3 blocks + head:
// ~2.8e-4 * sqrt(25) ~ 1.4e-3, and Marlin's fp16 weight products add about as much again.
// 1e-2 is ~5x that; a wrong RoPE pairing, GQA map or causal mask gives errors of order 1.
constexpr double kGpuCpuMaxRel = 1e-2;
// Row statistics: fp32 sums of <= 50257 exponentials (relative error <= ~V * 2^-24 worst case,
// ~sqrt(V) * 2^-24 typical) -> log-sum-exp within 1e-4 absolute.
constexpr double kLseTol = 1e-4;
// KLD per row in fp32 from the same fp16 logits: termwise differences carry ~1e-6 absolute
// error, summed with weights p_ref (sum 1).
constexpr double kKldAbsTol = 2e-5;
// PPL on the GPU's fp16-activation path against transformers' fp32: the logits' absolute error
// (~1e-3 relative of logits of RMS ~0.6) moves each token's NLL by ~6e-4 with a random sign, so
// the mean over ~126 tokens by ~1e-4 (PPL relative = mean NLL shift). 1e-3 is ~10x that.
constexpr double kGpuPplMaxRel = 1e-3;

tl::ModelConfig gpu_config() {
  tl::ModelConfig c;
  c.d_model = 256; c.n_heads = 4; c.n_kv_heads = 2; c.d_head = 64; c.ffn = 512; c.vocab = 384;
  c.n_pre = 1; c.n_loop = 1; c.loops = 2; c.max_seq = 256;
  return c;
}

void quantize(tl::LinearWeight& l, int64_t group_size, bool pack) {
  tl::rtn_quantize_linear(l, group_size);
  if (pack) {
    auto q = std::make_shared<tl::QuantWeight>(*l.quant);
    q->marlin = tl::marlin_pack(*q);
    l.quant = std::move(q);
  }
}

// Every block linear RTN g128 and Marlin-packed; the head quantized but not packed (a fallback).
tl::ModelWeights quantized_model(uint64_t seed) {
  tl::ModelWeights w = tl::random_model_weights(gpu_config(), seed);
  for (auto* blocks : {&w.pre, &w.loop})
    for (auto& b : *blocks)
      for (const char* s : tl::kBlockLinearNames) quantize(*b.linear(s), 128, true);
  quantize(w.head, 128, false);
  return w;
}

void compare_logits(const std::string& what, const tl::ActMatrix& cpu, const std::vector<float>& gpu) {
  REQUIRE(int64_t(gpu.size()) == cpu.size());
  double num = 0, den = 0, worst = 0;
  int64_t worst_i = 0;
  for (int64_t i = 0; i < cpu.size(); ++i) {
    const double r = cpu.data()[i], d = double(gpu[size_t(i)]) - r;
    REQUIRE_MESSAGE(std::isfinite(gpu[size_t(i)]), what << ": non-finite logit at " << i);
    num += d * d;
    den += r * r;
    if (std::abs(d) > worst) { worst = std::abs(d); worst_i = i; }
  }
  const double rel = std::sqrt(num / den);
  std::printf("  %-12s logits vs CPU: rel %.3e, max |diff| %.3e at %lld (cpu %.5f gpu %.5f)\n", what.c_str(), rel,
              worst, (long long)worst_i, double(cpu.data()[worst_i]), double(gpu[size_t(worst_i)]));
  CHECK_MESSAGE(rel <= kGpuCpuMaxRel, what << ": relative error " << rel);
}

}  // namespace

TEST_CASE("model gpu: logits row statistics match the CPU math") {
  for (int V : {256, 50257}) {
    const int rows = 37;
    tl::test::Rng rng{uint64_t(V)};
    const auto a = tl::test::random_halves(rng, size_t(rows) * V, -8.0, 8.0);
    auto b = a;
    for (auto& h : b) h = tl::float_to_half(tl::half_to_float(h) + float(rng.uniform(-0.3, 0.3)));
    std::vector<int32_t> targets(rows);
    for (int r = 0; r < rows; ++r) targets[size_t(r)] = r % 5 == 4 ? -1 : int32_t(rng.next() % uint64_t(V));
    tl::test::DeviceBuffer<tl::half_bits> da(a), db(b);
    tl::test::DeviceBuffer<int32_t> dt(targets), darg(rows);
    tl::test::DeviceBuffer<float> dlse_a(rows), dlse_b(rows), dtg(rows), dkld(rows);
    TL_REQUIRE_LAUNCH(tl::cuda::logits_row_stats(da.half(), dt.get(), rows, V, dlse_a.get(), darg.get(), dtg.get(), nullptr));
    TL_REQUIRE_LAUNCH(tl::cuda::logits_row_stats(db.half(), nullptr, rows, V, dlse_b.get(), nullptr, nullptr, nullptr));
    TL_REQUIRE_LAUNCH(tl::cuda::kld_rows(da.half(), dlse_a.get(), db.half(), dlse_b.get(), rows, V, dkld.get(), nullptr));
    const auto lse = dlse_a.download(), lseb = dlse_b.download(), tg = dtg.download(), kld = dkld.download();
    const auto arg = darg.download();
    for (int r = 0; r < rows; ++r) {
      std::vector<float> fa(static_cast<size_t>(V)), fb(static_cast<size_t>(V));
      for (int v = 0; v < V; ++v) {
        fa[size_t(v)] = tl::half_to_float(a[size_t(r) * V + v]);
        fb[size_t(v)] = tl::half_to_float(b[size_t(r) * V + v]);
      }
      const double la = tl::verify::log_sum_exp(fa.data(), V), lb = tl::verify::log_sum_exp(fb.data(), V);
      CHECK(std::abs(lse[size_t(r)] - la) <= kLseTol);
      CHECK(std::abs(lseb[size_t(r)] - lb) <= kLseTol);
      CHECK(arg[size_t(r)] == tl::verify::argmax_first(fa.data(), V));
      CHECK(tg[size_t(r)] == (targets[size_t(r)] < 0 ? 0.f : fa[size_t(targets[size_t(r)])]));
      const double k = tl::verify::kld_logits(fa.data(), la, fb.data(), lb, V);
      CHECK_MESSAGE(std::abs(kld[size_t(r)] - k) <= kKldAbsTol + 1e-3 * k, "row " << r << " gpu " << kld[size_t(r)] << " cpu " << k);
    }
  }
}

TEST_CASE("model gpu: every path's logits match the CPU forward (GQA, loop block, ragged T)") {
  const tl::ModelWeights w = quantized_model(31);
  const int n_seq = 3, T = 45;  // T: not a multiple of the 32-key attention tile
  const auto tok = tl::test::random_tokens(int64_t(n_seq) * T, w.config.vocab, 41);
  const tl::ActMatrix cpu = tl::forward_logits(w, tok.data(), n_seq, T);
  tl::gpu::GpuModel gm(w, true, tl::cuda::runtime_kernel_options());
  CHECK(gm.info().quantized == 11);      // 5 linears x 2 distinct blocks (pre.0, loop.0) + head
  CHECK(gm.info().marlin_packed == 10);  // the head is not packed
  CHECK(gm.info().marlin_bytes > 0);
  for (tl::gpu::GpuPath p : {tl::gpu::GpuPath::kFp16, tl::gpu::GpuPath::kNative, tl::gpu::GpuPath::kMarlin}) {
    REQUIRE(gm.has_path(p));
    tl::cuda::reset_dispatch_stats();
    gm.forward(tok.data(), n_seq, T, p);
    const tl::cuda::DispatchStats st = tl::cuda::dispatch_stats();
    std::vector<float> logits;
    gm.logits_to_host(&logits);
    compare_logits(tl::gpu::gpu_path_name(p), cpu, logits);
    // 5 linears x 3 block runs + head per forward, each on the path asked for.
    const long long total = st.dispatches[0] + st.dispatches[1] + st.dispatches[2];
    CHECK(total == 16);
    if (p == tl::gpu::GpuPath::kFp16) CHECK(st.dispatches[int(tl::cuda::GemmPath::kFp16Copy)] == 16);
    if (p == tl::gpu::GpuPath::kNative) CHECK(st.dispatches[int(tl::cuda::GemmPath::kNativeInt4)] == 16);
    if (p == tl::gpu::GpuPath::kMarlin) {
      CHECK(st.dispatches[int(tl::cuda::GemmPath::kMarlin)] == 15);
      CHECK(st.dispatches[int(tl::cuda::GemmPath::kNativeInt4)] == 1);
      REQUIRE(st.fallbacks.count("no marlin pack") == 1);
      CHECK(st.fallbacks.at("no marlin pack") == 1);
      // The forward dispatches as a runtime does (runtime_kernel_options): its 135 rows go to
      // the Hopper kernel where the GPU has it, else to the tiled kernel (below the floor's
      // crossover), never to the decode kernel.
      int device = 0;
      REQUIRE(cudaGetDevice(&device) == cudaSuccess);
      const char* want = tl::cuda::hopper_kernel_available(device) ? "hopper" : "tiled";
      INFO("marlin kernels: " << st.marlin_kernels.size());
      REQUIRE(st.marlin_kernels.count(want) == 1);
      CHECK(st.marlin_kernels.at(want) == 15);
      // The MLP's gate + up of each of the 3 block runs: one quant_swiglu call, two GEMMs at 135 rows.
      REQUIRE(st.swiglu.count("unfused") == 1);
      CHECK(st.swiglu.at("unfused") == 3);
      CHECK(st.swiglu.size() == 1);
    }
  }
}

TEST_CASE("model gpu: a head of a vocabulary that is no multiple of 128 runs on Marlin, padded, in both modes") {
  tl::ModelConfig c = gpu_config();
  c.vocab = 1001;  // the head's section is padded to 1024 columns
  tl::ModelWeights w = tl::random_model_weights(c, 33);
  for (auto* blocks : {&w.pre, &w.loop})
    for (auto& b : *blocks)
      for (const char* s : tl::kBlockLinearNames) quantize(*b.linear(s), 128, true);
  quantize(w.head, 128, true);
  REQUIRE(w.head.quant->marlin->padded_n == 1024);
  const int n_seq = 5, T = 20;
  const auto tok = tl::test::random_tokens(int64_t(n_seq) * T, c.vocab, 46);
  const tl::ActMatrix cpu = tl::forward_logits(w, tok.data(), n_seq, T);
  tl::gpu::GpuModel gm(w, false, tl::cuda::runtime_kernel_options());
  CHECK(gm.info().marlin_packed == 11);
  for (tl::ForwardMode mode : {tl::ForwardMode::kPrefill, tl::ForwardMode::kDecode}) {
    tl::cuda::reset_dispatch_stats();
    gm.forward(tok.data(), n_seq, T, tl::gpu::GpuPath::kMarlin, mode);
    const tl::cuda::DispatchStats st = tl::cuda::dispatch_stats();
    std::vector<float> logits;
    gm.logits_to_host(&logits);
    compare_logits(mode == tl::ForwardMode::kDecode ? "padded head, decode" : "padded head, prefill", cpu, logits);
    const long long per_forward = mode == tl::ForwardMode::kDecode ? 16LL * T : 16;
    CHECK(st.dispatches[int(tl::cuda::GemmPath::kMarlin)] == per_forward);  // every linear, the head too
    CHECK(st.fallbacks.empty());
    // The head: the decode kernel per position (M = n_seq), the floor on the prefill's 100 rows.
    const char* head_kernel = mode == tl::ForwardMode::kDecode ? "decode" : "dequant";
    REQUIRE(st.marlin_kernels.count(head_kernel) == 1);
    CHECK(st.marlin_kernels.at(head_kernel) >= (mode == tl::ForwardMode::kDecode ? T : 1));
  }
}

TEST_CASE("model gpu: decode mode runs every linear per position on the decode kernel and computes the same model") {
  const tl::ModelWeights w = quantized_model(32);
  const int n_seq = 5, T = 45;
  const auto tok = tl::test::random_tokens(int64_t(n_seq) * T, w.config.vocab, 42);
  const tl::ActMatrix cpu = tl::forward_logits(w, tok.data(), n_seq, T);
  tl::gpu::GpuModel gm(w, true, tl::cuda::runtime_kernel_options());
  for (tl::gpu::GpuPath p : {tl::gpu::GpuPath::kFp16, tl::gpu::GpuPath::kNative, tl::gpu::GpuPath::kMarlin}) {
    tl::cuda::reset_dispatch_stats();
    gm.forward(tok.data(), n_seq, T, p, tl::ForwardMode::kDecode);
    const tl::cuda::DispatchStats st = tl::cuda::dispatch_stats();
    std::vector<float> dec;
    gm.logits_to_host(&dec);
    // Against the CPU forward with the prefill bound: rows in the prefill order, every position.
    compare_logits(std::string(tl::gpu::gpu_path_name(p)) + " dec", cpu, dec);
    // 16 GEMMs per position (5 linears x 3 block runs + the head), each at M = n_seq.
    const long long total = st.dispatches[0] + st.dispatches[1] + st.dispatches[2];
    CHECK(total == 16LL * T);
    if (p == tl::gpu::GpuPath::kMarlin) {
      CHECK(st.dispatches[int(tl::cuda::GemmPath::kMarlin)] == 15LL * T);
      REQUIRE(st.marlin_kernels.count("decode") == 1);
      CHECK(st.marlin_kernels.at("decode") == 15LL * T);  // M = 5: the decode kernel, every call
      CHECK(st.marlin_kernels.size() == 1);
      // gate + up: the fused pair, one launch per block run and position.
      REQUIRE(st.swiglu.count("fused") == 1);
      CHECK(st.swiglu.at("fused") == 3LL * T);
      CHECK(st.swiglu.size() == 1);
    }
    // A later token changes no earlier position's logits of its sequence, and no other sequence.
    auto tok2 = tok;
    tok2[size_t(3 * T + 30)] = (tok2[size_t(3 * T + 30)] + 1) % int32_t(w.config.vocab);
    gm.forward(tok2.data(), n_seq, T, p, tl::ForwardMode::kDecode);
    std::vector<float> dec2;
    gm.logits_to_host(&dec2);
    const size_t V = size_t(w.config.vocab);
    bool earlier_same = true, later_moved = false;
    for (int s = 0; s < n_seq; ++s)
      for (int t = 0; t < T; ++t) {
        bool same = true;
        for (size_t v = 0; v < V; ++v) same = same && dec[(size_t(s) * T + t) * V + v] == dec2[(size_t(s) * T + t) * V + v];
        if (s == 3 && t >= 30) later_moved = later_moved || !same;
        else earlier_same = earlier_same && same;
      }
    CHECK(earlier_same);
    CHECK(later_moved);
  }
}

TEST_CASE("model gpu: a ragged last group (K = 172, groups of 32) on every path, as the CPU computes it") {
  // upstream GPTQ's shape: a down_proj of 172 rows in groups of 32 (5 of 32 and one of 12). It
  // fails the Marlin gate (K % 128), so the Marlin path runs it on the native kernel, by name.
  tl::ModelConfig c = gpu_config();
  c.ffn = 172;
  tl::ModelWeights w = tl::random_model_weights(c, 33);
  for (auto* blocks : {&w.pre, &w.loop})
    for (auto& b : *blocks)
      for (const char* s : tl::kBlockLinearNames) {
        tl::LinearWeight& l = *b.linear(s);
        const int64_t gs = l.K == 172 ? 32 : 128;
        quantize(l, gs, tl::marlin_gate(l.K, l.N, gs).ok);  // qkv, out; gate, up (N = 172) padded; down not
      }
  REQUIRE(w.pre[0].mlp_down.quant->groups() == 6);
  const int n_seq = 2, T = 40;
  const auto tok = tl::test::random_tokens(int64_t(n_seq) * T, c.vocab, 44);
  const tl::ActMatrix cpu = tl::forward_logits(w, tok.data(), n_seq, T);
  tl::gpu::GpuModel gm(w, true, tl::cuda::runtime_kernel_options());
  for (tl::gpu::GpuPath p : {tl::gpu::GpuPath::kFp16, tl::gpu::GpuPath::kNative, tl::gpu::GpuPath::kMarlin})
    for (tl::ForwardMode mode : {tl::ForwardMode::kPrefill, tl::ForwardMode::kDecode}) {
      tl::cuda::reset_dispatch_stats();
      gm.forward(tok.data(), n_seq, T, p, mode);
      std::vector<float> logits;
      gm.logits_to_host(&logits);
      compare_logits(std::string(tl::gpu::gpu_path_name(p)) + (mode == tl::ForwardMode::kDecode ? " dec" : ""), cpu,
                     logits);
      if (p == tl::gpu::GpuPath::kMarlin) {
        // down (K = 172) carries no Marlin section (it fails the gate): 3 block runs per forward,
        // once per position in decode, each named. gate and up (N = 172) run their sections
        // padded to 256 columns, as two GEMMs (a padded pair is not fused), counted as such.
        const tl::cuda::DispatchStats st = tl::cuda::dispatch_stats();
        const long long runs = 3LL * (mode == tl::ForwardMode::kDecode ? T : 1);
        REQUIRE(st.fallbacks.count("no marlin pack") == 1);
        CHECK(st.fallbacks.at("no marlin pack") == runs);
        CHECK(st.fallbacks.size() == 1);
        REQUIRE(st.swiglu.count("separate (padded pack)") == 1);
        CHECK(st.swiglu.at("separate (padded pack)") == runs);
      }
    }
  // The e2e tier on the file: the GPU scores it (no exit 2) and agrees with the CPU's PPL.
  const std::string dir = std::string(TL_TEST_TMP) + "/model_gpu_ragged";
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  tl::write_model_tinyloop(w, dir + "/m.tinyloop", tl::DType::F16);
  tl::write_token_file_u32(dir + "/t.u32", tl::test::random_tokens(1024, c.vocab, 45));
  tl::verify::E2eOptions o;
  o.file = dir + "/m.tinyloop";
  o.tokens = dir + "/t.u32";
  o.ctx = 128;
  o.device = tl::verify::E2eDevice::kCuda;
  const tl::verify::E2eResult g = tl::verify::run_e2e_tier(o);
  INFO(g.reason);
  REQUIRE(g.status == tl::verify::Status::kPassed);
  o.device = tl::verify::E2eDevice::kCpu;
  const tl::verify::E2eResult cres = tl::verify::run_e2e_tier(o);
  REQUIRE(cres.status == tl::verify::Status::kPassed);
  for (tl::ForwardMode mode : {tl::ForwardMode::kPrefill, tl::ForwardMode::kDecode}) {
    const auto* nat = g.main.row(tl::gpu::GpuPath::kNative, mode);
    REQUIRE(nat != nullptr);
    CHECK(std::abs(cres.main.rows[0].s.ppl / nat->s.ppl - 1) < 5e-3);  // fp16 activations on the GPU
  }
}

TEST_CASE("model gpu: any even d_head (8, 80, 256) and GQA group matches the CPU forward") {
  // The generic attention path (d_head not 32 * k, or above 128) and the 256-wide tiles in
  // dynamic shared memory, on dense fp16 copies: only the attention differs from the tests above.
  struct Shape { int64_t d_head, n_heads, n_kv_heads; };
  for (const Shape sh : {Shape{8, 8, 2}, Shape{80, 4, 4}, Shape{256, 2, 1}, Shape{112, 3, 1}}) {
    tl::ModelConfig c = gpu_config();
    c.d_head = sh.d_head;
    c.n_heads = sh.n_heads;
    c.n_kv_heads = sh.n_kv_heads;
    c.d_model = 192;
    const tl::ModelWeights w = tl::random_model_weights(c, uint64_t(sh.d_head));
    const int n_seq = 2, T = 77;
    const auto tok = tl::test::random_tokens(int64_t(n_seq) * T, c.vocab, uint64_t(sh.d_head) + 1);
    const tl::ActMatrix cpu = tl::forward_logits(w, tok.data(), n_seq, T);
    tl::gpu::GpuModel gm(w, true, tl::cuda::runtime_kernel_options());
    gm.forward(tok.data(), n_seq, T, tl::gpu::GpuPath::kFp16);
    std::vector<float> logits;
    gm.logits_to_host(&logits);
    CAPTURE(sh.d_head);
    compare_logits("d_head " + std::to_string(sh.d_head), cpu, logits);
  }
}

TEST_CASE("model gpu: the e2e tier passes on a packed file and reports its paths") {
  const tl::ModelWeights w = quantized_model(32);
  const std::string dir = std::string(TL_TEST_TMP) + "/model_gpu_e2e";
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  tl::write_model_tinyloop(w, dir + "/m.tinyloop", tl::DType::F16);
  tl::write_token_file_u32(dir + "/t.u32", tl::test::random_tokens(2000, w.config.vocab, 42));
  tl::verify::E2eOptions o;
  o.file = dir + "/m.tinyloop";
  o.tokens = dir + "/t.u32";
  o.baseline = dir + "/m.tinyloop";
  o.ctx = 128;
  o.decode_batch = 5;  // the default mode on the GPU (auto) runs prefill and decode, batches of 5
  const tl::verify::E2eResult r = tl::verify::run_e2e_tier(o);
  INFO(r.reason);
  CHECK(r.status == tl::verify::Status::kPassed);
  CHECK(r.windows == 15);
  CHECK(r.scored == 15 * 64);
  REQUIRE(r.main.rows.size() == 6);  // fp16, native, marlin in prefill, then in decode
  CHECK(r.main.has_drift);
  CHECK(std::abs(r.main.drift_pct) < 1.0);
  CHECK(r.main.cpu_checked);
  const auto* m = r.main.row(tl::gpu::GpuPath::kMarlin);
  REQUIRE(m != nullptr);
  CHECK(m->dispatches[int(tl::cuda::GemmPath::kMarlin)] == 15 * 3);  // 15 packed GEMMs x 3 batches
  CHECK(m->s.top1_agreement > 0.9);
  CHECK(m->gemm_m == 5 * 128);
  // Native prefill at M = 640: the native floor (W_hat rounded to fp16 + cuBLAS), whose tiles are
  // the fp16 path's weights bit for bit, so its PPL is the fp16 row's exactly; decode keeps the kernel.
  const auto* nat = r.main.row(tl::gpu::GpuPath::kNative);
  const auto* f16 = r.main.row(tl::gpu::GpuPath::kFp16);
  REQUIRE(nat != nullptr);
  REQUIRE(f16 != nullptr);
  CHECK(nat->kernels.at("native-dequant") == 16LL * 3);  // 16 quantized GEMMs (the head too) x 3 batches
  CHECK(nat->kernels.count("native-int4") == 0);
  CHECK(nat->s.ppl == f16->s.ppl);
  const auto* nd = r.main.row(tl::gpu::GpuPath::kNative, tl::ForwardMode::kDecode);
  REQUIRE(nd != nullptr);
  CHECK(nd->kernels.at("native-int4") == 16LL * 128 * 3);
  CHECK(nd->kernels.count("native-dequant") == 0);
  // Decode: every packed GEMM once per position on the decode kernel (M = 5), PPL as prefill's.
  const auto* md = r.main.row(tl::gpu::GpuPath::kMarlin, tl::ForwardMode::kDecode);
  REQUIRE(md != nullptr);
  CHECK(md->gemm_m == 5);
  CHECK(md->kernels.at("marlin-decode") == 15LL * 128 * 3);
  CHECK(md->kernels.at("native-int4") == 128LL * 3);  // the unpacked head
  REQUIRE(md->has_vs_prefill);
  MESSAGE("decode vs prefill PPL, marlin: " << md->vs_prefill_pct << " %");
  CHECK(std::abs(md->vs_prefill_pct) <= tl::verify::kE2eDecodeMaxPplPct);
  CHECK(md->s.has_reference);  // KLD against the decode fp16 path
  CHECK(md->s.kld_mean <= tl::verify::kE2eMaxMeanKld);
  REQUIRE(r.baseline.has_value());
  // The same file as baseline scores the same windows: identical PPL per path.
  for (size_t i = 0; i < 6; ++i) CHECK(r.baseline->rows[i].s.ppl == doctest::Approx(r.main.rows[i].s.ppl).epsilon(1e-6));
}

TEST_CASE("model gpu: the e2e tier against a reference, per layer, and the CPU e2e agreeing with the GPU") {
  const tl::ModelWeights w = quantized_model(32);
  const std::string dir = std::string(TL_TEST_TMP) + "/model_gpu_e2e_ref";
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  tl::write_model_tinyloop(w, dir + "/m.tinyloop", tl::DType::F16);
  // The original: the same random model, dense. And FILE's own W_hat as a dense model.
  tl::write_model_tinyloop(tl::random_model_weights(gpu_config(), 32), dir + "/ref.tinyloop", tl::DType::F16);
  tl::ModelWeights hat = tl::load_model_weights(dir + "/m.tinyloop", false);
  for (const std::string& n : hat.linear_names()) hat.find_linear(n)->quant.reset();
  tl::write_model_tinyloop(hat, dir + "/hat.tinyloop", tl::DType::F32);
  tl::write_token_file_u32(dir + "/t.u32", tl::test::random_tokens(1600, w.config.vocab, 43));
  tl::verify::E2eOptions o;
  o.file = dir + "/m.tinyloop";
  o.tokens = dir + "/t.u32";
  o.ctx = 128;
  o.batch = 4;
  o.device = tl::verify::E2eDevice::kCuda;
  o.reference = dir + "/hat.tinyloop";
  // Against its own W_hat the fp16 path is the same computation: no drift at all.
  tl::verify::E2eResult same = tl::verify::run_e2e_tier(o);
  REQUIRE(same.status == tl::verify::Status::kPassed);
  const auto* f16 = same.main.row(tl::gpu::GpuPath::kFp16);
  REQUIRE(f16 != nullptr);
  CHECK(f16->vs_ref.kld.max == 0.0);
  CHECK(f16->vs_ref.ratio == 1.0);
  CHECK(same.main.row(tl::gpu::GpuPath::kMarlin)->vs_ref.kld.mean > 0);  // the kernels round differently
  // Against the original: the quantization error, the same on both int4 paths within kernel noise.
  o.reference = dir + "/ref.tinyloop";
  o.per_layer = true;
  o.per_layer_windows = 4;
  const tl::verify::E2eResult g = tl::verify::run_e2e_tier(o);
  INFO(g.reason);
  REQUIRE(g.status == tl::verify::Status::kPassed);
  CHECK(g.device_kind == "cuda");
  const auto* nat = g.main.row(tl::gpu::GpuPath::kNative);
  const auto* mar = g.main.row(tl::gpu::GpuPath::kMarlin);
  REQUIRE(nat);
  REQUIRE(mar);
  CHECK(nat->vs_ref.kld.mean > 10 * nat->s.kld_mean);  // quantization >> kernel differences
  CHECK(mar->vs_ref.kld.mean == doctest::Approx(nat->vs_ref.kld.mean).epsilon(0.1));
  REQUIRE(g.per_layer.size() == 11);
  for (size_t i = 1; i < g.per_layer.size(); ++i) CHECK(g.per_layer[i - 1].kld_mean >= g.per_layer[i].kld_mean);
  // The CPU e2e on the same inputs: PPL within 0.5 % of the GPU's (fp16 activations there).
  o.device = tl::verify::E2eDevice::kCpu;
  o.per_layer = false;
  const tl::verify::E2eResult c = tl::verify::run_e2e_tier(o);
  REQUIRE(c.status == tl::verify::Status::kPassed);
  const double d_file = c.main.rows[0].s.ppl / nat->s.ppl - 1, d_ref = c.reference->nll.ppl / g.reference->nll.ppl - 1;
  MESSAGE("CPU vs GPU PPL: FILE native " << 100 * d_file << " %, reference " << 100 * d_ref << " %; KLD vs reference CPU "
                                         << c.main.rows[0].vs_ref.kld.mean << " GPU " << nat->vs_ref.kld.mean);
  CHECK(std::abs(d_file) < 5e-3);
  CHECK(std::abs(d_ref) < 5e-3);
}

TEST_CASE("model gpu: family features on every path (biases after the delta correction, q/k norms, window, llama3 RoPE)") {
  tl::ModelConfig c = gpu_config();
  c.architecture = "qwen3";
  c.n_pre = 2; c.n_loop = 0; c.loops = 0;
  c.qkv_bias = c.out_bias = c.mlp_bias = true;
  c.qk_norm = true;
  c.sliding_window = 8;  // far shorter than T: the window's tile skip and masks both run
  c.window_first_block = 1;
  c.rope_type = "llama3";
  c.rope_factor = 8; c.rope_low_freq_factor = 1; c.rope_high_freq_factor = 4; c.rope_original_max_seq = 32;
  tl::ModelWeights w = tl::random_model_weights(c, 77);
  for (auto& b : w.pre)
    for (const char* s : tl::kBlockLinearNames) quantize(*b.linear(s), 128, true);
  const int n_seq = 2, T = 45;
  const auto tok = tl::test::random_tokens(int64_t(n_seq) * T, c.vocab, 43);
  const tl::ActMatrix cpu = tl::forward_logits(w, tok.data(), n_seq, T);
  tl::gpu::GpuModel gm(w, true, tl::cuda::runtime_kernel_options());
  CHECK(gm.info().marlin_packed == 10);
  for (tl::gpu::GpuPath p : {tl::gpu::GpuPath::kFp16, tl::gpu::GpuPath::kNative, tl::gpu::GpuPath::kMarlin}) {
    gm.forward(tok.data(), n_seq, T, p);
    std::vector<float> logits;
    gm.logits_to_host(&logits);
    compare_logits(std::string("features ") + tl::gpu::gpu_path_name(p), cpu, logits);
  }
  // Each feature matters at this size: the CPU forward without it is outside the GPU's bound
  // by 2x (the paths above measure ~6.5e-4, 30x inside it).
  for (int f = 0; f < 3; ++f) {
    tl::ModelWeights off = w;
    if (f == 0) for (auto& b : off.pre) b.attn_qkv.bias.assign(b.attn_qkv.bias.size(), 0.f);
    if (f == 1) off.config.sliding_window = 0;
    if (f == 2) off.config.rope_type = "default", off.config.rope_factor = 1;
    const tl::ActMatrix o = tl::forward_logits(off, tok.data(), n_seq, T);
    std::vector<float> ov(o.data(), o.data() + o.size());
    const double rel = tl::test::rel_frobenius(ov.data(), std::vector<float>(cpu.data(), cpu.data() + cpu.size()));
    CAPTURE(f);
    std::printf("  features: feature %d switched off: CPU logits rel %.3e\n", f, rel);
    CHECK(rel > 2 * kGpuCpuMaxRel);
  }
}

TEST_CASE("model gpu: the family fixtures as transformers computes them (fp16 activations)") {
  for (const std::string& name : tl::test::family_fixture_names()) {
    CAPTURE(name);
    const tl::test::FamilyFixture f = tl::test::load_family_fixture(name);
    const tl::ModelWeights w = tl::load_model_weights(f.dir);
    tl::gpu::GpuModel gm(w, false, tl::cuda::runtime_kernel_options());
    gm.forward(f.tokens.data(), int(f.windows), int(f.ctx), tl::gpu::GpuPath::kFp16);
    std::vector<float> logits;
    gm.logits_to_host(&logits);
    const double rel = tl::test::rel_frobenius(logits.data(), f.logits);
    const double ppl = tl::test::ppl_all_from_logits(logits.data(), f);
    std::printf("  %-18s gpu fp16 logits rel %.3e  ppl %.6f vs transformers %.6f (rel %.2e)\n", name.c_str(), rel, ppl,
                f.ppl_all, ppl / f.ppl_all - 1);
    CHECK(rel <= kGpuCpuMaxRel);
    CHECK(std::fabs(ppl / f.ppl_all - 1) <= kGpuPplMaxRel);
  }
}
