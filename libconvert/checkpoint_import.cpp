#include "libconvert/checkpoint_import.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <regex>

#include "core/error.h"
#include "formats/file_check.h"
#include "core/half.h"
#include "core/parallel.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "libconvert/model_source.h"
#include "libconvert/model_entries.h"

namespace tl {

namespace {

const char* kDefaultSelection = R"(^(pre|loop)\.[0-9]+\.(attn_qkv|attn_out|mlp_gate|mlp_up|mlp_down)$)";

// Same, keeping the dtype (element bytes moved as they are).
void transpose_bytes(const uint8_t* src, size_t es, int64_t rows, int64_t K, uint8_t* dst, int64_t ld, int64_t n0) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < K; ++k) std::memcpy(dst + (k * ld + n0 + r) * int64_t(es), src + (r * K + k) * int64_t(es), es);
  }
}

}  // namespace

const char* checkpoint_kind_name(CheckpointKind k) {
  switch (k) {
    case CheckpointKind::kHfFolder: return "hf-folder";
    case CheckpointKind::kSafetensors: return "safetensors";
    case CheckpointKind::kTinyloop: return "tinyloop";
  }
  return "?";
}

std::string hf_to_tinyloop_name(const std::string& hf, int* part) {
  *part = -1;
  static const std::map<std::string, std::string> top = {
      {"model.embed_tokens.weight", "embed"}, {"model.norm.weight", "final_norm"}, {"lm_head.weight", "head"}};
  if (auto it = top.find(hf); it != top.end()) return it->second;
  // model.layers.<i> are the distinct blocks (all of them for a plain HF Llama);
  // model.loop_layers.<j> are TinyLoop's shared loop blocks (tools/train_tinyloop.py).
  static const std::regex layer(R"(^model\.(layers|loop_layers)\.([0-9]+)\.(.+)\.(weight|bias)$)");
  std::smatch m;
  if (!std::regex_match(hf, m, layer)) return "";
  const std::string pre = (m[1].str() == "layers" ? "pre." : "loop.") + m[2].str() + ".", rest = m[3].str();
  if (m[4].str() == "bias") {  // a linear's bias: "<entry>.bias", q|k|v concatenated like the weight
    static const std::map<std::string, std::pair<std::string, int>> bias = {
        {"self_attn.q_proj", {"attn_qkv", 0}}, {"self_attn.k_proj", {"attn_qkv", 1}},
        {"self_attn.v_proj", {"attn_qkv", 2}}, {"self_attn.o_proj", {"attn_out", -1}},
        {"mlp.gate_proj", {"mlp_gate", -1}},   {"mlp.up_proj", {"mlp_up", -1}},
        {"mlp.down_proj", {"mlp_down", -1}}};
    auto it = bias.find(rest);
    if (it == bias.end()) return "";
    *part = it->second.second;
    return pre + it->second.first + ".bias";
  }
  static const std::map<std::string, std::pair<std::string, int>> block = {
      {"input_layernorm", {"attn_norm", -1}},       {"post_attention_layernorm", {"mlp_norm", -1}},
      {"self_attn.q_proj", {"attn_qkv", 0}},        {"self_attn.k_proj", {"attn_qkv", 1}},
      {"self_attn.v_proj", {"attn_qkv", 2}},        {"self_attn.o_proj", {"attn_out", -1}},
      {"mlp.gate_proj", {"mlp_gate", -1}},          {"mlp.up_proj", {"mlp_up", -1}},
      {"mlp.down_proj", {"mlp_down", -1}},         {"self_attn.q_norm", {"q_norm", -1}},
      {"self_attn.k_norm", {"k_norm", -1}}};
  auto it = block.find(rest);
  if (it == block.end()) return "";
  *part = it->second.second;
  return pre + it->second.first;
}

