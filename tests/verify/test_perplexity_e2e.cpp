// The e2e tier's host side: input validation before any GPU work (bad input throws, exit 2),
// the skip reasons (no tokens, no quantized weight, no usable GPU here), and the drift report
// (text, Markdown, JSON) rendered from a result with known numbers.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "formats/atomic_output.h"
#include "formats/token_file.h"
#include "libconvert/minmax_quantizer.h"
#include "libconvert/model_weights.h"
#include "libverify/drift_report.h"
#include "libverify/e2e_tier.h"

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
    tl::LinearWeight& l = w.pre[0].mlp_up;
    const tl::MinMaxResult r = tl::rtn_quantize(l.W.data(), l.K, l.N, 32, tl::ZeroMode::kInt);
    auto q = std::make_shared<tl::QuantWeight>();
    q->name = l.name; q->K = l.K; q->N = l.N; q->group_size = r.group_size;
    q->q = r.q; q->scale = r.scale16; q->zero = r.zero16;
    l.W = q->dequantize();
    l.quant = q;
  }
  return w;
}

E2eResult known_result() {
  E2eResult r;
  r.status = Status::kPassed;
  r.options.file = "m.tinyloop";
  r.options.tokens = "eval.u32";
  r.options.ctx = 512;
  r.n_tokens = 65536;
  r.windows = 128;
  r.scored = 32768;
  r.first_target = 256;
  r.device = "NVIDIA H200 (sm_90)";
  r.main.file = "m.tinyloop";
  r.main.info.quantized = 31;
  r.main.info.marlin_packed = 30;
  r.main.info.marlin_bytes = 3 << 20;
  r.main.has_drift = true;
  r.main.drift_pct = 0.0123;
  r.main.first_dispatch_line = "[marlin] first dispatch ok: BT=8192 N=1536 K=512 gs=128";
  for (GpuPath p : {GpuPath::kFp16, GpuPath::kNative, GpuPath::kMarlin}) {
    E2ePathRow row;
    row.path = p;
    row.s.tokens = 32768;
    row.s.ppl = p == GpuPath::kMarlin ? 3.0204 : 3.0200;
    row.s.ppl_err = 0.0111;
    row.s.has_reference = p != GpuPath::kFp16;
    row.s.kld_mean = 1.5e-5;
    row.s.top1_agreement = 0.9991;
    if (p == GpuPath::kMarlin) {
      row.dispatches[1] = 120;
      row.dispatches[2] = 4;
      row.fallbacks["N % 128 != 0"] = 4;
    }
    r.main.rows.push_back(row);
  }
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
  // Where no GPU model can be built, the tier skips with that reason (here: CPU machines).
  const std::string why = gpu_model_unavailable_reason();
  if (!why.empty()) {
    r = run_e2e_tier(o);
    CHECK(r.status == Status::kSkipped);
    CHECK(r.reason == why);
    CHECK(r.windows == 4);
    const TierResult t = e2e_tier_result(r);
    CHECK(t.status == Status::kSkipped);
    CHECK(t.cases.empty());
  }
}

TEST_CASE("e2e tier: drift report renders the known numbers") {
  const E2eResult r = known_result();
  std::ostringstream md, txt;
  write_drift_markdown(r, md);
  write_drift_text(r, txt);
  const std::string m = md.str(), t = txt.str();
  INFO(m);
  CHECK(m.find("| path | PPL | note |") != std::string::npos);
  CHECK(m.find("| fp16 (W_hat as fp16 copies, cuBLAS) | 3.0200 ± 0.0111 | reference; 32768 tokens scored |") != std::string::npos);
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
  CHECK(j["model"]["paths"].size() == 3);
  CHECK(j["model"]["paths"][2]["fallbacks"]["N % 128 != 0"] == 4);
  CHECK(j["model"]["paths"][1]["vs_reference"]["top1_agreement"].get<double>() == doctest::Approx(0.9991));
  CHECK(j["baseline"]["file"] == "dir/rtn.tinyloop");
  // The tier-framework form: one case per (model, path).
  const TierResult tr = e2e_tier_result(r);
  CHECK(tr.cases.size() == 6);
  CHECK(tr.cases[2].message.find("fallback 'N % 128 != 0' x4") != std::string::npos);
  // Files, atomically.
  const std::string dir = scratch("report");
  tl::AtomicOutput(dir + "/drift.json", tl::OutputSink::kStream).write_text([&](std::ostream& f) { write_drift_json(r, f); });
  CHECK(nlohmann::json::parse(std::ifstream(dir + "/drift.json"))["tier"] == "e2e");
}
