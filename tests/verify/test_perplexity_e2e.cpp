// The e2e tier's host side: input validation before any scoring (bad input throws, exit 2),
// the skip reasons, the CPU e2e tier (--device cpu) with and without --reference, --per-layer
// and --score all on tiny random models, and the drift report (text, Markdown, JSON against
// docs/drift-report.schema.json) rendered from a result with known numbers.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "core/error.h"
#include "formats/atomic_output.h"
#include "formats/token_file.h"
#include "libconvert/minmax_quantizer.h"
#include "libconvert/model_weights.h"
#include "libconvert/model_forward.h"
#include "libverify/drift_report.h"
#include "libverify/e2e_tier.h"
#include "verify/json_schema_check.h"

using namespace tl::verify;

namespace {

std::string scratch(const std::string& name) {
  const std::string dir = std::string(TL_TEST_TMP) + "/e2e_" + name;
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

tl::ModelWeights tiny_model(bool quantize) {
  tl::ModelConfig c;
  c.d_model = 64; c.n_heads = 2; c.n_kv_heads = 1; c.d_head = 32; c.ffn = 128; c.vocab = 32;
  c.n_pre = 1; c.n_loop = 1; c.loops = 2;
  tl::ModelWeights w = tl::random_model_weights(c, 5);
  if (quantize) {
    tl::rtn_quantize_linear(w.pre[0].mlp_up, 32);
  }
  return w;
}

E2eResult known_result() {
  E2eResult r;
  r.status = Status::kPassed;
  r.options.tool = "tl-verify";  // what the job sets (jobs/verify_tool.cpp)
  r.options.file = "m.tinyloop";
  r.options.tokens = "eval.u32";
  r.options.ctx = 512;
  r.n_tokens = 65536;
  r.windows = 128;
  r.scored = 32768;
  r.first_target = 256;
  r.device = "NVIDIA H200 (sm_90)";
  r.device_kind = "cuda";
  r.main.file = "m.tinyloop";
  r.main.info.quantized = 31;
  r.main.info.marlin_packed = 30;
  r.main.info.marlin_bytes = 3 << 20;
  r.main.has_drift = true;
  r.main.drift_pct = 0.0123;
  r.main.first_dispatch_line = "[marlin] first dispatch ok: BT=8192 N=1536 K=512 gs=128";
  for (tl::gpu::GpuPath p : {tl::gpu::GpuPath::kFp16, tl::gpu::GpuPath::kNative, tl::gpu::GpuPath::kMarlin}) {
    E2ePathRow row;
    row.path = p;
    row.s.tokens = 32768;
    row.s.ppl = p == tl::gpu::GpuPath::kMarlin ? 3.0204 : 3.0200;
    row.s.ppl_err = 0.0111;
    row.s.has_reference = p != tl::gpu::GpuPath::kFp16;
    row.s.kld_mean = 1.5e-5;
    row.s.top1_agreement = 0.9991;
    if (p == tl::gpu::GpuPath::kMarlin) {
      row.dispatches[1] = 120;
      row.dispatches[2] = 4;
      row.fallbacks["N % 128 != 0"] = 4;
      row.kernels = {{"marlin-hopper", 116}, {"native-int4", 4}};
    }
    row.gemm_m = 4096;
    r.main.rows.push_back(row);
  }
  // The Marlin path in decode mode: M = 16 on the decode kernel, its PPL beside prefill's.
  r.modes = {tl::ForwardMode::kPrefill, tl::ForwardMode::kDecode};
  E2ePathRow dec = r.main.rows[2];
  dec.mode = tl::ForwardMode::kDecode;
  dec.gemm_m = 16;
  dec.s.ppl = 3.0205;
  dec.kernels = {{"marlin-decode", 59392}, {"native-int4", 2048}};
  dec.has_vs_prefill = true;
  dec.vs_prefill_pct = 0.0033;
  r.main.rows.push_back(dec);
  r.baseline = r.main;
  r.baseline->file = "dir/rtn.tinyloop";
  r.baseline->rows[1].s.ppl = 3.3333;
  return r;
}

}  // namespace

TEST_CASE("e2e tier: bad input throws before any GPU work; skips say why") {
  const std::string dir = scratch("inputs");
  tl::write_model_tinyloop(tiny_model(true), dir + "/q.tinyloop", tl::DType::F16);
  tl::write_model_tinyloop(tiny_model(false), dir + "/dense.tinyloop", tl::DType::F16);
  std::vector<int32_t> tok(300);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t(i * 7 % 32);
  tl::write_token_file_u32(dir + "/ok.u32", tok);
  tok[5] = 32;  // == vocab
  tl::write_token_file_u32(dir + "/bad.u32", tok);

  E2eOptions o;
  o.file = dir + "/q.tinyloop";
  o.ctx = 64;
  // No tokens: skipped with the reason.
  E2eResult r = run_e2e_tier(o);
  CHECK(r.status == Status::kSkipped);
  CHECK(r.reason.find("--tokens") != std::string::npos);
  // A token id outside the vocabulary: bad input, whatever the GPU.
  o.tokens = dir + "/bad.u32";
  CHECK_THROWS_AS(run_e2e_tier(o), tl::Error);
  // ctx longer than the stream.
  o.tokens = dir + "/ok.u32";
  o.ctx = 512;
  CHECK_THROWS_AS(run_e2e_tier(o), tl::Error);
  o.ctx = 64;
  // A baseline with another vocabulary.
  {
    tl::ModelWeights other = tiny_model(true);
    other.config.vocab = 48;
    other = tl::random_model_weights(other.config, 9);
    tl::write_model_tinyloop(other, dir + "/other.tinyloop", tl::DType::F16);
    E2eOptions ob = o;
    ob.baseline = dir + "/other.tinyloop";
    CHECK_THROWS_AS(run_e2e_tier(ob), tl::Error);
  }
  // Nothing quantized: skipped.
  E2eOptions od = o;
  od.file = dir + "/dense.tinyloop";
  r = run_e2e_tier(od);
  CHECK(r.status == Status::kSkipped);
  CHECK(r.reason.find("no quantized weight") != std::string::npos);
  // Where no GPU model can be built, --device cuda skips with that reason, auto scores on the CPU.
  const std::string why = tl::gpu::gpu_model_unavailable_reason();
  if (!why.empty()) {
    E2eOptions oc = o;
    oc.device = E2eDevice::kCuda;
    r = run_e2e_tier(oc);
    CHECK(r.status == Status::kSkipped);
    CHECK(r.reason == "--device cuda: " + why);
    CHECK(r.windows == 4);
    const TierResult t = e2e_tier_result(r);
    CHECK(t.status == Status::kSkipped);
    CHECK(t.cases.empty());
    r = run_e2e_tier(o);
    CHECK(r.status == Status::kPassed);
    CHECK(r.device_kind == "cpu");
  }
  // --per-layer needs a reference; --score all needs non-overlapping windows.
  E2eOptions op = o;
  op.per_layer = true;
  CHECK_THROWS_WITH_AS(run_e2e_tier(op), doctest::Contains("--reference"), tl::Error);
  E2eOptions oa = o;
  oa.score = ScoreMode::kAll;
  oa.stride = 32;
  CHECK_THROWS_WITH_AS(run_e2e_tier(oa), doctest::Contains("non-overlapping"), tl::Error);
  // A reference of another shape, or a quantized one: exit 2, naming the field.
  {
    tl::ModelWeights other = tiny_model(false);
    other.config.d_model = 96;
    other = tl::random_model_weights(other.config, 9);
    tl::write_model_tinyloop(other, dir + "/wide.tinyloop", tl::DType::F16);
    E2eOptions orf = o;
    orf.reference = dir + "/wide.tinyloop";
    CHECK_THROWS_WITH_AS(run_e2e_tier(orf), doctest::Contains("config.d_model"), tl::Error);
    orf.reference = dir + "/q.tinyloop";
    CHECK_THROWS_WITH_AS(run_e2e_tier(orf), doctest::Contains("quantized weights"), tl::Error);
  }
}

namespace {

// FILE = the tiny model with pre.0.mlp_up quantized, REF = the same model dense (both stored
// fp16, so every other weight is bit-identical), tokens from a fixed stream.
struct CpuCase {
  std::string dir, file, ref, what_hat, tokens;
};

CpuCase cpu_case(const std::string& name) {
  CpuCase c;
  c.dir = scratch(name);
  c.file = c.dir + "/q.tinyloop";
  c.ref = c.dir + "/ref.tinyloop";
  c.what_hat = c.dir + "/what.tinyloop";
  c.tokens = c.dir + "/t.u32";
  tl::write_model_tinyloop(tiny_model(true), c.file, tl::DType::F16);
  tl::write_model_tinyloop(tiny_model(false), c.ref, tl::DType::F16);
  // W_hat as a dense model: the quantized file's exact weights, nothing quantized.
  tl::ModelWeights hat = tl::load_model_weights(c.file, false);
  hat.pre[0].mlp_up.quant.reset();
  tl::write_model_tinyloop(hat, c.what_hat, tl::DType::F32);
  std::vector<int32_t> tok(640);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7 + i / 5) % 32);
  tl::write_token_file_u32(c.tokens, tok);
  return c;
}