std::vector<HfSource> tinyloop_to_hf_names(const std::string& name, const ModelConfig& c) {
  if (name == "embed") return {{"model.embed_tokens.weight", 0, c.d_model}};
  if (name == "final_norm") return {{"model.norm.weight", 0, c.d_model}};
  if (name == "head") return {{"lm_head.weight", 0, c.vocab}};
  static const std::regex re(
      R"(^(pre|loop)\.([0-9]+)\.(attn_norm|mlp_norm|q_norm|k_norm|attn_qkv|attn_out|mlp_gate|mlp_up|mlp_down)(\.bias)?$)");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return {};
  const std::string p = std::string(m[1].str() == "pre" ? "model.layers." : "model.loop_layers.") + m[2].str() + ".";
  const std::string what = m[3].str(), suffix = m[4].matched ? ".bias" : ".weight";
  const bool norm = what == "attn_norm" || what == "mlp_norm" || what == "q_norm" || what == "k_norm";
  if (norm && m[4].matched) return {};
  if (what == "attn_norm") return {{p + "input_layernorm.weight", 0, c.d_model}};
  if (what == "mlp_norm") return {{p + "post_attention_layernorm.weight", 0, c.d_model}};
  if (norm) return {{p + "self_attn." + what + ".weight", 0, c.d_head}};
  if (what == "attn_qkv") {
    const int64_t q = c.n_heads * c.d_head, kv = c.n_kv_heads * c.d_head;
    return {{p + "self_attn.q_proj" + suffix, 0, q},
            {p + "self_attn.k_proj" + suffix, q, q + kv},
            {p + "self_attn.v_proj" + suffix, q + kv, q + 2 * kv}};
  }
  if (what == "attn_out") return {{p + "self_attn.o_proj" + suffix, 0, c.d_model}};
  if (what == "mlp_down") return {{p + "mlp.down_proj" + suffix, 0, c.d_model}};
  return {{p + (what == "mlp_gate" ? "mlp.gate_proj" : "mlp.up_proj") + suffix, 0, c.ffn}};
}

bool is_ignorable_hf_tensor(const std::string& hf_name) {
  // Rotary caches some checkpoints still carry (transformers recomputes them from the config).
  static const std::regex re(R"(^model\.(layers|loop_layers)\.[0-9]+\.self_attn\.rotary_emb\.inv_freq$)");
  return std::regex_match(hf_name, re);
}


struct CheckpointImport::Impl {
  std::string path;
  CheckpointKind kind = CheckpointKind::kSafetensors;
  std::optional<ModelConfig> config;
  std::vector<ImportEntry> entries;
  std::unique_ptr<SafetensorsReader> st;
  std::unique_ptr<TinyloopReader> tl;
  std::string tied_head;  // HF lm_head.weight of a tied model (equal to the embedding, not read)

  bool linear_entry(const ImportEntry& e) const {
    return e.kind == ImportEntry::Kind::kLinear || e.kind == ImportEntry::Kind::kDenseLinear;
  }
  void open_hf(const std::regex& sel);
  void check_tied_head(const std::string& head) const;
  void open_safetensors(const std::regex& sel, bool has_only);
  void open_tinyloop(const std::regex& sel);
};

