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
#include "formats/file_check.h"
#include "formats/marlin_layout.h"
#include "libconvert/checkpoint_import.h"
#include "libconvert/quant_checkpoint.h"
#include "libconvert/minmax_quantizer.h"

namespace tl {
namespace {

std::vector<float> read_vector(const TinyloopReader& r, const std::string& name,
                               const std::vector<int64_t>& shape) {
  if (!r.has_dense(name)) {
    if (r.has_quant(name)) throw Error("expected a dense tensor, found a quantized weight", r.path(), name);
    throw Error("missing entry; expected a dense float tensor " + shape_str(shape), r.path(), name);
  }
  const Tensor t = r.read_dense(name);
  if (!dtype_is_float(t.dtype)) throw Error(std::string("expected a float tensor, got ") + dtype_name(t.dtype), r.path(), name);
  if (t.shape != shape) throw Error("expected shape " + shape_str(shape) + ", got " + t.shape_str(), r.path(), name);
  t.check_finite(r.path());
  return t.to_float();
}

LinearWeight read_linear(const TinyloopReader& r, const std::string& name, int64_t K, int64_t N,
                         bool with_marlin) {
  LinearWeight lw;
  lw.name = name;
  lw.K = K;
  lw.N = N;
  const std::string want = "[" + std::to_string(K) + ", " + std::to_string(N) + "]";
  if (r.has_quant(name)) {
    auto q = std::make_shared<QuantWeight>(r.read_quant(name, with_marlin));
    if (q->K != K || q->N != N)
      throw Error("expected a quantized weight of shape " + want + " (K = in, N = out), got [" +
                      std::to_string(q->K) + ", " + std::to_string(q->N) + "]", r.path(), name);
    lw.W = q->dequantize();  // read_quant validated it
    lw.quant = std::move(q);
  } else if (r.has_dense(name)) {
    const Tensor t = r.read_dense(name);
    if (!dtype_is_float(t.dtype)) throw Error(std::string("expected a float tensor, got ") + dtype_name(t.dtype), r.path(), name);
    if (t.shape != std::vector<int64_t>{K, N})
      throw Error("expected shape " + want + " (K = in, N = out), got " + t.shape_str(), r.path(), name);
    t.check_finite(r.path());
    lw.W = t.to_float();
  } else {
    throw Error("missing entry; expected a linear weight " + want, r.path(), name);
  }
  return lw;
}

// Where the loader gets entries from: a .tinyloop reader or a checkpoint import (HF folder).
struct Source {
  std::string file;
  std::function<bool(const std::string&)> has;
  std::function<std::vector<float>(const std::string&, const std::vector<int64_t>&)> dense;
  std::function<LinearWeight(const std::string&, int64_t, int64_t)> linear;
  std::function<std::vector<std::string>()> names;  // every entry the input holds
};

// Strict consumption of a model input: every entry it holds is one the model uses.
void check_entries(const Source& src, const ModelConfig& c) {
  for (const std::string& n : src.names()) check_model_entry(c, n, src.file);
}

BlockWeights read_block(const Source& src, const ModelConfig& c, const std::string& prefix) {
  BlockWeights b;
  b.prefix = prefix;
  auto dense = [&](const std::string& name) { return src.dense(name, expected_entry_shape(c, name)); };
  auto linear = [&](const char* n, bool bias) {
    const std::string name = prefix + "." + n;
    const std::vector<int64_t> s = expected_entry_shape(c, name);
    LinearWeight l = src.linear(name, s[0], s[1]);
    if (bias) l.bias = dense(name + ".bias");
    return l;
  };
  b.attn_norm = dense(prefix + ".attn_norm");
  b.mlp_norm = dense(prefix + ".mlp_norm");
  if (c.qk_norm) {
    b.q_norm = dense(prefix + ".q_norm");
    b.k_norm = dense(prefix + ".k_norm");
  }
  b.attn_qkv = linear("attn_qkv", c.qkv_bias);
  b.attn_out = linear("attn_out", c.out_bias);
  b.mlp_gate = linear("mlp_gate", c.mlp_bias);
  b.mlp_up = linear("mlp_up", c.mlp_bias);
  b.mlp_down = linear("mlp_down", c.mlp_bias);
  return b;
}

// The head: stored, or with tied embeddings the embedding transposed ([vocab, D] -> [D, vocab]).
LinearWeight read_head(const Source& src, const ModelConfig& c, const std::vector<float>& embed) {
  const int64_t D = c.d_model;
  if (src.has("head") || !c.tie_embeddings) return src.linear("head", D, c.vocab);
  LinearWeight head;
  head.name = "head";
  head.K = D;
  head.N = c.vocab;
  head.W.resize(size_t(D * c.vocab));
  for (int64_t v = 0; v < c.vocab; ++v)
    for (int64_t d = 0; d < D; ++d) head.W[size_t(d * c.vocab + v)] = embed[size_t(v * D + d)];
  return head;
}

ModelWeights load_from_source(const Source& src, const ModelConfig& config) {
  ModelWeights w;
  w.config = config;
  const ModelConfig& c = w.config;
  c.validate(src.file);
  check_entries(src, c);
  const int64_t D = c.d_model;
  w.embed = src.dense("embed", {c.vocab, D});
  for (int64_t i = 0; i < c.n_pre; ++i) w.pre.push_back(read_block(src, c, block_prefix(false, i)));
  for (int64_t j = 0; j < c.n_loop; ++j) w.loop.push_back(read_block(src, c, block_prefix(true, j)));
  w.final_norm = src.dense("final_norm", {D});
  w.head = read_head(src, c, w.embed);
  w.validate(src.file);
  return w;
}

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

// A Source over an importer of anything gptq-quantize reads (selecting nothing, so every linear
// weight arrives dense as [K, N]); `imp` and `by_name` must outlive it.
Source import_source(const CheckpointImport& imp, const std::map<std::string, const ImportEntry*>& by_name,
                     const std::string& path, bool with_marlin) {
  auto entry = [&by_name, path](const std::string& n) -> const ImportEntry& {
    auto it = by_name.find(n);
    if (it == by_name.end()) throw Error("missing tensor; expected the TinyLoop entry " + n, path, n);
    return *it->second;
  };
  Source src;
  src.file = path;
  src.has = [&by_name](const std::string& n) { return by_name.count(n) > 0; };
  src.names = [&by_name] {
    std::vector<std::string> v;
    for (const auto& kv : by_name) v.push_back(kv.first);
    return v;
  };
  src.dense = [&imp, entry, path](const std::string& n, const std::vector<int64_t>& shape) {
    const Tensor t = imp.read_dense(entry(n));
    if (!dtype_is_float(t.dtype) || t.shape != shape)
      throw Error("expected a float tensor " + shape_str(shape) + ", got " + dtype_name(t.dtype) + " " + t.shape_str(), path, n);
    t.check_finite(path);
    return t.to_float();
  };
  src.linear = [&imp, entry, path, with_marlin](const std::string& n, int64_t K, int64_t N) {
    const ImportEntry& e = entry(n);
    if (e.K() != K || e.N() != N)
      throw Error("expected a linear weight [" + std::to_string(K) + ", " + std::to_string(N) + "], got " +
                      shape_str(e.shape), path, n);
    LinearWeight l;
    l.name = n;
    l.K = K;
    l.N = N;
    if (e.kind == ImportEntry::Kind::kQuantized && imp.tinyloop()) {
      auto q = std::make_shared<QuantWeight>(imp.tinyloop()->read_quant(n, with_marlin));
      l.W = q->dequantize();
      l.quant = std::move(q);
    } else {
      l.W = imp.read_linear(e);
    }
    return l;
  };
  return src;
}

// A Source over a quantized checkpoint folder (GPTQ, AWQ, compressed-tensors) read as a model (`ck` must outlive it): its HF names
// mapped to TinyLoop's (checkpoint_import.h), q | k | v joined along N (same K and group size:
// groups run along K); with_marlin: each quantized weight that passes the Marlin gate packed on
// the way in (the folder has no Marlin sections; the GPU's Marlin path runs on them).
Source checkpoint_source(const QuantCheckpoint& ck, bool with_marlin) {
  const ModelConfig c = ck.model_config();
  const std::vector<std::string> qn = ck.quant_names();
  auto quant = std::make_shared<std::set<std::string>>(qn.begin(), qn.end());
  auto names = std::make_shared<std::vector<std::string>>();
  {
    std::set<std::string> s;
    auto add = [&](const std::string& hf) {
      int part = -1;
      const std::string t = hf_to_tinyloop_name(hf, &part);
      if (t.empty()) throw Error("not a tensor of a Llama-family model", ck.dir(), hf);
      s.insert(t);
    };
    for (const std::string& q : qn) add(q + ".weight");
    for (const std::string& d : ck.dense_names())
      if (!is_ignorable_hf_tensor(d)) add(d);
    names->assign(s.begin(), s.end());
  }
  const std::string path = ck.dir();
  Source src;
  src.file = path;
  src.has = [names](const std::string& n) { return std::binary_search(names->begin(), names->end(), n); };
  src.names = [names] { return *names; };
  // Columns [n0, n1) of each part into one [rows, width] float matrix.
  auto joined = [path](const std::string& n, const std::vector<HfSource>& parts, int64_t rows, int64_t width,
                       const std::function<Tensor(const HfSource&)>& read) {
    std::vector<float> out(size_t(rows * width));
    for (const HfSource& p : parts) {
      const Tensor t = read(p);
      const int64_t w = p.n1 - p.n0;
      if (!dtype_is_float(t.dtype) || t.numel() != rows * w)
        throw Error("expected a float tensor of " + std::to_string(rows * w) + " values, got " + dtype_name(t.dtype) +
                        " " + t.shape_str(), path, p.hf);
      t.check_finite(path);
      const std::vector<float> v = t.to_float();
      for (int64_t r = 0; r < rows; ++r)
        std::copy(v.begin() + r * w, v.begin() + (r + 1) * w, out.begin() + r * width + p.n0);
    }
    (void)n;
    return out;
  };
  src.dense = [&ck, c, joined](const std::string& n, const std::vector<int64_t>& shape) {
    const std::vector<HfSource> parts = tinyloop_to_hf_names(n, c);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const int64_t width = shape.empty() ? 1 : shape.back();
    return joined(n, parts, numel / width, width, [&ck](const HfSource& p) { return ck.read_dense(p.hf); });
  };
  src.linear = [&ck, c, quant, joined, path, with_marlin](const std::string& n, int64_t K, int64_t N) {
    const std::vector<HfSource> parts = tinyloop_to_hf_names(n, c);
    size_t quantized = 0;
    for (const HfSource& p : parts) quantized += quant->count(p.hf.substr(0, p.hf.size() - 7));
    LinearWeight l;
    l.name = n;
    l.K = K;
    l.N = N;
    if (quantized == 0) {  // dense ([K, n] per part: read_dense transposes PyTorch's [n, K])
      l.W = joined(n, parts, K, N, [&ck](const HfSource& p) { return ck.read_dense(p.hf); });
      return l;
    }
    if (quantized != parts.size()) throw Error("q, k and v are not all quantized: one TinyLoop weight needs all three", path, n);
    auto w = std::make_shared<QuantWeight>();
    w->name = n;
    w->K = K;
    w->N = N;
    for (const HfSource& p : parts) {
      const QuantWeight part = ck.read_quant(p.hf.substr(0, p.hf.size() - 7));
      if (part.K != K || part.N != p.n1 - p.n0)
        throw Error("expected [" + std::to_string(K) + ", " + std::to_string(p.n1 - p.n0) + "], got [" + std::to_string(part.K) +
                        ", " + std::to_string(part.N) + "]", path, part.name);
      if (w->q.empty()) {
        w->group_size = part.group_size;
        w->bits = part.bits;
        w->q.resize(size_t(K * N));
        w->scale.resize(size_t(w->groups() * N));
        w->zero.resize(w->scale.size());
      } else if (part.group_size != w->group_size) {
        throw Error("group size " + std::to_string(part.group_size) + " where q_proj has " + std::to_string(w->group_size) +
                        ": one TinyLoop weight has one group size", path, part.name);
      }
      const int64_t pn = part.N;
      for (int64_t k = 0; k < K; ++k)
        std::copy(part.q.begin() + k * pn, part.q.begin() + (k + 1) * pn, w->q.begin() + k * N + p.n0);
      for (int64_t g = 0; g < w->groups(); ++g) {
        std::copy(part.scale.begin() + g * pn, part.scale.begin() + (g + 1) * pn, w->scale.begin() + g * N + p.n0);
        std::copy(part.zero.begin() + g * pn, part.zero.begin() + (g + 1) * pn, w->zero.begin() + g * N + p.n0);
      }
    }
    w->validate(path);
    if (with_marlin && marlin_gate(K, N, w->group_size).ok) w->marlin = marlin_pack(*w, path);
    l.W = w->dequantize();
    l.quant = std::move(w);
    return l;
  };
  return src;
}

// A Source over an open .tinyloop (`r` must outlive it).
Source reader_source(const TinyloopReader& r, bool with_marlin) {
  Source src;
  src.file = r.path();
  src.has = [&r](const std::string& n) { return r.has_dense(n) || r.has_quant(n); };
  src.names = [&r] {
    std::vector<std::string> v = r.dense_names();
    for (const std::string& n : r.quant_names()) v.push_back(n);
    return v;
  };
  src.dense = [&r](const std::string& n, const std::vector<int64_t>& shape) { return read_vector(r, n, shape); };
  src.linear = [&r, with_marlin](const std::string& n, int64_t K, int64_t N) { return read_linear(r, n, K, N, with_marlin); };
  return src;
}

}  // namespace

std::string block_prefix(bool loop, int64_t index) {
  return std::string(loop ? "loop." : "pre.") + std::to_string(index);
}

int64_t block_window(const ModelConfig& c, const std::string& prefix) {
  if (c.sliding_window <= 0 || prefix.rfind("pre.", 0) != 0) return 0;
  return c.window_of_block(false, std::stoll(prefix.substr(4)));
}

std::vector<int64_t> expected_entry_shape(const ModelConfig& c, const std::string& name) {
  const int64_t D = c.d_model, F = c.ffn, V = c.vocab;
  const int64_t qkv = (c.n_heads + 2 * c.n_kv_heads) * c.d_head, att = c.n_heads * c.d_head;
  if (name == "embed") return {V, D};
  if (name == "final_norm") return {D};
  if (name == "head") return {D, V};
  const bool loop = name.rfind("loop.", 0) == 0;
  if (!loop && name.rfind("pre.", 0) != 0) return {};
  const size_t dot = name.find('.', loop ? 5 : 4);
  const std::string index = name.substr(loop ? 5 : 4, dot == std::string::npos ? std::string::npos : dot - (loop ? 5 : 4));
  if (dot == std::string::npos || index.empty() || index.size() > 9 || index.find_first_not_of("0123456789") != std::string::npos)
    return {};
  const std::string part = name.substr(dot + 1);
  static const std::map<std::string, int> kParts = {
      {"attn_norm", 0}, {"mlp_norm", 0},      {"attn_qkv", 1},      {"attn_out", 2},       {"mlp_gate", 3},
      {"mlp_up", 3},    {"mlp_down", 4},      {"attn_qkv.bias", 5}, {"attn_out.bias", 6},  {"mlp_gate.bias", 7},
      {"mlp_up.bias", 7}, {"mlp_down.bias", 6}, {"q_norm", 8},      {"k_norm", 8}};
  const auto it = kParts.find(part);
  if (it == kParts.end()) return {};
  const int64_t i = std::stoll(index), blocks = loop ? c.n_loop : c.n_pre;
  if (i >= blocks)
    throw Error("block " + name.substr(0, dot) + " is not in the model: the config has " +
                    (loop ? "n_loop = " : "n_pre = ") + std::to_string(blocks), "", name);
  switch (it->second) {
    case 0: return {D};
    case 1: return {D, qkv};
    case 2: return {att, D};
    case 3: return {D, F};
    case 4: return {F, D};
    case 5: return {qkv};
    case 6: return {D};
    case 7: return {F};
    default: return {c.d_head};
  }
}

void check_model_entry(const ModelConfig& c, const std::string& name, const std::string& file) {
  std::vector<int64_t> shape;
  try {
    shape = expected_entry_shape(c, name);
  } catch (const Error& e) {
    throw Error(e.what(), file);
  }
  const std::string model = "the " + c.architecture + " model the tools build";
  if (shape.empty())
    throw Error("not an entry of " + model + " (docs/model.md lists what is modelled); refused rather than ignored",
                file, name);
  auto ends = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  const char* off = nullptr;
  if (ends(".attn_qkv.bias") && !c.qkv_bias) off = "q/k/v biases (qkv_bias; HF: attention_bias)";
  if (ends(".attn_out.bias") && !c.out_bias) off = "an output-projection bias (out_bias; HF: attention_bias)";
  if ((ends(".mlp_gate.bias") || ends(".mlp_up.bias") || ends(".mlp_down.bias")) && !c.mlp_bias)
    off = "MLP biases (mlp_bias)";
  if ((ends(".q_norm") || ends(".k_norm")) && !c.qk_norm) off = "per-head q/k norms (qk_norm)";
  if (off)
    throw Error(std::string("the config does not enable ") + off + ", so " + model +
                    " would not use this entry; refused rather than ignored",
                file, name);
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

ModelWeights load_model_weights(const TinyloopReader& r, bool with_marlin) {
  if (!r.has_config()) throw Error("missing /config; expected the model's hyper-parameters", r.path(), "config");
  return load_from_source(reader_source(r, with_marlin), r.config());
}

ModelWeights load_model_weights_any(const std::string& path, bool with_marlin) {
  if (is_hdf5_file(path)) return load_model_weights(path, with_marlin);
  if (is_directory(path) && is_quant_checkpoint(path)) {
    const QuantCheckpoint ck(path);
    if (!ck.has_model_config()) throw Error("expected a model config (config.json of a Llama-family model)", path, "config");
    return load_from_source(checkpoint_source(ck, with_marlin), ck.model_config());
  }
  CheckpointImport imp(path, "^$");
  if (!imp.has_config()) throw Error("expected a model config (config.json beside the weights)", path, "config");
  std::map<std::string, const ImportEntry*> by_name;
  for (const ImportEntry& e : imp.entries()) by_name[e.name] = &e;
  return load_from_source(import_source(imp, by_name, path, with_marlin), imp.config());
}

struct ModelStream::Impl {
  std::unique_ptr<TinyloopReader> reader;
  std::unique_ptr<CheckpointImport> imp;
  std::map<std::string, const ImportEntry*> by_name;
  Source src;
  ModelConfig config;
};

ModelStream::ModelStream(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (is_hdf5_file(path)) {
    m.reader = std::make_unique<TinyloopReader>(path);
    if (!m.reader->has_config()) throw Error("missing /config; expected the model's hyper-parameters", path, "config");
    m.config = m.reader->config();
    m.src = reader_source(*m.reader, false);
  } else {
    m.imp = std::make_unique<CheckpointImport>(path, "^$");
    if (!m.imp->has_config()) throw Error("expected a model config (config.json beside the weights)", path, "config");
    for (const ImportEntry& e : m.imp->entries()) m.by_name[e.name] = &e;
    m.config = m.imp->config();
    m.src = import_source(*m.imp, m.by_name, path, false);
  }
  m.config.validate(path);
  check_entries(m.src, m.config);
}

ModelStream::~ModelStream() = default;

const ModelConfig& ModelStream::config() const { return impl_->config; }
bool ModelStream::hdf5() const { return bool(impl_->reader); }

std::vector<float> ModelStream::embed() const {
  return impl_->src.dense("embed", {impl_->config.vocab, impl_->config.d_model});
}

BlockWeights ModelStream::block(bool loop, int64_t index) const {
  return read_block(impl_->src, impl_->config, block_prefix(loop, index));  // the sources check every shape
}

std::vector<float> ModelStream::final_norm() const { return impl_->src.dense("final_norm", {impl_->config.d_model}); }

LinearWeight ModelStream::head() const {
  const bool derived = !impl_->src.has("head") && impl_->config.tie_embeddings;
  return read_head(impl_->src, impl_->config, derived ? embed() : std::vector<float>());
}

ModelWeights load_model_weights(const std::string& path, bool with_marlin) {
  TinyloopReader r(path);
  return load_model_weights(r, with_marlin);
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
