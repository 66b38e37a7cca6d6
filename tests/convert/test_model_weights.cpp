// Loading a model's weights from a .tinyloop: dense entries as stored, quantized entries
// dequantized (W_hat = q * scale + zero, with the QuantWeight kept for the GPU runner), a tied
// head, and the errors a broken file must produce.
#include <doctest/doctest.h>

#include <cstdlib>
#include <random>

#include "formats/error.h"
#include "formats/half.h"
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

// RTN-quantizes one linear weight in place (W becomes W_hat, quant holds the stored form).
void quantize_rtn(tl::LinearWeight& l, int64_t group_size) {
  const tl::MinMaxResult r = tl::rtn_quantize(l.W.data(), l.K, l.N, group_size, tl::ZeroMode::kInt);
  auto q = std::make_shared<tl::QuantWeight>();
  q->name = l.name; q->K = l.K; q->N = l.N; q->group_size = r.group_size;
  q->q = r.q; q->scale = r.scale16; q->zero = r.zero16;
  q->provenance = {{"method", "rtn"}};
  l.W = q->dequantize();
  l.quant = std::move(q);
}

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
