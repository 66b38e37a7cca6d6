#include "libconvert/model_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"
#include "formats/file_check.h"
#include "formats/marlin_layout.h"
#include "libconvert/checkpoint_import.h"
#include "libconvert/quant_checkpoint.h"

namespace tl {

InputKind detect_input(const std::string& path, const std::string& what) {
  if (is_directory(path)) {
    if (is_quant_checkpoint(path)) return InputKind::kQuantFolder;
    const std::string cfg = path + "/config.json";
    if (path_exists(cfg) && !is_regular_file(cfg))
      require_regular_file(cfg, "the checkpoint's config.json (a JSON file)");
    return is_regular_file(cfg) ? InputKind::kHfFolder : InputKind::kSafetensorsFolder;
  }
  require_regular_file(path, what);  // never opens a FIFO or a device
  return is_hdf5_file(path) ? InputKind::kHdf5 : InputKind::kSafetensorsFile;
}

const char* model_kind_name(ModelKind k) {
  switch (k) {
    case ModelKind::kTinyloop: return "tinyloop";
    case ModelKind::kHfFolder: return "hf-folder";
    case ModelKind::kQuantFolder: return "quantized-folder";
  }
  return "?";
}

std::vector<float> StoredLinear::to_float() const {
  if (quant) return quant->dequantize();
  if (!transposed) return dense.to_float();
  std::vector<float> W(size_t(K * N));
  transpose_to_float(dense.data.data(), dense.dtype, N, K, W.data(), N, 0);
  return W;
}

std::vector<float> embedding_rows(const Tensor& embed, const int32_t* tokens, int64_t rows) {
  const int64_t V = embed.shape.at(0), D = embed.shape.at(1);
  for (int64_t r = 0; r < rows; ++r)
    if (tokens[r] < 0 || tokens[r] >= V)
      throw Error("token id " + std::to_string(tokens[r]) + " outside [0, " + std::to_string(V) + ")", "",
                  "token " + std::to_string(r));
  std::vector<float> x(size_t(rows * D));
  parallel_chunks(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t d = 0; d < D; ++d) x[size_t(r * D + d)] = embed.float_at(int64_t(tokens[r]) * D + d);
  });
  return x;
}

namespace {

std::string kn(int64_t K, int64_t N) { return "[" + std::to_string(K) + ", " + std::to_string(N) + "]"; }

// A dense float entry of `shape`, checked (the messages every loader has always given).
void check_dense(const Tensor& t, const std::vector<int64_t>& shape, const std::string& file, const std::string& name) {
  if (!dtype_is_float(t.dtype)) throw Error(std::string("expected a float tensor, got ") + dtype_name(t.dtype), file, name);
  if (t.shape != shape) throw Error("expected shape " + shape_str(shape) + ", got " + t.shape_str(), file, name);
  t.check_finite(file);
}

// A weight stored [N, K] (PyTorch) checked finite; the first non-finite value in [K, N] order is
// named, as the float32 import always named it.
void check_transposed_finite(const Tensor& t, int64_t K, int64_t N, const std::string& file, const std::string& name) {
  const int64_t n = K * N;
  auto bad = [&](int64_t i) { return t.nonfinite_at(i); };
  if (parallel_find_first(n, bad) < 0) return;
  int64_t first = n;  // the error path: the smallest k * N + n over every non-finite value
  for (int64_t i = 0; i < n; ++i)
    if (bad(i)) first = std::min(first, (i % K) * N + i / K);
  throw Error("weight is not finite at [" + std::to_string(first / N) + ", " + std::to_string(first % N) +
                  "] (K x N orientation): fix or drop it before quantizing",
              file, name);
}

// Columns [n0, n1) of each part ([rows, n1 - n0], one dtype) into one [rows, width] tensor.
Tensor join_columns(const std::string& name, const std::vector<std::pair<Tensor, std::pair<int64_t, int64_t>>>& parts,
                    int64_t rows, int64_t width, const std::string& file) {
  Tensor out;
  out.name = name;
  out.dtype = parts.front().first.dtype;
  out.shape = {rows, width};
  const size_t es = dtype_size(out.dtype);
  out.data.resize(size_t(rows * width) * es);
  for (const auto& [t, cols] : parts) {
    const int64_t w = cols.second - cols.first;
    if (t.dtype != out.dtype)
      throw Error("dtype " + std::string(dtype_name(t.dtype)) + " differs from the other parts of " + name, file, t.name);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out.data.data() + size_t(r * width + cols.first) * es, t.data.data() + size_t(r * w) * es, size_t(w) * es);
  }
  return out;
}

}  // namespace

