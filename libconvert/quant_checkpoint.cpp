// Quantized checkpoint folders (GPTQ, AWQ, compressed-tensors); see quant_checkpoint.h.
#include "libconvert/quant_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/group_size.h"
#include "formats/file_check.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "libconvert/checkpoint_layers.h"

namespace tl {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read file", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("invalid JSON: ") + e.what(), path);
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The tensors of one quantized layer per format: the first is the one that marks a layer.
const std::vector<std::string>& layer_suffixes(QuantFormat f) {
  static const std::vector<std::string> gptq = {".qweight", ".qzeros", ".scales", ".g_idx"};
  static const std::vector<std::string> awq = {".qweight", ".qzeros", ".scales"};
  static const std::vector<std::string> ct = {".weight_packed", ".weight_scale", ".weight_zero_point", ".weight_shape",
                                              ".weight_g_idx"};
  return f == QuantFormat::kGptq ? gptq : f == QuantFormat::kAwq ? awq : ct;
}

template <class T>
std::vector<T> copy_as(const Tensor& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.data.data(), v.size() * sizeof(T));
  return v;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A JSON value that must be null or absent (an empty object counts as absent for *_config).
bool absent(const nlohmann::json& q, const char* key) {
  if (!q.contains(key) || q[key].is_null()) return true;
  return q[key].is_object() && q[key].empty();
}

// One compressed-tensors scale as fp16 bits, exactly or not at all.
half_bits ct_scale_to_half(const Tensor& t, size_t i, const std::string& file, const std::string& name) {
  float v = 0;
  switch (t.dtype) {
    case DType::F16: {
      half_bits h;
      std::memcpy(&h, t.data.data() + 2 * i, 2);
      return h;
    }
    case DType::BF16: {
      uint16_t b;
      std::memcpy(&b, t.data.data() + 2 * i, 2);
      const uint32_t u = uint32_t(b) << 16;
      std::memcpy(&v, &u, 4);
      break;
    }
    case DType::F32:
      std::memcpy(&v, t.data.data() + 4 * i, 4);
      break;
    default:
      throw Error(std::string("weight_scale is ") + dtype_name(t.dtype) + ": expected F16, BF16 or F32", file, name);
  }
  const half_bits h = float_to_half(v);
  if (half_to_float(h) != v && !(std::isnan(v)))
    throw Error("weight_scale[" + std::to_string(i) + "] = " + std::to_string(v) +
                    " has no exact fp16 value (TinyLoop's scales are fp16; the import is exact or refused)",
                file, name);
  return h;
}

}  // namespace

const char* quant_format_name(QuantFormat f) {
  switch (f) {
    case QuantFormat::kGptq: return "gptq";
    case QuantFormat::kAwq: return "awq";
    case QuantFormat::kCompressedTensors: return "compressed-tensors";
  }
  return "?";
}

bool quant_checkpoint_format(const std::string& dir, QuantFormat* format) {
  if (!is_directory(dir)) return false;
  QuantFormat f = QuantFormat::kGptq;
  if (!is_regular_file(dir + "/quantize_config.json")) {
    if (!is_regular_file(dir + "/config.json")) return false;
    try {
      const nlohmann::json j = read_json(dir + "/config.json");
      if (!j.is_object() || !j.contains("quantization_config") || !j["quantization_config"].is_object()) return false;
      const nlohmann::json& q = j["quantization_config"];
      const std::string m = quant_method_of(q);
      // Any other method is still a quantized folder: read_quant_checkpoint_config refuses it by name.
      f = m == "awq" ? QuantFormat::kAwq : m == "compressed-tensors" ? QuantFormat::kCompressedTensors : QuantFormat::kGptq;
    } catch (const Error&) {
      return false;
    }
  }
  if (format) *format = f;
  return true;
}

