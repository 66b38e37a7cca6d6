#include "libconvert/model_weights.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "core/error.h"
#include "core/group_size.h"
#include "libconvert/minmax_quantizer.h"

namespace tl {
namespace {

void check_size(const std::vector<float>& v, int64_t n, const std::string& file, const std::string& name) {
  if (int64_t(v.size()) != n)
    throw Error("expected " + std::to_string(n) + " values, got " + std::to_string(v.size()), file, name);
}

void check_linear(const LinearWeight& l, int64_t K, int64_t N, bool bias, const std::string& file) {
  if (l.K != K || l.N != N)
    throw Error("expected shape [" + std::to_string(K) + ", " + std::to_string(N) + "], got [" +
                    std::to_string(l.K) + ", " + std::to_string(l.N) + "]", file, l.name);
  check_size(l.W, K * N, file, l.name);
  check_size(l.bias, bias ? N : 0, file, l.name + ".bias");
}

}  // namespace

LinearWeight to_linear_weight(const StoredLinear& s) {
  LinearWeight l;
  l.name = s.name;
  l.K = s.K;
  l.N = s.N;
  l.W = s.to_float();
  l.quant = s.quant;
  l.bias = s.bias;
  return l;
}

BlockWeights to_block_weights(const StoredBlock& s) {
  BlockWeights b;
  b.prefix = s.prefix;
  b.attn_norm = s.attn_norm;
  b.mlp_norm = s.mlp_norm;
  b.q_norm = s.q_norm;
  b.k_norm = s.k_norm;
  for (int i = 0; i < kBlockLinears; ++i) *b.linear(kBlockLinearNames[i]) = to_linear_weight(s.lin[i]);
  return b;
}

ModelWeights load_model_weights(const ModelSource& src) {
  ModelWeights w;
  w.config = src.config();
  const ModelConfig& c = w.config;
  w.embed = src.read_embedding().to_float();
  for (int64_t i = 0; i < c.n_pre; ++i) w.pre.push_back(to_block_weights(src.read_block(block_prefix(false, i))));
  for (int64_t j = 0; j < c.n_loop; ++j) w.loop.push_back(to_block_weights(src.read_block(block_prefix(true, j))));
  w.final_norm = src.read_vector("final_norm");
  w.head = to_linear_weight(src.read_head());
  w.validate(src.path());
  return w;
}

ModelWeights load_model_weights(const std::string& path, bool with_marlin) {
  const ModelSource src(path, with_marlin);
  return load_model_weights(src);
}

LinearWeight* BlockWeights::linear(const std::string& s) {
  if (s == "attn_qkv") return &attn_qkv;
  if (s == "attn_out") return &attn_out;
  if (s == "mlp_gate") return &mlp_gate;
  if (s == "mlp_up") return &mlp_up;
  if (s == "mlp_down") return &mlp_down;
  return nullptr;
}

const LinearWeight* BlockWeights::linear(const std::string& s) const {
  return const_cast<BlockWeights*>(this)->linear(s);
}

LinearWeight* ModelWeights::find_linear(const std::string& name) {
  if (name == "head") return &head;
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return nullptr;
  const std::string prefix = name.substr(0, dot);
  for (auto* blocks : {&pre, &loop})
    for (BlockWeights& b : *blocks)
      if (b.prefix == prefix) return b.linear(name.substr(dot + 1));
  return nullptr;
}

const LinearWeight* ModelWeights::find_linear(const std::string& name) const {
  return const_cast<ModelWeights*>(this)->find_linear(name);
}

std::vector<std::string> ModelWeights::linear_names() const {
  std::vector<std::string> out;
  for (const auto* blocks : {&pre, &loop})
    for (const BlockWeights& b : *blocks)
      for (const char* s : kBlockLinearNames) out.push_back(b.prefix + "." + s);
  out.push_back("head");
  return out;
}

void ModelWeights::validate(const std::string& file) const {
  const ModelConfig& c = config;
  c.validate(file);
  const int64_t D = c.d_model, dh = c.d_head, H = c.n_heads, Hkv = c.n_kv_heads;
  check_size(embed, c.vocab * D, file, "embed");
  check_size(final_norm, D, file, "final_norm");
  if (int64_t(pre.size()) != c.n_pre || int64_t(loop.size()) != c.n_loop)
    throw Error("expected n_pre = " + std::to_string(c.n_pre) + " and n_loop = " + std::to_string(c.n_loop) +
                    " blocks, got " + std::to_string(pre.size()) + " and " + std::to_string(loop.size()), file, "blocks");
  for (const auto* blocks : {&pre, &loop})
    for (const BlockWeights& b : *blocks) {
      check_size(b.attn_norm, D, file, b.prefix + ".attn_norm");
      check_size(b.mlp_norm, D, file, b.prefix + ".mlp_norm");
      check_size(b.q_norm, c.qk_norm ? dh : 0, file, b.prefix + ".q_norm");
      check_size(b.k_norm, c.qk_norm ? dh : 0, file, b.prefix + ".k_norm");
      check_linear(b.attn_qkv, D, (H + 2 * Hkv) * dh, c.qkv_bias, file);
      check_linear(b.attn_out, H * dh, D, c.out_bias, file);
      check_linear(b.mlp_gate, D, c.ffn, c.mlp_bias, file);
      check_linear(b.mlp_up, D, c.ffn, c.mlp_bias, file);
      check_linear(b.mlp_down, c.ffn, D, c.mlp_bias, file);
    }
  check_linear(head, D, c.vocab, false, file);
}

void rtn_quantize_linear(LinearWeight& l, int64_t group_size, ZeroMode mode) {
  const MinMaxResult r = rtn_quantize(l.W.data(), l.K, l.N, group_size, mode);
  auto q = std::make_shared<QuantWeight>();
  q->name = l.name;
  q->K = l.K;
  q->N = l.N;
  q->group_size = r.group_size;
  q->q = r.q;
  q->scale = r.scale16;
  q->zero = r.zero16;
  q->provenance = {{"method", "rtn"}};
  l.W = q->dequantize();
  l.quant = std::move(q);
}

ModelWeights random_model_weights(const ModelConfig& c, uint64_t seed) {
  c.validate("random model");
  std::mt19937_64 rng(seed);
  auto normal = [&](std::vector<float>& v, int64_t n, double mean, double sd) {
    std::normal_distribution<double> dist(mean, sd);
    v.resize(size_t(n));
    for (float& x : v) x = float(dist(rng));
  };
  auto linear = [&](const std::string& name, int64_t K, int64_t N, bool bias = false) {
    LinearWeight l;
    l.name = name;
    l.K = K;
    l.N = N;
    normal(l.W, K * N, 0.0, 1.0 / std::sqrt(double(K)));
    if (bias) normal(l.bias, N, 0.0, 0.5);
    return l;
  };
  const int64_t D = c.d_model, dh = c.d_head, H = c.n_heads, Hkv = c.n_kv_heads;
  ModelWeights w;
  w.config = c;
  normal(w.embed, c.vocab * D, 0.0, 1.0);
  for (int pass = 0; pass < 2; ++pass) {
    const bool is_loop = pass == 1;
    for (int64_t i = 0; i < (is_loop ? c.n_loop : c.n_pre); ++i) {
      BlockWeights b;
      b.prefix = block_prefix(is_loop, i);
      normal(b.attn_norm, D, 1.0, 0.1);
      normal(b.mlp_norm, D, 1.0, 0.1);
      b.attn_qkv = linear(b.prefix + ".attn_qkv", D, (H + 2 * Hkv) * dh, c.qkv_bias);
      b.attn_out = linear(b.prefix + ".attn_out", H * dh, D, c.out_bias);
      b.mlp_gate = linear(b.prefix + ".mlp_gate", D, c.ffn, c.mlp_bias);
      b.mlp_up = linear(b.prefix + ".mlp_up", D, c.ffn, c.mlp_bias);
      b.mlp_down = linear(b.prefix + ".mlp_down", c.ffn, D, c.mlp_bias);
      if (c.qk_norm) {
        normal(b.q_norm, dh, 1.0, 0.2);
        normal(b.k_norm, dh, 1.0, 0.2);
      }
      (is_loop ? w.loop : w.pre).push_back(std::move(b));
    }
  }
  normal(w.final_norm, D, 1.0, 0.1);
  w.head = linear("head", D, c.vocab);
  return w;
}

void write_model_tinyloop(const ModelWeights& w, const std::string& path, DType dtype,
                          const std::string& producer) {
  w.validate(path);
  const int64_t D = w.config.d_model;
  TinyloopWriter out(path, producer);
  out.write_config(w.config);
  auto dense = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    out.write_dense(Tensor::from_float(name, std::move(shape), v.data(), dtype));
  };
  auto linear = [&](const LinearWeight& l) {
    if (l.quant) out.write_quant(*l.quant);
    else dense(l.name, {l.K, l.N}, l.W);
    if (!l.bias.empty()) dense(l.name + ".bias", {l.N}, l.bias);
  };
  dense("embed", {w.config.vocab, D}, w.embed);
  for (const auto* blocks : {&w.pre, &w.loop})
    for (const BlockWeights& b : *blocks) {
      dense(b.prefix + ".attn_norm", {D}, b.attn_norm);
      dense(b.prefix + ".mlp_norm", {D}, b.mlp_norm);
      if (!b.q_norm.empty()) dense(b.prefix + ".q_norm", {w.config.d_head}, b.q_norm);
      if (!b.k_norm.empty()) dense(b.prefix + ".k_norm", {w.config.d_head}, b.k_norm);
      for (const char* s : kBlockLinearNames) linear(*b.linear(s));
    }
  dense("final_norm", {D}, w.final_norm);
  // A tied head that really is embed^T is left out (the loader derives it); anything else is kept.
  bool tied = w.config.tie_embeddings && !w.head.quant;
  for (int64_t v = 0; tied && v < w.config.vocab; ++v)
    for (int64_t d = 0; tied && d < D; ++d)
      tied = w.head.W[size_t(d * w.config.vocab + v)] == w.embed[size_t(v * D + d)];
  if (!tied) linear(w.head);
  out.commit();
}

}  // namespace tl