struct ModelSource::Impl {
  std::string path;
  ModelKind kind = ModelKind::kTinyloop;
  bool with_marlin = true;
  ModelConfig config;
  std::vector<SourceEntry> entries;
  std::map<std::string, size_t> by_name;
  // One of these is open.
  std::shared_ptr<const TinyloopReader> reader;
  std::unique_ptr<CheckpointImport> imp_owned;  // opened here, or
  const CheckpointImport* imp = nullptr;        // the caller's (ModelSource(const CheckpointImport&))
  std::map<std::string, const ImportEntry*> imp_entry;
  std::unique_ptr<QuantCheckpoint> ck;
  std::set<std::string> ck_quant;  // quantized layer prefixes of a quantized folder

  bool has(const std::string& n) const { return by_name.count(n) > 0; }

  void add_entry(SourceEntry e) { entries.push_back(std::move(e)); }
  void index_entries() {
    std::sort(entries.begin(), entries.end(), [](const SourceEntry& a, const SourceEntry& b) { return a.name < b.name; });
    for (size_t i = 0; i < entries.size(); ++i) by_name[entries[i].name] = i;
  }

  void open_tinyloop();
  void open_import();
  void open_quant_folder();
  void check_model() const;
  void check_complete() const;

  Tensor dense(const std::string& name, const std::vector<int64_t>& shape) const;
  Tensor joined_dense(const std::string& name, int64_t rows, int64_t width) const;
  StoredLinear linear(const std::string& name, int64_t K, int64_t N) const;
  StoredLinear quant_folder_linear(const std::string& name, int64_t K, int64_t N) const;
};

void ModelSource::Impl::open_tinyloop() {
  kind = ModelKind::kTinyloop;
  if (!reader) reader = std::make_shared<const TinyloopReader>(path);
  if (!reader->has_config()) throw Error("missing /config; expected the model's hyper-parameters", path, "config");
  config = reader->config();
  for (const std::string& n : reader->dense_names()) {
    const EntryInfo info = reader->info(n);
    add_entry({n, false, info.dtype, info.shape});
  }
  for (const std::string& n : reader->quant_names()) {
    const EntryInfo info = reader->info(n);
    add_entry({n, true, DType::F16, info.shape, info.group_size, info.has_marlin ? info.marlin_n : 0});
  }
}

void ModelSource::Impl::open_import() {
  kind = ModelKind::kHfFolder;
  if (!imp) {
    imp_owned = std::make_unique<CheckpointImport>(path, "^$");  // nothing selected: every linear dense
    imp = imp_owned.get();
  }
  if (!imp->has_config()) throw Error("expected a model config (config.json beside the weights)", path, "config");
  config = imp->config();
  for (const ImportEntry& e : imp->entries()) {
    imp_entry[e.name] = &e;
    add_entry({e.name, false, e.dtype, e.shape});
  }
}

void ModelSource::Impl::open_quant_folder() {
  kind = ModelKind::kQuantFolder;
  ck = std::make_unique<QuantCheckpoint>(path);
  if (!ck->has_model_config()) throw Error("expected a model config (config.json of a Llama-family model)", path, "config");
  config = ck->model_config();
  const std::vector<std::string> qn = ck->quant_names();
  ck_quant.insert(qn.begin(), qn.end());
  std::map<std::string, bool> names;  // TinyLoop name -> quantized
  auto add = [&](const std::string& hf, bool quantized) {
    int part = -1;
    const std::string t = hf_to_tinyloop_name(hf, &part);
    if (t.empty()) throw Error("not a tensor of a Llama-family model", path, hf);
    names[t] = names[t] || quantized;
  };
  for (const std::string& q : qn) add(q + ".weight", true);
  for (const std::string& d : ck->dense_names())
    if (!is_ignorable_hf_tensor(d)) add(d, false);
  for (const auto& [n, quantized] : names) {
    std::vector<int64_t> shape;
    try {
      shape = expected_entry_shape(config, n);
    } catch (const Error&) {
    }
    SourceEntry e{n, quantized, quantized ? DType::F16 : DType::F32, shape};
    if (quantized && shape.size() == 2) {  // the folder's one group size; packed on the way in where the gate passes
      const int64_t gs = ck->config().group_size;
      e.group_size = gs <= 0 || gs > shape[0] ? shape[0] : gs;
      if (marlin_gate(shape[0], shape[1], e.group_size).ok) e.marlin_n = marlin_padded_n(shape[1]);
    }
    add_entry(e);
  }
}