// The e2e tier on the CPU over the case's file and tokens, windows of 64.
E2eOptions cpu_options(const CpuCase& c) {
  E2eOptions o;
  o.tool = "tl-verify";  // what the job sets (jobs/verify_tool.cpp): the drift report's producer
  o.file = c.file;
  o.tokens = c.tokens;
  o.ctx = 64;
  o.device = E2eDevice::kCpu;
  return o;
}

}  // namespace

TEST_CASE("e2e on the CPU: PPL as the forward computes it, the same for any thread count") {
  const CpuCase c = cpu_case("cpu_ppl");
  E2eOptions o = cpu_options(c);
  o.threads = 1;
  const E2eResult one = run_e2e_tier(o);
  o.threads = 2;
  const E2eResult two = run_e2e_tier(o);
  REQUIRE(one.status == Status::kPassed);
  CHECK(one.device_kind == "cpu");
  REQUIRE(one.main.rows.size() == 1);
  CHECK(one.main.rows[0].path == tl::gpu::GpuPath::kNative);
  CHECK(one.main.rows[0].trace.nll == two.main.rows[0].trace.nll);  // bit for bit
  // The same number straight from the forward and perplexity.cpp's accumulation.
  const tl::ModelWeights w = tl::load_model_weights(c.file, false);
  const std::vector<int32_t> tok = tl::read_token_file(c.tokens, 32);
  const WindowPlan plan = plan_windows(int64_t(tok.size()), 64, 0);
  PathAccum acc;
  for (int64_t s : plan.starts) {
    const tl::ActMatrix l = tl::forward_logits(w, tok.data() + s, 1, 64);
    accumulate_windows(plan, tok.data() + s, 1, l.data(), 32, acc);
  }
  CHECK(one.main.rows[0].s.ppl == doctest::Approx(acc.nll.ppl()).epsilon(1e-12));
  CHECK(one.scored == 10 * 32);
  CHECK(one.tokens_per_second > 0);
  // --score all: ctx - 1 targets per non-overlapping window.
  o.score = ScoreMode::kAll;
  const E2eResult all = run_e2e_tier(o);
  CHECK(all.scored == 10 * 63);
  CHECK(all.first_target == 1);
  CHECK(all.main.rows[0].s.tokens == 10 * 63);
}

