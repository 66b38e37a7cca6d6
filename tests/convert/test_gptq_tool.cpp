// gptq-quantize end to end, in-process, on a generated 2-layer Llama-style HF checkpoint
// (config.json + model.safetensors written with tl::write_safetensors) and a calibration file
// whose Hessians come from seeded, correlated per-layer activations X:
//  - GPTQ's layer-output error ||X W_hat - X W|| (W_hat as stored: q * fp16 scale + fp16 zero)
//    is below RTN's for every weight;
//  - the output carries every other tensor and the config, names mapped as documented;
//  - missing Hessians / no calibration are errors that write nothing.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "formats/calib_file.h"
#include "core/error.h"
#include "formats/safetensors.h"
#include "formats/tinyloop_file.h"
#include "libconvert/gptq.h"
#include "jobs/gptq_quantize_tool.h"
#include "libconvert/hessian.h"

namespace {

constexpr int64_t kD = 128, kHeads = 4, kKvHeads = 2, kHeadDim = 32, kFfn = 256, kVocab = 160, kLayers = 2;
constexpr int64_t kTokens = 512;  // calibration rows per layer input

std::string tmp_dir(const std::string& name) {
  const std::string d = std::string(TL_TEST_TMP) + "/gptq_tool_" + name + "_" + std::to_string(getpid());
  ::mkdir(TL_TEST_TMP, 0755);
  ::mkdir(d.c_str(), 0755);
  return d;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// PyTorch-oriented [N, K] fp16 weight.
tl::Tensor linear_pt(const std::string& name, int64_t N, int64_t K, std::mt19937_64& rng) {
  std::student_t_distribution<float> td(5.0f);
  std::vector<float> v(size_t(N * K));
  for (float& x : v) x = td(rng) / std::sqrt(float(K));
  return tl::Tensor::from_float(name, {N, K}, v.data(), tl::DType::F16);
}

// Correlated activations [rows, K]: a shared low-rank part plus per-channel scales, a few
// outlier channels (what makes GPTQ's Hessian weighting matter).
std::vector<float> activations(int64_t rows, int64_t K, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  const int64_t r = 8;
  std::vector<float> B(size_t(r * K)), X(size_t(rows * K));
  for (float& b : B) b = nd(rng);
  for (int64_t i = 0; i < rows; ++i) {
    float z[r];
    for (float& zz : z) zz = nd(rng);
    for (int64_t k = 0; k < K; ++k) {
      float v = nd(rng);
      for (int64_t j = 0; j < r; ++j) v += 0.5f * z[j] * B[size_t(j * K + k)];
      X[size_t(i * K + k)] = v * ((k % 31 == 0) ? 6.0f : 1.0f);
    }
  }
  return X;
}

struct Fixture {
  std::string dir, ckpt, calib;
  std::map<std::string, tl::Tensor> hf;           // HF tensors by name
  std::map<std::string, std::vector<float>> X;    // TinyLoop weight name -> its input [kTokens, K]

  explicit Fixture(const std::string& name) : dir(tmp_dir(name)), ckpt(dir + "/llama"), calib(dir + "/calib.h5") {
    ::mkdir(ckpt.c_str(), 0755);
    std::mt19937_64 rng(42);
    std::normal_distribution<float> nd;
    auto add = [&](tl::Tensor t) { hf.emplace(t.name, std::move(t)); };
    std::vector<float> e(size_t(kVocab * kD));
    for (float& x : e) x = 0.02f * nd(rng);
    add(tl::Tensor::from_float("model.embed_tokens.weight", {kVocab, kD}, e.data(), tl::DType::F32));
    std::vector<float> ones(size_t(kFfn), 1.0f);
    for (int64_t i = 0; i < kLayers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      add(tl::Tensor::from_float(p + "input_layernorm.weight", {kD}, ones.data(), tl::DType::F16));
      add(tl::Tensor::from_float(p + "post_attention_layernorm.weight", {kD}, ones.data(), tl::DType::F16));
      add(linear_pt(p + "self_attn.q_proj.weight", kHeads * kHeadDim, kD, rng));
      add(linear_pt(p + "self_attn.k_proj.weight", kKvHeads * kHeadDim, kD, rng));
      add(linear_pt(p + "self_attn.v_proj.weight", kKvHeads * kHeadDim, kD, rng));
      add(linear_pt(p + "self_attn.o_proj.weight", kD, kHeads * kHeadDim, rng));
      add(linear_pt(p + "mlp.gate_proj.weight", kFfn, kD, rng));
      add(linear_pt(p + "mlp.up_proj.weight", kFfn, kD, rng));
      add(linear_pt(p + "mlp.down_proj.weight", kD, kFfn, rng));
    }
    add(tl::Tensor::from_float("model.norm.weight", {kD}, ones.data(), tl::DType::F16));
    add(linear_pt("lm_head.weight", kVocab, kD, rng));
    std::vector<const tl::Tensor*> list;
    for (auto& kv : hf) list.push_back(&kv.second);
    tl::write_safetensors(ckpt + "/model.safetensors", list);
    const nlohmann::json cfg = {{"model_type", "llama"}, {"hidden_size", kD}, {"num_attention_heads", kHeads},
                                {"num_key_value_heads", kKvHeads}, {"intermediate_size", kFfn},
                                {"num_hidden_layers", kLayers}, {"vocab_size", kVocab}, {"rms_norm_eps", 1e-5},
                                {"rope_theta", 10000.0}, {"hidden_act", "silu"}, {"tie_word_embeddings", false}};
    std::ofstream(ckpt + "/config.json") << cfg.dump(2);

    // Per-layer inputs (q/k/v and gate/up share theirs) and their Hessians.
    tl::CalibWriter cw(calib);
    uint64_t seed = 100;
    for (int64_t i = 0; i < kLayers; ++i) {
      const std::string p = "pre." + std::to_string(i) + ".";
      for (auto [short_name, K] : {std::pair<std::string, int64_t>{"attn_qkv", kD}, {"attn_out", kHeads * kHeadDim},
                             {"mlp_gate", kD}, {"mlp_down", kFfn}}) {
        std::vector<float> x = activations(kTokens, K, seed++);
        tl::HessianAccumulator acc(K);
        for (int64_t s = 0; s < kTokens / 64; ++s) acc.add_batch(x.data() + s * 64 * K, 64, 1);
        tl::Hessian h;
        h.name = p + short_name;
        h.K = K;
        h.nsamples = acc.nsamples();
        h.H.assign(acc.H().data(), acc.H().data() + K * K);
        cw.write(h);
        if (short_name == std::string("mlp_gate")) {
          h.name = p + "mlp_up";
          cw.write(h);
          X[p + "mlp_up"] = x;
        }
        X[p + short_name] = std::move(x);
      }
    }
    cw.commit();
  }

  // W [K, N] of a TinyLoop linear from the HF tensors (transposed, q|k|v concatenated).
  std::vector<float> weight(const std::string& tl_name) const {
    const std::string i = tl_name.substr(4, tl_name.find('.', 4) - 4);
    const std::string p = "model.layers." + i + ".";
    const std::string s = tl_name.substr(tl_name.rfind('.') + 1);
    std::vector<std::string> parts;
    if (s == "attn_qkv") parts = {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"};
    else if (s == "attn_out") parts = {p + "self_attn.o_proj.weight"};
    else parts = {p + "mlp." + s.substr(4) + "_proj.weight"};
    int64_t N = 0;
    const int64_t K = hf.at(parts[0]).shape[1];
    for (auto& n : parts) N += hf.at(n).shape[0];
    std::vector<float> W(size_t(K * N));
    int64_t n0 = 0;
    for (auto& n : parts) {
      const tl::Tensor& t = hf.at(n);
      const std::vector<float> v = t.to_float();
      for (int64_t r = 0; r < t.shape[0]; ++r)
        for (int64_t k = 0; k < K; ++k) W[size_t(k * N + n0 + r)] = v[size_t(r * K + k)];
      n0 += t.shape[0];
    }
    return W;
  }
};

// ||X (W_hat - W)||_F in double.
double output_error(const std::vector<float>& X, const std::vector<float>& W_hat, const std::vector<float>& W, int64_t K, int64_t N) {
  const int64_t rows = int64_t(X.size()) / K;
  std::vector<double> E(size_t(K * N));
  for (size_t i = 0; i < E.size(); ++i) E[i] = double(W_hat[i]) - double(W[i]);
  double s = 0;
  std::vector<double> y(static_cast<size_t>(N));
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(y.begin(), y.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double x = X[size_t(r * K + k)];
      for (int64_t n = 0; n < N; ++n) y[size_t(n)] += x * E[size_t(k * N + n)];
    }
    for (double v : y) s += v * v;
  }
  return std::sqrt(s);
}

tl::GptqQuantizeOptions base_options(const Fixture& f, const std::string& out) {
  tl::GptqQuantizeOptions o;
  o.input = f.ckpt;
  o.output = out;
  o.calib = f.calib;
  o.group_size = tl::GroupSize::rows(64);
  o.threads = 2;
  o.quiet = true;
  return o;
}

}  // namespace

TEST_CASE("gptq-quantize: GPTQ beats RTN on every weight of a 2-layer Llama checkpoint") {
  Fixture f("llama");
  const std::string out_gptq = f.dir + "/gptq.tinyloop", out_rtn = f.dir + "/rtn.tinyloop";
  tl::GptqQuantizeOptions o = base_options(f, out_gptq);
  REQUIRE(tl::run_gptq_quantize(o) == 0);
  o.output = out_rtn;
  o.method = "rtn";
  REQUIRE(tl::run_gptq_quantize(o) == 0);

  tl::TinyloopReader g(out_gptq), r(out_rtn);
  const std::vector<std::string> expect_quant = {"pre.0.attn_out", "pre.0.attn_qkv", "pre.0.mlp_down", "pre.0.mlp_gate",
                                                 "pre.0.mlp_up", "pre.1.attn_out", "pre.1.attn_qkv", "pre.1.mlp_down",
                                                 "pre.1.mlp_gate", "pre.1.mlp_up"};
  CHECK(g.quant_names() == expect_quant);
  CHECK(r.quant_names() == expect_quant);
  for (const std::string& name : expect_quant) {
    CAPTURE(name);
    const tl::QuantWeight qg = g.read_quant(name), qr = r.read_quant(name);
    const std::vector<float> W = f.weight(name);
    REQUIRE(int64_t(W.size()) == qg.K * qg.N);
    CHECK(qg.group_size == 64);
    CHECK(qg.provenance["method"] == "gptq");
    CHECK(qg.provenance["nsamples"] == kTokens / 64);
    CHECK(qr.provenance["method"] == "rtn");
    const double eg = output_error(f.X.at(name), qg.dequantize(), W, qg.K, qg.N);
    const double er = output_error(f.X.at(name), qr.dequantize(), W, qr.K, qr.N);
    MESSAGE(name << " " << qg.K << "x" << qg.N << ": ||X E|| GPTQ " << eg << ", RTN " << er);
    CHECK(eg < er);
    // The loss GPTQ reports is what it minimized: 0.5 tr(E^T H_damped E) for its float32
    // W_hat, so it must also rank below RTN's on the same measure.
    CHECK(qg.provenance["gptq_loss"].get<double>() < qg.provenance["rtn_loss"].get<double>());
  }
  // Dense tensors carried over under TinyLoop names, config converted.
  const std::vector<std::string> dense = g.dense_names();
  for (const char* n : {"embed", "final_norm", "head", "pre.0.attn_norm", "pre.0.mlp_norm", "pre.1.attn_norm"}) {
    CHECK_MESSAGE(std::find(dense.begin(), dense.end(), n) != dense.end(), n);
  }
  const tl::Tensor head = g.read_dense("head");
  CHECK(head.shape == std::vector<int64_t>{kD, kVocab});  // [K, N]: transposed from lm_head [vocab, D]
  CHECK(head.dtype == tl::DType::F16);
  const std::vector<float> h = head.to_float(), src = f.hf.at("lm_head.weight").to_float();
  bool same = true;
  for (int64_t k = 0; k < kD && same; ++k)
    for (int64_t n = 0; n < kVocab; ++n) same &= h[size_t(k * kVocab + n)] == src[size_t(n * kD + k)];
  CHECK(same);
  const tl::Tensor embed = g.read_dense("embed");
  CHECK(embed.shape == std::vector<int64_t>{kVocab, kD});
  CHECK(embed.dtype == tl::DType::F32);
  const tl::ModelConfig c = g.config();
  CHECK(c.d_model == kD);
  CHECK(c.n_kv_heads == kKvHeads);
  CHECK(c.n_pre == kLayers);
  CHECK(c.n_loop == 0);
}

TEST_CASE("gptq-quantize: unselected linears stay dense [K, N] with q | k | v concatenated exactly") {
  Fixture f("dense");
  tl::GptqQuantizeOptions o = base_options(f, f.dir + "/out.tinyloop");
  o.only = R"(^pre\.1\.mlp_up$)";
  o.act_order = true;
  o.zero_mode = tl::ZeroMode::kFloat;
  REQUIRE(tl::run_gptq_quantize(o) == 0);
  tl::TinyloopReader rd(o.output);
  CHECK(rd.quant_names() == std::vector<std::string>{"pre.1.mlp_up"});
  const tl::QuantWeight q = rd.read_quant("pre.1.mlp_up");
  CHECK(q.provenance["act_order"] == true);
  CHECK(q.provenance["static_groups"] == true);
  CHECK(q.provenance["zero"] == "float");
  const tl::Tensor qkv = rd.read_dense("pre.0.attn_qkv");
  CHECK(qkv.shape == std::vector<int64_t>{kD, (kHeads + 2 * kKvHeads) * kHeadDim});
  CHECK(qkv.to_float() == f.weight("pre.0.attn_qkv"));  // fp16 -> fp16, exact
}

TEST_CASE("gptq-quantize: bad input is an error and writes nothing") {
  Fixture f("errors");
  const std::string out = f.dir + "/never.tinyloop";
  tl::GptqQuantizeOptions o = base_options(f, out);
  o.calib.clear();
  CHECK_THROWS_WITH_AS(tl::run_gptq_quantize(o), doctest::Contains("--calib"), tl::Error);
  CHECK(!exists(out));

  // A calibration file lacking some Hessians: every missing weight is listed.
  const std::string partial = f.dir + "/partial.h5";
  {
    tl::CalibReader full(f.calib);
    tl::CalibWriter w(partial);
    for (const std::string& n : full.names()) {
      if (n.find("mlp_down") == std::string::npos) w.write(full.read(n));
    }
    w.commit();
  }
  o = base_options(f, out);
  o.calib = partial;
  try {
    tl::run_gptq_quantize(o);
    FAIL("expected tl::Error");
  } catch (const tl::Error& e) {
    const std::string m = e.what();
    CHECK(m.find("pre.0.mlp_down") != std::string::npos);
    CHECK(m.find("pre.1.mlp_down") != std::string::npos);
    CHECK(m.find("2 selected") != std::string::npos);
  }
  CHECK(!exists(out));

  o = base_options(f, out);
  o.only = "no_such_weight";
  CHECK_THROWS_AS(tl::run_gptq_quantize(o), tl::Error);
  o.only = "(";
  CHECK_THROWS_WITH_AS(tl::run_gptq_quantize(o), doctest::Contains("regular expression"), tl::Error);
  CHECK(!exists(out));
}