// What every loader checked before reading: the config, strict consumption, and that the
// entries the model needs are there.
void ModelSource::Impl::check_model() const {
  config.validate(path);
  for (const SourceEntry& e : entries) check_model_entry(config, e.name, path);
}

// Every entry the config's model runs on is there, with its shape, before anything is read: an
// input that would fail at its last block fails here (the messages the reads give).
void ModelSource::Impl::check_complete() const {
  const ModelConfig& c = config;
  auto need = [&](const std::string& name, bool linear) {
    const std::vector<int64_t> shape = expected_entry_shape(c, name);
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      if (!reader) throw Error("missing tensor; expected the TinyLoop entry " + name, path, name);
      throw Error(linear ? "missing entry; expected a linear weight " + kn(shape[0], shape[1])
                         : "missing entry; expected a dense float tensor " + shape_str(shape),
                  path, name);
    }
    const SourceEntry& e = entries[it->second];
    if (!reader || e.shape.empty()) return;  // the imports checked shapes when they opened
    if (e.quantized && !linear) throw Error("expected a dense tensor, found a quantized weight", path, name);
    if (!e.quantized && !dtype_is_float(e.dtype))
      throw Error(std::string("expected a float tensor, got ") + dtype_name(e.dtype), path, name);
    if (e.shape == shape) return;
    if (!linear) throw Error("expected shape " + shape_str(shape) + ", got " + shape_str(e.shape), path, name);
    throw Error(std::string(e.quantized ? "expected a quantized weight of shape " : "expected shape ") +
                    kn(shape[0], shape[1]) + " (K = in, N = out), got " + (e.quantized ? kn(e.shape.at(0), e.shape.at(1)) : shape_str(e.shape)),
                path, name);
  };
  need("embed", false);
  for (int loop = 0; loop < 2; ++loop)
    for (int64_t i = 0; i < (loop ? c.n_loop : c.n_pre); ++i) {
      const std::string p = block_prefix(loop == 1, i);
      need(p + ".attn_norm", false);
      need(p + ".mlp_norm", false);
      for (const char* s : kBlockLinearNames) need(p + "." + s, true);
      for (const OptionalEntry& o : optional_entries())
        if (c.*o.flag) need(p + o.suffix, false);
    }
  need("final_norm", false);
  if (has("head") || !c.tie_embeddings) need("head", true);
}

Tensor ModelSource::Impl::dense(const std::string& name, const std::vector<int64_t>& shape) const {
  if (reader) {
    if (!reader->has_dense(name)) {
      if (reader->has_quant(name)) throw Error("expected a dense tensor, found a quantized weight", path, name);
      throw Error("missing entry; expected a dense float tensor " + shape_str(shape), path, name);
    }
    Tensor t = reader->read_dense(name);
    check_dense(t, shape, path, name);
    return t;
  }
  if (imp) {
    auto it = imp_entry.find(name);
    if (it == imp_entry.end()) throw Error("missing tensor; expected the TinyLoop entry " + name, path, name);
    Tensor t = imp->read_dense(*it->second);
    if (!dtype_is_float(t.dtype) || t.shape != shape)
      throw Error("expected a float tensor " + shape_str(shape) + ", got " + dtype_name(t.dtype) + " " + t.shape_str(), path,
                  name);
    t.check_finite(path);
    return t;
  }
  // A quantized folder: the HF tensors of the entry, joined along the last axis (q | k | v biases).
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t width = shape.empty() ? 1 : shape.back();
  Tensor out = joined_dense(name, numel / width, width);
  out.shape = shape;
  return out;
}

