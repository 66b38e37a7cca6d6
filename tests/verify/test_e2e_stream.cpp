// The streamed e2e tier on the CPU against the whole-model forward it replaced: every scored
// token's NLL, top-1 and KLD equal bit for bit (blocks read one at a time, the reader thread one
// step ahead, windows on every core) in both modes, with a loop block, a tied head and a
// --baseline; --per-layer's swapped weights equal the reference with that one weight replaced.
// Beside it, the e2e options' table walked row by row, and the GPU run's memory plan (host-only
// code of libgpu) from shapes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "formats/token_file.h"
#include "libconvert/minmax_quantizer.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"
#include "libgpu/stream_forward.h"
#include "libverify/e2e_tier.h"
#include "libverify/perplexity.h"

using namespace tl::verify;

namespace {

std::string scratch(const std::string& name) {
  const std::string dir = std::string(TL_TEST_TMP) + "/e2e_stream_" + name;
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

// Two distinct blocks and a shared one run twice; the head tied to the embedding.
tl::ModelConfig loop_config() {
  tl::ModelConfig c;
  c.d_model = 64; c.n_heads = 4; c.n_kv_heads = 2; c.d_head = 16; c.ffn = 96; c.vocab = 48;
  c.n_pre = 2; c.n_loop = 1; c.loops = 2; c.max_seq = 64;
  c.tie_embeddings = true;
  return c;
}

struct Files {
  std::string dir, ref, file, base, tokens;
  tl::ModelWeights ref_w, file_w, base_w;
};

Files make_files(const std::string& name) {
  Files f;
  f.dir = scratch(name);
  f.ref_w = tl::random_model_weights(loop_config(), 11);
  f.ref_w.head.W.clear();  // tied: the loader derives it from the embedding
  f.ref_w.head.W.resize(size_t(f.ref_w.config.d_model * f.ref_w.config.vocab));
  for (int64_t v = 0; v < f.ref_w.config.vocab; ++v)
    for (int64_t d = 0; d < f.ref_w.config.d_model; ++d)
      f.ref_w.head.W[size_t(d * f.ref_w.config.vocab + v)] = f.ref_w.embed[size_t(v * f.ref_w.config.d_model + d)];
  f.file_w = f.ref_w;
  f.base_w = f.ref_w;
  for (auto* blocks : {&f.file_w.pre, &f.file_w.loop})
    for (auto& b : *blocks)
      for (const char* s : tl::kBlockLinearNames) tl::rtn_quantize_linear(*b.linear(s), 32);
  for (auto& b : f.base_w.pre) tl::rtn_quantize_linear(b.mlp_down, 16);
  f.ref = f.dir + "/ref.tinyloop";
  f.file = f.dir + "/q.tinyloop";
  f.base = f.dir + "/b.tinyloop";
  f.tokens = f.dir + "/t.u32";
  tl::write_model_tinyloop(f.ref_w, f.ref, tl::DType::F32);
  tl::write_model_tinyloop(f.file_w, f.file, tl::DType::F32);
  tl::write_model_tinyloop(f.base_w, f.base, tl::DType::F32);
  std::vector<int32_t> tok(600);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7919 + i / 5) % 48);
  tl::write_token_file_u32(f.tokens, tok);
  return f;
}

// Per scored token of window w (ctx tokens from `start`): NLL and top-1 from the whole-model
// forward of `m`, and KLD against `ref`'s logits -- what the tier computed before it streamed.
struct Direct {
  std::vector<double> nll;
  std::vector<int32_t> top1;
  std::vector<float> kld;
};
Direct direct(const tl::ModelWeights& m, const tl::ModelWeights& ref, const std::vector<int32_t>& tok,
              const WindowPlan& plan, tl::ForwardMode mode, int64_t batch) {
  Direct d;
  const int64_t ctx = plan.ctx, V = m.config.vocab, n = int64_t(plan.starts.size());
  const int64_t per = mode == tl::ForwardMode::kDecode ? batch : 1;
  for (int64_t w0 = 0; w0 < n; w0 += per) {
    const int64_t nb = std::min(per, n - w0);
    std::vector<int32_t> chunk;
    for (int64_t w = w0; w < w0 + nb; ++w)
      chunk.insert(chunk.end(), tok.begin() + plan.starts[size_t(w)], tok.begin() + plan.starts[size_t(w)] + ctx);
    const tl::ActMatrix logits = tl::forward_logits(m, chunk.data(), nb, ctx, {}, mode);
    for (int64_t i = 0; i < nb; ++i) {
      const tl::ActMatrix r = tl::forward_logits(ref, chunk.data() + i * ctx, 1, ctx);
      for (int64_t t = plan.first_target; t < ctx; ++t) {
        const float* x = logits.data() + (i * ctx + t - 1) * V;
        const double lse = log_sum_exp(x, V);
        d.nll.push_back(lse - double(x[chunk[size_t(i * ctx + t)]]));
        d.top1.push_back(int32_t(argmax_first(x, V)));
        const float* rr = r.data() + (t - 1) * V;
        d.kld.push_back(float(kld_logits(rr, log_sum_exp(rr, V), x, lse, V)));
      }
    }
  }
  return d;
}