void CheckpointImport::Impl::open_hf(const std::regex& sel) {
  config = read_hf_config(path + "/config.json");
  st = std::make_unique<SafetensorsReader>(path);
  std::map<std::string, size_t> index;  // output name -> entry
  for (const std::string& src : st->names()) {
    const SafetensorsEntry& se = st->entry(src);
    int part = -1;
    std::string name = hf_to_tinyloop_name(src, &part);
    if (name.empty() && is_ignorable_hf_tensor(src)) continue;
    if (name.empty())  // strict consumption: no tensor of a model input is skipped silently
      throw Error("tensor not modelled by tinyloop-tools (no entry of the " + config->architecture +
                      " model maps to it); refused rather than ignored (docs/model.md lists what is modelled)",
                  path, src);
    check_model_entry(*config, name, path);  // before its parts are gathered: the clearer error
    if (name == "head" && config->tie_embeddings) {
      tied_head = src;  // transformers ties it to the embedding: checked equal below, not read
      continue;
    }
    const bool linear = is_tinyloop_linear_name(name);
    const bool fused_bias = part >= 0 && !linear;  // attn_qkv.bias from q/k/v parts
    if (linear && (se.shape.size() != 2 || !dtype_is_float(se.dtype))) {
      throw Error("expected a 2-D float weight [N, K], got " + std::string(dtype_name(se.dtype)) + " " + shape_str(se.shape), path, src);
    }
    auto it = index.find(name);
    if (it == index.end()) {
      ImportEntry e;
      e.name = name;
      e.dtype = se.dtype;
      if (linear) {
        e.kind = std::regex_search(name, sel) ? ImportEntry::Kind::kLinear : ImportEntry::Kind::kDenseLinear;
        e.sources.assign(part >= 0 ? 3 : 1, "");
        e.shape = {se.shape[1], 0};
      } else if (fused_bias) {
        e.sources.assign(3, "");
        e.shape = {0};
      } else {
        e.shape = se.shape;
        e.sources = {src};
      }
      index[name] = entries.size();
      entries.push_back(e);
      it = index.find(name);
    }
    ImportEntry& e = entries[it->second];
    if (fused_bias) {
      if (se.shape.size() != 1 || !dtype_is_float(se.dtype))
        throw Error("expected a 1-D float bias, got " + std::string(dtype_name(se.dtype)) + " " + shape_str(se.shape), path, src);
      std::string& slot = e.sources[size_t(part)];
      if (!slot.empty()) throw Error("duplicate tensor for " + name, path, src);
      slot = src;
      e.shape[0] += se.shape[0];
      continue;
    }
    if (!linear) {
      if (e.sources.front() != src) throw Error("two tensors map to the same name " + name, path, src);
      continue;
    }
    std::string& slot = e.sources[size_t(std::max(part, 0))];
    if (!slot.empty()) throw Error("duplicate tensor for " + name, path, src);
    if (se.shape[1] != e.shape[0]) {
      throw Error("in_features " + std::to_string(se.shape[1]) + " differs from the other parts of " + name +
                      " (" + std::to_string(e.shape[0]) + ")", path, src);
    }
    slot = src;
    e.shape[1] += se.shape[0];
  }
  for (const ImportEntry& e : entries) {
    for (size_t i = 0; i < e.sources.size(); ++i) {
      if (e.sources[i].empty()) {
        throw Error("missing " + std::string(i == 0 ? "q" : i == 1 ? "k" : "v") + "_proj " +
                        (is_tinyloop_linear_name(e.name) ? "weight" : "bias") + " for " + e.name, path);
      }
    }
  }
  if (!tied_head.empty()) check_tied_head(tied_head);
}

// With tie_word_embeddings transformers uses the embedding as the head; a stored lm_head is only
// consistent when it holds the same values (else refused: which one would be meant is unclear).
void CheckpointImport::Impl::check_tied_head(const std::string& head) const {
  const std::string embed = "model.embed_tokens.weight";
  const bool same = st->contains(embed) && st->entry(embed).shape == st->entry(head).shape &&
                    st->entry(embed).dtype == st->entry(head).dtype &&
                    std::memcmp(st->data(embed), st->data(head), size_t(st->entry(head).nbytes)) == 0;
  if (!same)
    throw Error("tie_word_embeddings is true but this head differs from model.embed_tokens.weight; transformers "
                "would use the embedding: fix the config or drop the tensor",
                path, head);
}

void CheckpointImport::Impl::open_safetensors(const std::regex& sel, bool has_only) {
  st = std::make_unique<SafetensorsReader>(path);
  for (const std::string& src : st->names()) {
    const SafetensorsEntry& se = st->entry(src);
    ImportEntry e;
    e.name = src;
    e.dtype = se.dtype;
    e.sources = {src};
    const bool linear = se.shape.size() == 2 && dtype_is_float(se.dtype) && (!has_only || std::regex_search(src, sel));
    if (linear) {
      e.kind = ImportEntry::Kind::kLinear;
      e.shape = {se.shape[1], se.shape[0]};
    } else {
      e.shape = se.shape;
    }
    entries.push_back(e);
  }
}