// A quantized folder's dense entry from its HF tensors ([rows, n1 - n0] each, as QuantCheckpoint
// reads them: a linear's transposed to [K, n]), each checked, joined along the columns.
Tensor ModelSource::Impl::joined_dense(const std::string& name, int64_t rows, int64_t width) const {
  std::vector<std::pair<Tensor, std::pair<int64_t, int64_t>>> read;
  for (const HfSource& p : tinyloop_to_hf_names(name, config)) {
    Tensor t = ck->read_dense(p.hf);
    const int64_t w = p.n1 - p.n0;
    if (!dtype_is_float(t.dtype) || t.numel() != rows * w)
      throw Error("expected a float tensor of " + std::to_string(rows * w) + " values, got " + dtype_name(t.dtype) + " " +
                      t.shape_str(), path, p.hf);
    t.check_finite(path);
    t.name = p.hf;
    read.push_back({std::move(t), {p.n0, p.n1}});
  }
  if (read.empty()) throw Error("missing tensor; expected the TinyLoop entry " + name, path, name);
  return join_columns(name, read, rows, width, path);
}

StoredLinear ModelSource::Impl::linear(const std::string& name, int64_t K, int64_t N) const {
  StoredLinear l;
  l.name = name;
  l.K = K;
  l.N = N;
  if (reader) {
    if (reader->has_quant(name)) {
      auto q = std::make_shared<QuantWeight>(reader->read_quant(name, with_marlin));
      if (q->K != K || q->N != N)
        throw Error("expected a quantized weight of shape " + kn(K, N) + " (K = in, N = out), got " + kn(q->K, q->N), path,
                    name);
      l.quant = std::move(q);
    } else if (reader->has_dense(name)) {
      l.dense = reader->read_dense(name);
      const Tensor& t = l.dense;
      if (!dtype_is_float(t.dtype)) throw Error(std::string("expected a float tensor, got ") + dtype_name(t.dtype), path, name);
      if (t.shape != std::vector<int64_t>{K, N})
        throw Error("expected shape " + kn(K, N) + " (K = in, N = out), got " + t.shape_str(), path, name);
      t.check_finite(path);
    } else {
      throw Error("missing entry; expected a linear weight " + kn(K, N), path, name);
    }
    return l;
  }
  if (imp) {
    auto it = imp_entry.find(name);
    if (it == imp_entry.end()) throw Error("missing tensor; expected the TinyLoop entry " + name, path, name);
    const ImportEntry& e = *it->second;
    if (e.K() != K || e.N() != N)
      throw Error("expected a linear weight " + kn(K, N) + ", got " + shape_str(e.shape), path, name);
    l.dense = imp->read_stored_linear(e);
    l.transposed = imp->stores_transposed();
    if (l.transposed) check_transposed_finite(l.dense, K, N, path, name);
    else l.dense.check_finite(path);
    return l;
  }
  return quant_folder_linear(name, K, N);
}

// A quantized folder's linear: its HF layers joined along N (same K and group size: groups run
// along K); with_marlin: packed on the way in where the gate passes (the folder has no sections).
StoredLinear ModelSource::Impl::quant_folder_linear(const std::string& name, int64_t K, int64_t N) const {
  StoredLinear l;
  l.name = name;
  l.K = K;
  l.N = N;
  const std::vector<HfSource> parts = tinyloop_to_hf_names(name, config);
  size_t quantized = 0;
  for (const HfSource& p : parts) quantized += ck_quant.count(p.hf.substr(0, p.hf.size() - 7));
  if (quantized == 0) {  // dense: [K, n] per part (read_dense transposes PyTorch's [n, K])
    l.dense = joined_dense(name, K, N);
    return l;
  }
  if (quantized != parts.size()) throw Error("q, k and v are not all quantized: one TinyLoop weight needs all three", path, name);
  auto w = std::make_shared<QuantWeight>();
  w->name = name;
  w->K = K;
  w->N = N;
  for (const HfSource& p : parts) {
    const QuantWeight part = ck->read_quant(p.hf.substr(0, p.hf.size() - 7));
    if (part.K != K || part.N != p.n1 - p.n0)
      throw Error("expected " + kn(K, p.n1 - p.n0) + ", got " + kn(part.K, part.N), path, part.name);
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
  l.quant = std::move(w);
  return l;
}

ModelSource::ModelSource(const std::string& path, bool with_marlin) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.with_marlin = with_marlin;
  switch (detect_input(path)) {
    case InputKind::kHdf5: m.open_tinyloop(); break;
    case InputKind::kQuantFolder: m.open_quant_folder(); break;
    case InputKind::kHfFolder:
    case InputKind::kSafetensorsFolder:
    case InputKind::kSafetensorsFile: m.open_import(); break;
  }
  m.index_entries();
  m.check_model();
  m.check_complete();
}