void same(const PathTrace& t, const Direct& d, const std::string& what) {
  CAPTURE(what);
  REQUIRE(t.nll.size() == d.nll.size());
  size_t bad = 0;
  for (size_t i = 0; i < d.nll.size(); ++i)
    bad += std::memcmp(&t.nll[i], &d.nll[i], sizeof(double)) != 0 || t.top1[i] != d.top1[i] ||
           (!t.kld.empty() && std::memcmp(&t.kld[i], &d.kld[i], sizeof(float)) != 0);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("e2e stream (cpu): every token as the whole-model forward gives it, both modes, loop block, tied head, baseline") {
  const Files f = make_files("cpu");
  E2eOptions o;
  o.file = f.file;
  o.reference = f.ref;
  o.baseline = f.base;
  o.tokens = f.tokens;
  o.ctx = 40;
  o.device = E2eDevice::kCpu;
  o.mode = E2eMode::kBoth;
  o.decode_batch = 3;
  o.threads = 2;
  const E2eResult r = run_e2e_tier(o);
  INFO(r.reason);
  REQUIRE(r.status == Status::kPassed);
  REQUIRE(r.main.rows.size() == 2);
  const std::vector<int32_t> tok = tl::read_token_file(f.tokens, 48);
  const WindowPlan plan = plan_windows(int64_t(tok.size()), o.ctx, 0, 0, ScoreMode::kSecondHalf);
  const tl::ModelWeights ref = tl::load_model_weights(f.ref, false), q = tl::load_model_weights(f.file, false),
                         b = tl::load_model_weights(f.base, false);
  for (size_t mi = 0; mi < 2; ++mi) {
    const tl::ForwardMode mode = r.main.rows[mi].mode;
    same(r.main.rows[mi].trace, direct(q, ref, tok, plan, mode, 3), std::string("file ") + tl::forward_mode_name(mode));
    same(r.baseline->rows[mi].trace, direct(b, ref, tok, plan, mode, 3), std::string("baseline ") + tl::forward_mode_name(mode));
  }
  const Direct dr = direct(ref, ref, tok, plan, tl::ForwardMode::kPrefill, 1);
  REQUIRE(r.reference->trace.nll.size() == dr.nll.size());
  CHECK(std::memcmp(r.reference->trace.nll.data(), dr.nll.data(), dr.nll.size() * sizeof(double)) == 0);
}

TEST_CASE("e2e stream (cpu): --per-layer's swapped weight equals the reference with that weight replaced") {
  const Files f = make_files("per_layer");
  E2eOptions o;
  o.file = f.file;
  o.reference = f.ref;
  o.tokens = f.tokens;
  o.ctx = 40;
  o.device = E2eDevice::kCpu;
  o.per_layer = true;
  o.per_layer_windows = 3;
  const E2eResult r = run_e2e_tier(o);
  REQUIRE(r.status == Status::kPassed);
  REQUIRE(r.per_layer.size() == 15);  // 5 linears x (2 distinct + 1 shared block)
  const std::vector<int32_t> tok = tl::read_token_file(f.tokens, 48);
  WindowPlan plan = plan_windows(int64_t(tok.size()), o.ctx, 0, 0, ScoreMode::kSecondHalf);
  plan.starts.resize(3);
  const tl::ModelWeights ref = tl::load_model_weights(f.ref, false), q = tl::load_model_weights(f.file, false);
  // Every weight (a shared block's too: swapped in each of its steps) against the direct forward.
  for (const std::string name : {"pre.0.attn_qkv", "pre.1.mlp_down", "loop.0.mlp_gate"}) {
    tl::ModelWeights one = ref;
    one.find_linear(name)->W = q.find_linear(name)->W;
    const Direct d = direct(one, ref, tok, plan, tl::ForwardMode::kPrefill, 1);
    double sum = 0;
    for (float k : d.kld) sum += k;
    const auto it = std::find_if(r.per_layer.begin(), r.per_layer.end(), [&](const LayerDrift& l) { return l.weight == name; });
    REQUIRE(it != r.per_layer.end());
    CAPTURE(name);
    CHECK(it->n == int64_t(d.kld.size()));
    CHECK(it->kld_mean == doctest::Approx(sum / double(d.kld.size())).epsilon(1e-12));
    CHECK(it->kld_mean > 0);
  }
}

TEST_CASE("e2e options: every row of the table is enforced, named, and its bounds are inclusive") {
  for (const E2eOptionRule& rule : e2e_option_rules()) {
    CAPTURE(rule.flag);
    E2eOptions o;
    o.per_layer = true;  // the rows that apply only with it apply
    rule.set(o, rule.min);
    CHECK_NOTHROW(validate_e2e_options(o));
    rule.set(o, rule.min - 1);
    bool named = false;
    try {
      validate_e2e_options(o);
    } catch (const tl::Error& e) {
      named = std::string(e.what()).find(rule.flag) != std::string::npos;
    }
    CHECK(named);
    if (std::isfinite(rule.max) && rule.max < 1e6) {
      rule.set(o, rule.max);
      CHECK_NOTHROW(validate_e2e_options(o));
      rule.set(o, rule.max + 1);
      CHECK_THROWS_AS(validate_e2e_options(o), tl::Error);
    }
    CHECK(!e2e_option_range(rule.flag).empty());
  }
  // run_e2e_tier checks them before it opens anything (bad input, exit 2).
  E2eOptions o;
  o.file = "does-not-matter.tinyloop";
  o.tokens = "does-not-matter.u32";
  o.decode_batch = 17;
  CHECK_THROWS_WITH_AS(run_e2e_tier(o), doctest::Contains("--decode-batch"), tl::Error);
}

TEST_CASE("gpu stream plan: residuals on the device when they fit, in host memory when not, refused with the numbers") {
  tl::ModelConfig c;
  c.d_model = 4096; c.n_heads = 32; c.n_kv_heads = 32; c.d_head = 128; c.ffn = 11008; c.vocab = 32000;
  c.n_pre = 32; c.n_loop = 0; c.loops = 0; c.max_seq = 4096;
  std::vector<tl::gpu::StreamModel> models = {{c, {true, false, false}}, {c, {true, true, true}}};
  tl::gpu::ModelFootprint ref, q;  // a 7B block in bf16 / int4 g128 packed (bytes as device_model's)
  ref.block_device = 202'000'000ull * 2, ref.block_staged = 202'000'000ull * 2, ref.block_dense_staging = 11008ull * 4096 * 2;
  ref.head_device = 32000ull * 4096 * 2, ref.head_staged = ref.head_device;
  q.block_device = 202'000'000ull * 3, q.block_staged = 202'000'000ull, q.head_device = 32000ull * 4096 * 2;
  static const std::vector<int32_t> tok(16 * 2048, 1);
  std::vector<tl::gpu::StreamSpec> streams;
  streams.emplace_back(0, tl::gpu::GpuPath::kFp16, tl::ForwardMode::kPrefill, 16, 2048, 16, tok.data());
  for (tl::gpu::GpuPath p : {tl::gpu::GpuPath::kFp16, tl::gpu::GpuPath::kNative, tl::gpu::GpuPath::kMarlin})
    streams.emplace_back(1, p, tl::ForwardMode::kPrefill, 16, 2048, 16, tok.data());
  const uint64_t residuals = 4ull * 16 * 2048 * 4096 * 4;  // four streams of 16 x 2048 rows of D fp32
  const tl::gpu::StreamPlan big = tl::gpu::plan_stream_run(models, {ref, q}, streams, uint64_t(140) << 30);
  CHECK(!big.residuals_on_host);
  CHECK(big.residuals == residuals);
  CHECK(big.blocks == 2 * (ref.block_device + q.block_device));
  CHECK(big.pinned == 2 * (ref.block_staged + q.block_staged));
  // Three kept chunks of 16 windows x L positions x vocab fp16 within 1.5 GiB; L <= ctx.
  CHECK(big.chunk_positions >= 1);
  CHECK(big.chunk_positions <= 2048);
  CHECK(3.0 * 16 * double(big.chunk_positions) * 32000 * 2 <= double(uint64_t(3) << 29));
  // Memory independent of depth: the same plan for 2 blocks and for 126.
  c.n_pre = 126;
  models[0].config = models[1].config = c;
  CHECK(tl::gpu::plan_stream_run(models, {ref, q}, streams, uint64_t(140) << 30).device() == big.device());
  // Just under what the plan needs on the device: the residuals go to the host.
  const tl::gpu::StreamPlan host = tl::gpu::plan_stream_run(models, {ref, q}, streams, big.device() - 1);
  CHECK(host.residuals_on_host);
  CHECK(host.residuals < residuals);
  CHECK(host.pinned == big.pinned + residuals);
  // Too little even then: one line with the numbers and what helps.
  CHECK_THROWS_WITH_AS(tl::gpu::plan_stream_run(models, {ref, q}, streams, uint64_t(1) << 30),
                       doctest::Contains("lower --batch / --decode-batch or --ctx"), tl::Error);
}