TEST_CASE("e2e on the CPU against the reference: zero for identical weights, the quantized weight's error otherwise") {
  const CpuCase c = cpu_case("cpu_ref");
  E2eOptions o = cpu_options(c);
  // The reference holding exactly FILE's W_hat: the same logits, so no drift at all.
  o.reference = c.what_hat;
  const E2eResult same = run_e2e_tier(o);
  REQUIRE(same.status == Status::kPassed);
  REQUIRE(same.reference);
  const E2ePathRow& s0 = same.main.rows[0];
  REQUIRE(s0.has_ref);
  CHECK(s0.vs_ref.ratio == 1.0);
  CHECK(s0.vs_ref.kld.max == 0.0);
  CHECK(s0.vs_ref.top1 == 1.0);
  CHECK(s0.vs_ref.dp_rms == 0.0);
  CHECK(same.reference->nll.ppl == s0.s.ppl);
  // The original model: the quantization error of pre.0.mlp_up shows, and --per-layer puts it
  // all on that weight (the only quantized one: swapping it alone into the reference is FILE).
  o.reference = c.ref;
  o.per_layer = true;
  o.per_layer_windows = 10;
  const E2eResult r = run_e2e_tier(o);
  REQUIRE(r.status == Status::kPassed);
  const E2ePathRow& row = r.main.rows[0];
  CHECK(row.vs_ref.kld.mean > 0);
  CHECK(row.vs_ref.kld.max >= row.vs_ref.kld.p99);
  CHECK(row.vs_ref.kld.p99 >= row.vs_ref.kld.median);
  CHECK(row.vs_ref.ratio == doctest::Approx(row.s.ppl / r.reference->nll.ppl).epsilon(1e-9));
  CHECK(row.vs_ref.top1 < 1.0 + 1e-12);
  REQUIRE(r.per_layer.size() == 1);
  CHECK(r.per_layer[0].weight == "pre.0.mlp_up");
  CHECK(r.per_layer[0].kld_mean == doctest::Approx(row.vs_ref.kld.mean).epsilon(1e-12));
  CHECK(r.per_layer[0].ln_ppl_ratio == doctest::Approx(row.vs_ref.ln_ratio).epsilon(1e-12));
  // A KLD bound below what the quantization costs fails the tier, naming it.
  o.per_layer = false;
  o.max_ref_kld = row.vs_ref.kld.mean / 2;
  const E2eResult bad = run_e2e_tier(o);
  CHECK(bad.status == Status::kFailed);
  CHECK(bad.reason.find("exceeds --max-ref-kld") != std::string::npos);
  o.max_ref_kld = 0;
  o.max_ppl_ratio = 1e-3;
  CHECK(run_e2e_tier(o).reason.find("exceeds --max-ppl-ratio") != std::string::npos);
  // The report of a real CPU run validates against the schema and carries the reference.
  std::ifstream sf(std::string(TL_GOLDEN_DIR) + "/../../docs/drift-report.schema.json");
  REQUIRE(sf.good());
  const nlohmann::json schema = nlohmann::json::parse(sf);
  for (const E2eResult* res : {&r, &same}) {
    const nlohmann::json j = drift_report_json(*res);
    CHECK(tl::verify::testing::check_schema(j, schema, schema) == "");
    CHECK(j["reference"]["n_scored"] == 320);
    CHECK(j["paths"][0]["name"] == "native");
    CHECK(j["paths"][0]["device"] == "cpu");
  }
  const nlohmann::json j = drift_report_json(r);
  CHECK(j["per_layer"][0]["weight"] == "pre.0.mlp_up");
  CHECK(j["paths"][0]["kld"]["mean"].get<double>() == doctest::Approx(row.vs_ref.kld.mean));
  std::ostringstream md, txt;
  write_drift_markdown(r, md);
  write_drift_text(r, txt);
  CHECK(md.str().find("### Against the original model") != std::string::npos);
  CHECK(md.str().find("<svg") != std::string::npos);
  CHECK(md.str().find("`pre.0.mlp_up`") != std::string::npos);
  CHECK(txt.str().find("reference ref.tinyloop") != std::string::npos);
  CHECK(txt.str().find("tokens/s per model") != std::string::npos);
}