void CheckpointImport::Impl::open_tinyloop(const std::regex& sel) {
  tl = std::make_unique<TinyloopReader>(path);
  if (tl->has_config()) config = tl->config();
  for (const std::string& name : tl->dense_names()) {
    const EntryInfo info = tl->info(name);
    ImportEntry e;
    e.name = name;
    e.dtype = info.dtype;
    e.shape = info.shape;
    e.sources = {name};
    if (is_tinyloop_linear_name(name) && info.shape.size() == 2 && dtype_is_float(info.dtype)) {
      e.kind = std::regex_search(name, sel) ? ImportEntry::Kind::kLinear : ImportEntry::Kind::kDenseLinear;
    }
    entries.push_back(e);
  }
  for (const std::string& name : tl->quant_names()) {
    tl->check_quant(name);  // copied through unread: it must be a valid weight
    ImportEntry e;
    e.name = name;
    e.kind = ImportEntry::Kind::kQuantized;
    e.shape = tl->info(name).shape;
    e.sources = {name};
    entries.push_back(e);
  }
}

CheckpointImport::CheckpointImport(const std::string& path, const std::string& only) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  std::regex sel;
  try {
    sel = std::regex(only.empty() ? kDefaultSelection : only, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw Error("--only: not a valid regular expression: " + only + " (" + e.what() + ")");
  }
  switch (detect_input(path, "a checkpoint folder, .safetensors or .tinyloop file")) {
    case InputKind::kHfFolder:
      m.kind = CheckpointKind::kHfFolder;
      m.open_hf(sel);
      break;
    case InputKind::kQuantFolder:
      throw Error("a quantized checkpoint folder (GPTQ, AWQ or compressed-tensors): quantize the original model "
                  "(marlin-pack converts this folder to a .tinyloop)",
                  path);
    case InputKind::kSafetensorsFolder:  // a folder of shards without config.json
    case InputKind::kSafetensorsFile:
      m.kind = CheckpointKind::kSafetensors;
      m.open_safetensors(sel, !only.empty());
      break;
    case InputKind::kHdf5:
      m.kind = CheckpointKind::kTinyloop;
      m.open_tinyloop(sel);
      break;
  }
  // Every model entry against the config, before anything is read: a weight that disagrees
  // would make a file that no forward pass (and no tool after this one) can use.
  if (m.config) {
    for (const ImportEntry& e : m.entries) {
      std::vector<int64_t> want;
      try {
        want = expected_entry_shape(*m.config, e.name);
      } catch (const Error& err) {
        throw Error(err.what(), path);
      }
      check_model_entry(*m.config, e.name, path);
      if (!want.empty() && e.shape != want) {
        std::string from;
        for (const std::string& src : e.sources)
          if (src != e.name) from += (from.empty() ? " (from " : ", ") + src;
        throw Error("shape " + shape_str(e.shape) + " disagrees with the config, which gives " + shape_str(want) +
                        (want.size() == 2 ? " ([K, N]: in, out)" : "") + (from.empty() ? "" : from + ")"),
                    path, e.name);
      }
    }
  }
}

CheckpointImport::~CheckpointImport() = default;
CheckpointKind CheckpointImport::kind() const { return impl_->kind; }
const std::string& CheckpointImport::path() const { return impl_->path; }
bool CheckpointImport::has_config() const { return impl_->config.has_value(); }
const ModelConfig& CheckpointImport::config() const {
  if (!impl_->config) throw Error("the input has no model config", impl_->path);
  return *impl_->config;
}
const std::vector<ImportEntry>& CheckpointImport::entries() const { return impl_->entries; }
const TinyloopReader* CheckpointImport::tinyloop() const { return impl_->tl.get(); }