ModelSource::ModelSource(std::shared_ptr<const TinyloopReader> reader, bool with_marlin)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = reader->path();
  m.with_marlin = with_marlin;
  m.reader = std::move(reader);
  m.open_tinyloop();
  m.index_entries();
  m.check_model();
  m.check_complete();
}

ModelSource::ModelSource(const CheckpointImport& opened, bool with_marlin) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = opened.path();
  m.with_marlin = with_marlin;
  if (const TinyloopReader* r = opened.tinyloop()) {
    m.reader = std::shared_ptr<const TinyloopReader>(std::shared_ptr<const TinyloopReader>(), r);  // not owned
    m.open_tinyloop();
  } else {
    m.imp = &opened;
    m.open_import();
  }
  m.index_entries();
  m.check_model();
  m.check_complete();
}

ModelSource::~ModelSource() = default;

ModelKind ModelSource::kind() const { return impl_->kind; }
const std::string& ModelSource::path() const { return impl_->path; }
const ModelConfig& ModelSource::config() const { return impl_->config; }
const std::vector<SourceEntry>& ModelSource::entries() const { return impl_->entries; }
bool ModelSource::hdf5() const { return bool(impl_->reader); }
bool ModelSource::with_marlin() const { return impl_->with_marlin; }

const SourceEntry* ModelSource::entry(const std::string& name) const {
  auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->entries[it->second];
}

int64_t ModelSource::quantized_count() const {
  int64_t n = 0;
  for (const SourceEntry& e : impl_->entries) n += e.quantized;
  return n;
}

std::vector<float> ModelSource::read_vector(const std::string& name) const {
  return impl_->dense(name, expected_entry_shape(impl_->config, name)).to_float();
}

Tensor ModelSource::read_embedding() const { return impl_->dense("embed", {impl_->config.vocab, impl_->config.d_model}); }

StoredLinear ModelSource::read_linear(const std::string& name) const {
  const std::vector<int64_t> s = expected_entry_shape(impl_->config, name);
  if (s.size() != 2 || !is_tinyloop_linear_name(name)) throw Error("not a linear weight of the model", impl_->path, name);
  StoredLinear l = impl_->linear(name, s[0], s[1]);
  const size_t dot = name.find('.', name.find('.') + 1);  // "pre.3" | ".attn_qkv"
  if (dot != std::string::npos && optional_entry_enabled(impl_->config, name.substr(dot) + ".bias"))
    l.bias = read_vector(name + ".bias");
  return l;
}

StoredBlock ModelSource::read_block(const std::string& prefix) const {
  StoredBlock b;
  b.prefix = prefix;
  b.attn_norm = read_vector(prefix + ".attn_norm");
  b.mlp_norm = read_vector(prefix + ".mlp_norm");
  if (optional_entry_enabled(impl_->config, ".q_norm")) b.q_norm = read_vector(prefix + ".q_norm");
  if (optional_entry_enabled(impl_->config, ".k_norm")) b.k_norm = read_vector(prefix + ".k_norm");
  for (int i = 0; i < kBlockLinears; ++i) b.lin[i] = read_linear(prefix + "." + kBlockLinearNames[i]);
  return b;
}

StoredLinear ModelSource::read_head() const {
  const ModelConfig& c = impl_->config;
  if (impl_->has("head") || !c.tie_embeddings) return read_linear("head");
  StoredLinear head;  // tied: the embedding [vocab, D] is the head's [N, K]
  head.name = "head";
  head.K = c.d_model;
  head.N = c.vocab;
  head.dense = read_embedding();
  head.transposed = true;
  return head;
}

}  // namespace tl