TEST_CASE("e2e tier: drift report renders the known numbers") {
  const E2eResult r = known_result();
  std::ostringstream md, txt;
  write_drift_markdown(r, md);
  write_drift_text(r, txt);
  const std::string m = md.str(), t = txt.str();
  INFO(m);
  CHECK(m.find("| path | PPL | note |") != std::string::npos);
  CHECK(m.find("| fp16 (W_hat as fp16 copies, cuBLAS) | 3.0200 ± 0.0111 | kernel reference; 32768 tokens scored;") != std::string::npos);
  CHECK(m.find("GEMMs: marlin-hopper 116, native-int4 4") != std::string::npos);
  CHECK(m.find("| Marlin + correction (decode, M = 16) | 3.0205 ± 0.0111 |") != std::string::npos);
  CHECK(m.find("PPL vs prefill +0.0033 %; GEMMs: marlin-decode 59392, native-int4 2048") != std::string::npos);
  CHECK(m.find("| Marlin + correction | 3.0204 ± 0.0111 |") != std::string::npos);
  CHECK(m.find("drift +0.012 % vs native") != std::string::npos);
  CHECK(m.find("30/31 packed, 120 Marlin GEMMs, 4 fallbacks (N % 128 != 0: 4); +3.0 MiB VRAM") != std::string::npos);
  CHECK(m.find("| baseline rtn.tinyloop: native INT4 (int4_gemm) | 3.3333 ± 0.0111 |") != std::string::npos);
  CHECK(m.find("first dispatch ok") != std::string::npos);
  CHECK(t.find("e2e: passed") != std::string::npos);
  const nlohmann::json j = drift_report_json(r);
  CHECK(j["status"] == "passed");
  CHECK(j["scored_tokens"] == 32768);
  CHECK(j["model"]["drift_pct"].get<double>() == doctest::Approx(0.0123));
  CHECK(j["paths"].size() == 8);
  CHECK(j["paths"][2]["name"] == "marlin");
  CHECK(j["paths"][2]["mode"] == "prefill");
  CHECK(j["paths"][2]["vs_prefill_pct"].is_null());
  CHECK(j["paths"][3]["mode"] == "decode");
  CHECK(j["paths"][3]["gemm_m"] == 16);
  CHECK(j["paths"][3]["kernels"]["marlin-decode"] == 59392);
  CHECK(j["paths"][3]["vs_prefill_pct"].get<double>() == doctest::Approx(0.0033));
  CHECK(j["modes"] == nlohmann::json::array({"prefill", "decode"}));
  CHECK(j["paths"][2]["fallbacks"]["N % 128 != 0"] == 4);
  CHECK(j["paths"][1]["vs_fp16"]["top1_agreement"].get<double>() == doctest::Approx(0.9991));
  CHECK(j["paths"][1]["ppl_ratio"].is_null());  // no --reference
  CHECK(j["paths"][4]["model"] == "baseline");
  CHECK(j["reference"].is_null());
  CHECK(j["baseline"]["file"] == "dir/rtn.tinyloop");
  std::ifstream sf(std::string(TL_GOLDEN_DIR) + "/../../docs/drift-report.schema.json");
  REQUIRE(sf.good());
  const nlohmann::json schema = nlohmann::json::parse(sf);
  CHECK(tl::verify::testing::check_schema(j, schema, schema) == "");
  nlohmann::json broken = j;
  broken["paths"][0]["name"] = "native-int4";
  CHECK(tl::verify::testing::check_schema(broken, schema, schema) != "");
  // The tier-framework form: one case per (model, path).
  const TierResult tr = e2e_tier_result(r);
  CHECK(tr.cases.size() == 8);
  CHECK(tr.cases[3].label.find("marlin decode") == 0);
  CHECK(tr.cases[3].M == 16);
  CHECK(tr.cases[2].message.find("fallback 'N % 128 != 0' x4") != std::string::npos);
  // Files, atomically.
  const std::string dir = scratch("report");
  tl::AtomicOutput(dir + "/drift.json", tl::OutputSink::kStream).write_text([&](std::ostream& f) { write_drift_json(r, f); });
  CHECK(nlohmann::json::parse(std::ifstream(dir + "/drift.json"))["tier"] == "e2e");
}

