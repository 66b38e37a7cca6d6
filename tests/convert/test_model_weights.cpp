// Loading a model's weights from a .tinyloop: dense entries as stored, quantized entries
// dequantized (W_hat = q * scale + zero, with the QuantWeight kept for the GPU runner), a tied
// head, and the errors a broken file must produce.
#include <doctest/doctest.h>

#include <cstdlib>
#include <random>

#include "core/error.h"
#include "core/half.h"
#include "libconvert/minmax_quantizer.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"

namespace {

tl::ModelConfig small_config() {
  tl::ModelConfig c;
  c.d_model = 32; c.n_heads = 4; c.n_kv_heads = 2; c.d_head = 8; c.ffn = 64; c.vocab = 48;
  c.n_pre = 1; c.n_loop = 1; c.loops = 2;
  return c;
}

std::string scratch(const std::string& name) {
  const std::string dir = std::string(TL_TEST_TMP) + "/model_weights_" + name;
  const std::string cmd = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return dir;
}

void quantize_rtn(tl::LinearWeight& l, int64_t group_size) { tl::rtn_quantize_linear(l, group_size); }

}  // namespace

TEST_CASE("model weights: fp32 round trip through a .tinyloop is exact, quantized entries dequantize") {
  tl::ModelWeights w = tl::random_model_weights(small_config(), 21);
  quantize_rtn(w.pre[0].mlp_up, 16);
  quantize_rtn(w.loop[0].attn_qkv, 32);  // per-row (group_size == K)
  const std::string path = scratch("roundtrip") + "/m.tinyloop";
  tl::write_model_tinyloop(w, path, tl::DType::F32);
  const tl::ModelWeights r = tl::load_model_weights(path);
  CHECK(r.config.n_loop == 1);
  CHECK(r.embed == w.embed);
  CHECK(r.final_norm == w.final_norm);
  for (const std::string& name : w.linear_names()) {
    const tl::LinearWeight* a = w.find_linear(name);
    const tl::LinearWeight* b = r.find_linear(name);
    REQUIRE(b != nullptr);
    CHECK_MESSAGE(a->W == b->W, name);
    CHECK_MESSAGE(bool(a->quant) == bool(b->quant), name);
  }
  REQUIRE(r.pre[0].mlp_up.quant);
  CHECK(r.pre[0].mlp_up.quant->group_size == 16);
  CHECK(r.loop[0].attn_qkv.quant->group_size == 32);
  // Same logits from the loaded model.
  std::vector<int32_t> tok = {1, 5, 7, 9, 47, 0};
  CHECK((tl::forward_logits(w, tok.data(), 1, 6) - tl::forward_logits(r, tok.data(), 1, 6)).cwiseAbs().maxCoeff() == 0.f);
}

TEST_CASE("model weights: fp16 storage rounds each value once; tied head is embed^T") {
  tl::ModelConfig c = small_config();
  c.tie_embeddings = true;
  tl::ModelWeights w = tl::random_model_weights(c, 22);
  // A tied model is written without a head entry (the loader derives it from embed).
  for (int64_t v = 0; v < c.vocab; ++v)
    for (int64_t d = 0; d < c.d_model; ++d) w.head.W[size_t(d * c.vocab + v)] = w.embed[size_t(v * c.d_model + d)];
  const std::string path = scratch("fp16") + "/m.tinyloop";
  tl::write_model_tinyloop(w, path, tl::DType::F16);
  CHECK_FALSE(tl::TinyloopReader(path).has_dense("head"));
  const tl::ModelWeights r = tl::load_model_weights(path);
  for (size_t i = 0; i < w.embed.size(); ++i) REQUIRE(r.embed[i] == tl::round_to_half(w.embed[i]));
  for (size_t i = 0; i < w.head.W.size(); ++i) REQUIRE(r.head.W[i] == tl::round_to_half(w.head.W[i]));
}