std::vector<float> CheckpointImport::read_linear(const ImportEntry& e) const {
  const Impl& m = *impl_;
  if (!m.linear_entry(e)) throw Error("not a linear weight", m.path, e.name);
  const int64_t K = e.K(), N = e.N();
  std::vector<float> W(size_t(K * N));
  if (m.tl) {
    const Tensor t = m.tl->read_dense(e.name);
    if (t.shape != e.shape) throw Error("expected shape " + shape_str(e.shape) + ", got " + t.shape_str(), m.path, e.name);
    W = t.to_float();
  } else {
    int64_t n0 = 0;
    for (const std::string& src : e.sources) {
      const SafetensorsEntry& se = m.st->entry(src);
      transpose_to_float(m.st->data(src), se.dtype, se.shape[0], se.shape[1], W.data(), N, n0);
      m.st->release(src);
      n0 += se.shape[0];
    }
  }
  const int64_t i = parallel_find_first(int64_t(W.size()), [&](int64_t j) { return !std::isfinite(W[size_t(j)]); });
  if (i >= 0)
    throw Error("weight is not finite at [" + std::to_string(i / N) + ", " + std::to_string(i % N) +
                    "] (K x N orientation): fix or drop it before quantizing", m.path, e.name);
  return W;
}

Tensor CheckpointImport::read_dense(const ImportEntry& e) const {
  const Impl& m = *impl_;
  if (e.kind == ImportEntry::Kind::kLinear || e.kind == ImportEntry::Kind::kQuantized) {
    throw Error("not a dense entry", m.path, e.name);
  }
  if (m.tl) {
    Tensor t = m.tl->read_dense(e.name);
    t.name = e.name;
    return t;
  }
  if (e.kind == ImportEntry::Kind::kDense && e.sources.size() == 1) {
    Tensor t = m.st->read(e.sources.front());
    t.name = e.name;
    return t;
  }
  if (e.kind == ImportEntry::Kind::kDense) {  // q | k | v biases, concatenated
    Tensor t;
    t.name = e.name;
    t.dtype = e.dtype;
    t.shape = e.shape;
    for (const std::string& src : e.sources) {
      const SafetensorsEntry& se = m.st->entry(src);
      if (se.dtype != e.dtype)
        throw Error("dtype " + std::string(dtype_name(se.dtype)) + " differs from the other parts of " + e.name, m.path, src);
      const uint8_t* p = m.st->data(src);
      t.data.insert(t.data.end(), p, p + se.shape[0] * int64_t(dtype_size(se.dtype)));
      m.st->release(src);
    }
    return t;
  }
  // A linear weight left dense: [K, N] in the source dtype (parts must agree on it).
  Tensor t;
  t.name = e.name;
  t.dtype = e.dtype;
  t.shape = e.shape;
  const size_t es = dtype_size(e.dtype);
  t.data.resize(size_t(e.K() * e.N()) * es);
  int64_t n0 = 0;
  for (const std::string& src : e.sources) {
    const SafetensorsEntry& se = m.st->entry(src);
    if (se.dtype != e.dtype) throw Error("dtype " + std::string(dtype_name(se.dtype)) + " differs from the other parts of " + e.name, m.path, src);
    transpose_bytes(m.st->data(src), es, se.shape[0], se.shape[1], t.data.data(), e.N(), n0);
    m.st->release(src);
    n0 += se.shape[0];
  }
  return t;
}

bool CheckpointImport::stores_transposed() const { return !impl_->tl; }

Tensor CheckpointImport::read_stored_linear(const ImportEntry& e) const {
  const Impl& m = *impl_;
  if (!m.linear_entry(e)) throw Error("not a linear weight", m.path, e.name);
  if (m.tl) {
    Tensor t = m.tl->read_dense(e.name);
    if (t.shape != e.shape) throw Error("expected shape " + shape_str(e.shape) + ", got " + t.shape_str(), m.path, e.name);
    t.name = e.name;
    return t;
  }
  Tensor t;
  t.name = e.name;
  t.dtype = m.st->entry(e.sources.front()).dtype;
  t.shape = {e.N(), e.K()};
  t.data.reserve(size_t(e.K() * e.N()) * dtype_size(t.dtype));
  for (const std::string& src : e.sources) {
    const SafetensorsEntry& se = m.st->entry(src);
    if (se.dtype != t.dtype)
      throw Error("dtype " + std::string(dtype_name(se.dtype)) + " differs from the other parts of " + e.name, m.path, src);
    const uint8_t* p = m.st->data(src);
    t.data.insert(t.data.end(), p, p + se.nbytes);
    m.st->release(src);
  }
  return t;
}

}  // namespace tl