TEST_CASE("e2e on the CPU: KLD and top-1 against the reference are KL(ref || model), as computed from the two models' logits") {
  // An independent computation (double log-softmax of the CPU forward's logits of both models)
  // of what the tier reports, so a KLD taken the wrong way round (KL(model || ref)) or a top-1
  // compared against the wrong path fails here, not only against itself.
  const CpuCase c = cpu_case("cpu_kld");
  E2eOptions o = cpu_options(c);
  o.reference = c.ref;
  const E2eResult r = run_e2e_tier(o);
  REQUIRE(r.status == Status::kPassed);
  const E2ePathRow& row = r.main.rows[0];
  const tl::ModelWeights fw = tl::load_model_weights(c.file), rw = tl::load_model_weights(c.ref);
  const std::vector<int32_t> tok = tl::read_token_file(c.tokens);
  const int64_t ctx = 64, V = fw.config.vocab, first = ctx / 2;  // second-half scoring
  auto log_softmax = [V](const float* x, std::vector<double>& out) {
    double mx = x[0];
    for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(x[v]));
    double se = 0;
    for (int64_t v = 0; v < V; ++v) se += std::exp(double(x[v]) - mx);
    out.resize(size_t(V));
    for (int64_t v = 0; v < V; ++v) out[size_t(v)] = double(x[v]) - mx - std::log(se);
  };
  double kl = 0, kl_reversed = 0;
  int64_t n = 0, agree = 0;
  std::vector<double> lf, lr;
  for (int64_t w = 0; w + 1 <= int64_t(tok.size()) / ctx; ++w) {
    const tl::ActMatrix f = tl::forward_logits(fw, tok.data() + w * ctx, 1, ctx);
    const tl::ActMatrix g = tl::forward_logits(rw, tok.data() + w * ctx, 1, ctx);
    for (int64_t t = first; t < ctx; ++t) {
      log_softmax(f.data() + (t - 1) * V, lf);
      log_softmax(g.data() + (t - 1) * V, lr);
      int64_t af = 0, ar = 0;
      for (int64_t v = 0; v < V; ++v) {
        kl += std::exp(lr[size_t(v)]) * (lr[size_t(v)] - lf[size_t(v)]);
        kl_reversed += std::exp(lf[size_t(v)]) * (lf[size_t(v)] - lr[size_t(v)]);
        if (lf[size_t(v)] > lf[size_t(af)]) af = v;
        if (lr[size_t(v)] > lr[size_t(ar)]) ar = v;
      }
      agree += af == ar;
      ++n;
    }
  }
  REQUIRE(n == row.vs_ref.n);
  kl /= double(n);
  kl_reversed /= double(n);
  MESSAGE(std::setprecision(9) << "KL(ref || model) " << kl << ", reversed " << kl_reversed << ", reported "
                                << row.vs_ref.kld.mean);
  // The tier sums per-token KLDs of float logits (~1e-6 relative each): 2e-5 relative is ample.
  // The two directions differ only at third order in the perturbation (here by ~1.2e-3
  // relative); the second assertion keeps this case able to tell them apart, 10x the tolerance.
  constexpr double kTol = 2e-5;
  CHECK(std::fabs(row.vs_ref.kld.mean / kl - 1) <= kTol);  // relative (doctest's Approx adds 1 to the scale)
  CHECK(std::fabs(kl_reversed - kl) > 10 * kTol * kl);
  CHECK(row.vs_ref.top1 == doctest::Approx(double(agree) / double(n)).epsilon(1e-12));
}