QuantCheckpointConfig awq_config_from_json(const nlohmann::json& q, const std::string& file) {
  if (!q.is_object()) throw Error("quantization settings must be a JSON object", file);
  QuantCheckpointConfig c;
  c.format = QuantFormat::kAwq;
  c.source = file;
  try {
    const int bits = q.value("bits", q.value("w_bit", 4));
    if (bits != 4) throw Error("bits = " + std::to_string(bits) + ": expected 4 (TinyLoop is int4)", file, "bits");
    const std::string version = lower(q.value("version", std::string("gemm")));
    if (version != "gemm")
      throw Error("version '" + version + "': expected 'gemm' (AutoAWQ's GEMV, GEMV-fast, Marlin, ExLlama and IPEX "
                  "layouts pack differently)", file, "version");
    c.group_size = q.value("group_size", q.value("q_group_size", int64_t(128)));
    if (c.group_size == 0 || c.group_size < -1)
      throw Error("group_size = " + std::to_string(c.group_size) + ": expected -1 or > 0", file, "group_size");
    c.sym = !q.value("zero_point", true);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("bad quantization settings: ") + e.what(), file);
  }
  return c;
}

QuantCheckpointConfig ct_config_from_json(const nlohmann::json& q, const std::string& file) {
  if (!q.is_object()) throw Error("quantization settings must be a JSON object", file);
  QuantCheckpointConfig c;
  c.format = QuantFormat::kCompressedTensors;
  c.source = file;
  try {
    const std::string status = q.value("quantization_status", std::string("compressed"));
    if (status != "compressed")
      throw Error("quantization_status '" + status + "': expected 'compressed' (packed weights)", file,
                  "quantization_status");
    for (const char* key : {"kv_cache_scheme", "sparsity_config", "transform_config"})
      if (!absent(q, key))
        throw Error(std::string(key) + " is set: not modelled by tinyloop-tools (the weights alone would not be the "
                    "model)", file, key);
    const std::string top = q.value("format", std::string("pack-quantized"));
    if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
      throw Error("expected a non-empty config_groups object", file, "config_groups");
    bool first = true;
    for (const auto& [gname, g] : q["config_groups"].items()) {
      const std::string key = "config_groups." + gname;
      if (!g.is_object()) throw Error("expected a quantization scheme object", file, key);
      const std::string fmt = g.contains("format") && g["format"].is_string() ? g["format"].get<std::string>() : top;
      if (fmt != "pack-quantized")
        throw Error("format '" + fmt + "': expected 'pack-quantized' (int4 weights packed in int32)", file,
                    key + ".format");
      for (const char* act : {"input_activations", "output_activations"})
        if (!absent(g, act))
          throw Error(std::string(act) + " are quantized: only weight-only schemes (W4A16) are modelled", file,
                      key + "." + act);
      if (!g.contains("weights") || !g["weights"].is_object())
        throw Error("expected a weights object", file, key + ".weights");
      const nlohmann::json& w = g["weights"];
      const int bits = w.value("num_bits", 8);
      if (bits != 4) throw Error("num_bits = " + std::to_string(bits) + ": expected 4", file, key + ".weights.num_bits");
      const std::string type = w.value("type", std::string("int"));
      if (type != "int") throw Error("type '" + type + "': expected 'int'", file, key + ".weights.type");
      if (w.contains("dynamic") && !(w["dynamic"].is_boolean() && !w["dynamic"].get<bool>()))
        throw Error("dynamic quantization: expected false", file, key + ".weights.dynamic");
      const std::string strategy = w.contains("strategy") && w["strategy"].is_string() ? w["strategy"].get<std::string>()
                                                                                       : "";
      int64_t gs = -1;
      if (strategy == "group") {
        if (!w.contains("group_size") || !w["group_size"].is_number_integer() || w["group_size"].get<int64_t>() <= 0)
          throw Error("strategy 'group' needs a group_size > 0", file, key + ".weights.group_size");
        gs = w["group_size"].get<int64_t>();
      } else if (strategy != "channel") {
        throw Error("strategy '" + strategy + "': expected 'group' or 'channel'", file, key + ".weights.strategy");
      }
      const bool sym = w.value("symmetric", true);
      if (first) {
        c.group_size = gs;
        c.sym = sym;
        first = false;
      } else if (gs != c.group_size || sym != c.sym) {
        throw Error("config groups with different weight settings (group size, symmetric): one setting per "
                    "checkpoint is modelled", file, key + ".weights");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("bad quantization settings: ") + e.what(), file);
  }
  return c;
}

QuantCheckpointConfig read_quant_checkpoint_config(const std::string& dir) {
  const std::string qc = dir + "/quantize_config.json";
  if (is_regular_file(qc)) {
    QuantCheckpointConfig c;
    c.gptq = gptq_config_from_json(read_json(qc), qc);
    c.group_size = c.gptq.group_size;
    c.sym = c.gptq.sym;
    c.source = qc;
    return c;
  }
  const std::string cfg = dir + "/config.json";
  if (!is_regular_file(cfg))
    throw Error("not a quantized checkpoint: expected quantize_config.json or a quantization_config in config.json", dir);
  const nlohmann::json j = read_json(cfg);
  if (!j.is_object() || !j.contains("quantization_config"))
    throw Error("not a quantized checkpoint: no quantization_config", cfg);
  const nlohmann::json& q = j["quantization_config"];
  const std::string file = cfg + ": quantization_config";
  const std::string m = quant_method_of(q);
  if (m == "awq") return awq_config_from_json(q, file);
  if (m == "compressed-tensors") return ct_config_from_json(q, file);
  if (m != "gptq")
    throw Error("quant_method '" + m + "': expected 'gptq', 'awq' or 'compressed-tensors'", file, "quant_method");
  QuantCheckpointConfig c;
  c.gptq = gptq_config_from_json(q, file);
  c.group_size = c.gptq.group_size;
  c.sym = c.gptq.sym;
  c.source = file;
  return c;
}

struct QuantCheckpoint::Impl {
  std::string dir;
  QuantCheckpointConfig config;
  SafetensorsReader st;
  bool has_model = false;
  ModelConfig model;
  std::vector<std::string> quant, dense;
  explicit Impl(const std::string& d) : dir(d), config(read_quant_checkpoint_config(d)), st(d) {}

  // A tensor of layer `name` with the expected dtype and rank; its shape.
  std::vector<int64_t> need(const std::string& name, const std::string& suffix, std::initializer_list<DType> dts,
                            size_t rank) const {
    const std::string t = name + suffix;
    if (!st.contains(t)) throw Error("missing tensor '" + t + "'", dir, name);
    const SafetensorsEntry& e = st.entry(t);
    bool ok = false;
    std::string want;
    for (DType d : dts) {
      ok = ok || e.dtype == d;
      want += (want.empty() ? "" : " or ") + std::string(dtype_name(d));
    }
    if (!ok || e.shape.size() != rank)
      throw Error("expected " + want + " with " + std::to_string(rank) + " dimensions, found " + dtype_name(e.dtype) +
                      " " + shape_str(e.shape),
                  dir, t);
    return e.shape;
  }
  // A group larger than K is one group per column.
  int64_t effective_group(int64_t K) const { return std::min(group_size_from_upstream(config.group_size, K), K); }

  QuantWeight read_gptq(const std::string& name) const {
    const auto qw = need(name, ".qweight", {DType::I32}, 2);
    const auto qz = need(name, ".qzeros", {DType::I32}, 2);
    const auto sc = need(name, ".scales", {DType::F16}, 2);
    const int64_t K = qw[0] * 8, N = qw[1], G = sc[0];
    if (sc[1] != N || qz[0] != G || qz[1] * 8 != N)
      throw Error("inconsistent shapes: qweight " + shape_str(qw) + ", qzeros " + shape_str(qz) + ", scales " +
                      shape_str(sc) + "; expected [K/8, N], [G, N/8], [G, N]",
                  dir, name);
    const std::vector<int32_t> qweight = copy_as<int32_t>(st.read(name + ".qweight"));
    const std::vector<int32_t> qzeros = copy_as<int32_t>(st.read(name + ".qzeros"));
    const std::vector<half_bits> scales = copy_as<half_bits>(st.read(name + ".scales"));
    std::vector<int32_t> g_idx;
    if (st.contains(name + ".g_idx")) {
      const auto gi = need(name, ".g_idx", {DType::I32}, 1);
      if (gi[0] != K)
        throw Error("g_idx has " + std::to_string(gi[0]) + " entries, expected K = " + std::to_string(K), dir,
                    name + ".g_idx");
      g_idx = copy_as<int32_t>(st.read(name + ".g_idx"));
    }
    GptqLayerView v;
    v.K = K;
    v.N = N;
    v.G = G;
    v.qweight = qweight.data();
    v.qzeros = qzeros.data();
    v.scales = scales.data();
    v.g_idx = g_idx.empty() ? nullptr : g_idx.data();
    return gptq_layer_to_tinyloop(name, v, config.gptq, dir);
  }

  QuantWeight read_awq(const std::string& name) const {
    const auto qw = need(name, ".qweight", {DType::I32}, 2);
    const auto sc = need(name, ".scales", {DType::F16}, 2);
    const int64_t K = qw[0], N = qw[1] * 8, G = sc[0];
    const bool zeros = st.contains(name + ".qzeros");
    if (zeros == config.sym)
      throw Error(std::string(zeros ? "qzeros present but zero_point is false" : "qzeros missing but zero_point is true"),
                  dir, name);
    std::vector<int64_t> qz = {G, N / 8};
    if (zeros) qz = need(name, ".qzeros", {DType::I32}, 2);
    if (sc[1] != N || qz[0] != G || qz[1] * 8 != N)
      throw Error("inconsistent shapes: qweight " + shape_str(qw) + ", qzeros " + shape_str(qz) + ", scales " +
                      shape_str(sc) + "; expected [K, N/8], [G, N/8], [G, N]",
                  dir, name);
    const std::vector<int32_t> qweight = copy_as<int32_t>(st.read(name + ".qweight"));
    const std::vector<int32_t> qzeros = zeros ? copy_as<int32_t>(st.read(name + ".qzeros")) : std::vector<int32_t>();
    const std::vector<half_bits> scales = copy_as<half_bits>(st.read(name + ".scales"));
    AwqLayerView v;
    v.K = K;
    v.N = N;
    v.G = G;
    v.group_size = effective_group(K);
    v.qweight = qweight.data();
    v.qzeros = zeros ? qzeros.data() : nullptr;
    v.scales = scales.data();
    return awq_layer_to_tinyloop(name, v, dir);
  }

  QuantWeight read_ct(const std::string& name) const {
    const auto pk = need(name, ".weight_packed", {DType::I32}, 2);
    const auto sc = need(name, ".weight_scale", {DType::F16, DType::BF16, DType::F32}, 2);
    const auto ws = need(name, ".weight_shape", {DType::I32, DType::I64}, 1);
    if (ws[0] != 2) throw Error("weight_shape has " + std::to_string(ws[0]) + " entries, expected 2", dir, name);
    const Tensor shape_t = st.read(name + ".weight_shape");
    int64_t NK[2];
    for (int i = 0; i < 2; ++i) {
      if (shape_t.dtype == DType::I64) {
        std::memcpy(&NK[i], shape_t.data.data() + 8 * i, 8);
      } else {
        int32_t v32;
        std::memcpy(&v32, shape_t.data.data() + 4 * i, 4);
        NK[i] = v32;
      }
    }
    const int64_t N = NK[0], K = NK[1], G = sc[1];
    if (N <= 0 || K <= 0 || pk[0] != N || pk[1] != (K + 7) / 8 || sc[0] != N)
      throw Error("inconsistent shapes: weight_shape [" + std::to_string(N) + ", " + std::to_string(K) +
                      "], weight_packed " + shape_str(pk) + ", weight_scale " + shape_str(sc) +
                      "; expected [N, ceil(K/8)] and [N, G]",
                  dir, name);
    const bool zeros = st.contains(name + ".weight_zero_point");
    if (zeros == config.sym)
      throw Error(std::string(zeros ? "weight_zero_point present but the scheme is symmetric"
                                    : "weight_zero_point missing but the scheme is asymmetric"),
                  dir, name);
    std::vector<int32_t> zp;
    if (zeros) {
      const auto zs = need(name, ".weight_zero_point", {DType::I32}, 2);
      if (zs[0] != (N + 7) / 8 || zs[1] != G)
        throw Error("weight_zero_point is " + shape_str(zs) + ", expected [ceil(N/8), G] = [" +
                        std::to_string((N + 7) / 8) + ", " + std::to_string(G) + "] (packed along N)",
                    dir, name);
      zp = copy_as<int32_t>(st.read(name + ".weight_zero_point"));
    }
    std::vector<int32_t> g_idx;
    if (st.contains(name + ".weight_g_idx")) {
      const auto gi = need(name, ".weight_g_idx", {DType::I32}, 1);
      if (gi[0] != K)
        throw Error("weight_g_idx has " + std::to_string(gi[0]) + " entries, expected K = " + std::to_string(K), dir,
                    name + ".weight_g_idx");
      g_idx = copy_as<int32_t>(st.read(name + ".weight_g_idx"));
    }
    const std::vector<int32_t> packed = copy_as<int32_t>(st.read(name + ".weight_packed"));
    const Tensor scale_t = st.read(name + ".weight_scale");
    std::vector<half_bits> scales(size_t(N * G));
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = ct_scale_to_half(scale_t, i, dir, name + ".weight_scale");
    CtLayerView v;
    v.K = K;
    v.N = N;
    v.G = G;
    v.group_size = effective_group(K);
    v.packed = packed.data();
    v.scales = scales.data();
    v.zero_points = zeros ? zp.data() : nullptr;
    v.g_idx = g_idx.empty() ? nullptr : g_idx.data();
    return ct_layer_to_tinyloop(name, v, dir);
  }
};

QuantCheckpoint::QuantCheckpoint(const std::string& dir) {
  if (!is_directory(dir)) throw Error("not a folder", dir);
  impl_ = std::make_unique<Impl>(dir);
  const std::string cfg = dir + "/config.json";
  if (is_regular_file(cfg)) {
    try {
      impl_->model = read_hf_config(cfg);
      impl_->has_model = true;
    } catch (const Error&) {
      impl_->has_model = false;  // an architecture TinyLoop does not model: weights still convert
    }
  }
  const std::vector<std::string>& suffixes = layer_suffixes(impl_->config.format);
  const std::string& marker = suffixes.front();
  std::set<std::string> layers;
  for (const std::string& n : impl_->st.names())
    if (ends_with(n, marker)) layers.insert(n.substr(0, n.size() - marker.size()));
  if (layers.empty())
    throw Error(std::string("no '<layer>") + marker + "' tensors: not a " + quant_format_name(impl_->config.format) +
                    " checkpoint",
                dir);
  impl_->quant.assign(layers.begin(), layers.end());
  for (const std::string& n : impl_->st.names()) {
    bool part = false;
    for (const std::string& suf : suffixes)
      if (ends_with(n, suf) && layers.count(n.substr(0, n.size() - suf.size()))) part = true;
    if (!part) impl_->dense.push_back(n);
  }
  std::sort(impl_->dense.begin(), impl_->dense.end());
}

QuantCheckpoint::~QuantCheckpoint() = default;
QuantCheckpoint::QuantCheckpoint(QuantCheckpoint&&) noexcept = default;

const std::string& QuantCheckpoint::dir() const { return impl_->dir; }
const QuantCheckpointConfig& QuantCheckpoint::config() const { return impl_->config; }
bool QuantCheckpoint::has_model_config() const { return impl_->has_model; }
const ModelConfig& QuantCheckpoint::model_config() const { return impl_->model; }
std::vector<std::string> QuantCheckpoint::quant_names() const { return impl_->quant; }
std::vector<std::string> QuantCheckpoint::dense_names() const { return impl_->dense; }

QuantWeight QuantCheckpoint::read_quant(const std::string& name) const {
  switch (impl_->config.format) {
    case QuantFormat::kGptq: return impl_->read_gptq(name);
    case QuantFormat::kAwq: return impl_->read_awq(name);
    case QuantFormat::kCompressedTensors: return impl_->read_ct(name);
  }
  throw Error("unknown format", impl_->dir, name);
}

Tensor QuantCheckpoint::read_dense(const std::string& name) const {
  Tensor t = impl_->st.read(name);
  const bool linear = ends_with(name, "_proj.weight") || name == "lm_head.weight";
  if (linear && t.shape.size() == 2) {
    const int64_t N = t.shape[0], K = t.shape[1];
    const size_t es = dtype_size(t.dtype);
    std::vector<uint8_t> out(t.data.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        std::memcpy(out.data() + size_t(k * N + n) * es, t.data.data() + size_t(n * K + k) * es, es);
    t.data.swap(out);
    t.shape = {K, N};
  }
  return t;
}

}  // namespace tl