TEST_CASE("model weights: missing entries and wrong shapes name the file and entry") {
  tl::ModelWeights w = tl::random_model_weights(small_config(), 23);
  const std::string dir = scratch("errors");
  // Wrong shape: a config that disagrees with the stored tensors.
  {
    tl::ModelWeights bad = w;
    bad.config.ffn = 32;  // validate() refuses to write it
    CHECK_THROWS_AS(tl::write_model_tinyloop(bad, dir + "/bad.tinyloop", tl::DType::F32), tl::Error);
  }
  // A file whose blocks say n_pre = 2 while only one pre block is stored.
  tl::TinyloopWriter out(dir + "/short.tinyloop", "test");
  tl::ModelConfig c = w.config;
  c.n_pre = 2;
  out.write_config(c);
  out.write_dense(tl::Tensor::from_float("embed", {c.vocab, c.d_model}, w.embed.data(), tl::DType::F32));
  out.commit();
  try {
    tl::load_model_weights(dir + "/short.tinyloop");
    FAIL("expected an error");
  } catch (const tl::Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("short.tinyloop") != std::string::npos);
    CHECK(msg.find("pre.0.attn_norm") != std::string::npos);
  }
}

#include <fstream>

#include "formats/hf_config.h"
#include "formats/safetensors.h"

TEST_CASE("model weights: an HF Llama folder (GQA) loads as n_loop = 0 with the same logits") {
  tl::ModelConfig c = small_config();
  c.architecture = "llama";
  c.n_pre = 2; c.n_loop = 0; c.loops = 0;
  const tl::ModelWeights w = tl::random_model_weights(c, 24);
  const int64_t D = c.d_model, dh = c.d_head, H = c.n_heads, Hkv = c.n_kv_heads;
  // PyTorch orientation [N, K] of columns [n0, n0 + n) of a [K, N] weight.
  auto torch_slice = [](const tl::LinearWeight& l, int64_t n0, int64_t n, const std::string& name) {
    std::vector<float> t(size_t(n * l.K));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t k = 0; k < l.K; ++k) t[size_t(j * l.K + k)] = l.W[size_t(k * l.N + n0 + j)];
    return tl::Tensor::from_float(name, {n, l.K}, t.data(), tl::DType::F32);
  };
  std::vector<tl::Tensor> ts;
  ts.push_back(tl::Tensor::from_float("model.embed_tokens.weight", {c.vocab, D}, w.embed.data(), tl::DType::F32));
  for (int64_t i = 0; i < c.n_pre; ++i) {
    const tl::BlockWeights& b = w.pre[size_t(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    ts.push_back(tl::Tensor::from_float(p + "input_layernorm.weight", {D}, b.attn_norm.data(), tl::DType::F32));
    ts.push_back(tl::Tensor::from_float(p + "post_attention_layernorm.weight", {D}, b.mlp_norm.data(), tl::DType::F32));
    ts.push_back(torch_slice(b.attn_qkv, 0, H * dh, p + "self_attn.q_proj.weight"));
    ts.push_back(torch_slice(b.attn_qkv, H * dh, Hkv * dh, p + "self_attn.k_proj.weight"));
    ts.push_back(torch_slice(b.attn_qkv, (H + Hkv) * dh, Hkv * dh, p + "self_attn.v_proj.weight"));
    ts.push_back(torch_slice(b.attn_out, 0, D, p + "self_attn.o_proj.weight"));
    ts.push_back(torch_slice(b.mlp_gate, 0, c.ffn, p + "mlp.gate_proj.weight"));
    ts.push_back(torch_slice(b.mlp_up, 0, c.ffn, p + "mlp.up_proj.weight"));
    ts.push_back(torch_slice(b.mlp_down, 0, D, p + "mlp.down_proj.weight"));
  }
  ts.push_back(tl::Tensor::from_float("model.norm.weight", {D}, w.final_norm.data(), tl::DType::F32));
  ts.push_back(torch_slice(w.head, 0, c.vocab, "lm_head.weight"));
  const std::string dir = scratch("hf");
  std::vector<const tl::Tensor*> ptrs;
  for (const auto& t : ts) ptrs.push_back(&t);
  tl::write_safetensors(dir + "/model.safetensors", ptrs);
  {
    nlohmann::json j = tl::model_config_to_hf(c);
    std::ofstream(dir + "/config.json") << j.dump(1);
  }
  const tl::ModelWeights r = tl::load_model_weights(dir);
  CHECK(r.config.n_loop == 0);
  CHECK(r.config.n_kv_heads == Hkv);
  for (const std::string& name : w.linear_names()) CHECK_MESSAGE(r.find_linear(name)->W == w.find_linear(name)->W, name);
  std::vector<int32_t> tok = {3, 1, 4, 1, 5, 9, 2, 6};
  CHECK((tl::forward_logits(w, tok.data(), 1, 8) - tl::forward_logits(r, tok.data(), 1, 8)).cwiseAbs().maxCoeff() == 0.f);
}