TEST_CASE("e2e on the CPU in decode mode: a row per mode, the same PPL, the GEMMs counted per position") {
  const CpuCase c = cpu_case("cpu_decode");
  E2eOptions o = cpu_options(c);
  o.reference = c.ref;
  o.mode = E2eMode::kBoth;
  o.decode_batch = 3;  // 10 windows: batches of 3, 3, 3 and 1 in lockstep
  const E2eResult r = run_e2e_tier(o);
  REQUIRE(r.status == Status::kPassed);
  REQUIRE(r.modes == std::vector<tl::ForwardMode>{tl::ForwardMode::kPrefill, tl::ForwardMode::kDecode});
  REQUIRE(r.main.rows.size() == 2);
  const E2ePathRow& pre = r.main.rows[0];
  const E2ePathRow& dec = r.main.rows[1];
  CHECK(pre.mode == tl::ForwardMode::kPrefill);
  CHECK(dec.mode == tl::ForwardMode::kDecode);
  CHECK(dec.gemm_m == 3);
  CHECK(pre.gemm_m == 64);
  // fp32 products of the same rows in other blocks: the NLLs agree to float rounding (measured
  // ~1e-7 relative), far inside the decode bound.
  REQUIRE(dec.has_vs_prefill);
  CHECK(std::abs(dec.vs_prefill_pct) < 1e-3);
  CHECK(std::abs(dec.vs_prefill_pct) <= kE2eDecodeMaxPplPct);
  CHECK(dec.s.tokens == pre.s.tokens);
  // Against the reference too (its logits per window, as prefill scores them).
  CHECK(dec.vs_ref.kld.mean == doctest::Approx(pre.vs_ref.kld.mean).epsilon(1e-4));
  // The GEMMs: 5 linears per block step + the head, once per forward (prefill: 10 windows) or
  // once per position per batch (decode: 4 batches x 64 positions).
  const long long per = 5 * (long long)tl::block_schedule(tiny_model(true).config).size() + 1;
  CHECK(pre.kernels.at("cpu-fp32") == per * 10);
  CHECK(dec.kernels.at("cpu-fp32") == per * 64 * 4);
  CHECK(kernel_counts_text(dec) == "cpu-fp32 " + std::to_string(per * 64 * 4));
  // auto on the CPU: prefill only; decode alone: one row.
  o.mode = E2eMode::kAuto;
  CHECK(run_e2e_tier(o).main.rows.size() == 1);
  o.mode = E2eMode::kDecode;
  const E2eResult d = run_e2e_tier(o);
  REQUIRE(d.main.rows.size() == 1);
  CHECK(d.main.rows[0].s.ppl == dec.s.ppl);
  CHECK_FALSE(d.main.rows[0].has_vs_prefill);
  // The decode batch is the decode kernel's M: 1..16.
  o.decode_batch = 17;
  CHECK_THROWS_WITH_AS(run_e2e_tier(o), doctest::Contains("--decode-batch"), tl::Error);
  o.decode_batch = 0;
  CHECK_THROWS_AS(run_e2e_tier(o), tl::Error);
}
