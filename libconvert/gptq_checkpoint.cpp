// GPTQ checkpoint (AutoGPTQ / GPTQModel) import; the format is described in gptq_checkpoint.h.
#include "libconvert/gptq_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sys/stat.h>

#include "core/error.h"
#include "core/group_size.h"
#include "formats/file_check.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"

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

const char* const kLayerSuffixes[] = {".qweight", ".qzeros", ".scales", ".g_idx"};

std::string fmt_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", double(v));
  return buf;
}

std::string at2(int64_t r, int64_t c) { return "[" + std::to_string(r) + ", " + std::to_string(c) + "]"; }

template <class T>
std::vector<T> copy_as(const Tensor& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.data.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace

bool is_gptq_checkpoint(const std::string& dir) {
  if (!is_directory(dir)) return false;
  if (is_regular_file(dir + "/quantize_config.json")) return true;
  if (!is_regular_file(dir + "/config.json")) return false;
  try {
    const nlohmann::json j = read_json(dir + "/config.json");
    return j.contains("quantization_config") && j["quantization_config"].is_object() &&
           j["quantization_config"].value("quant_method", std::string("gptq")) == "gptq";
  } catch (const Error&) {
    return false;
  }
}

GptqCheckpointConfig gptq_config_from_json(const nlohmann::json& q, const std::string& file) {
  if (!q.is_object()) throw Error("quantization settings must be a JSON object", file);
  GptqCheckpointConfig c;
  c.source = file;
  try {
    const std::string method = q.value("quant_method", std::string("gptq"));
    if (method != "gptq")
      throw Error("quant_method '" + method + "': expected 'gptq'", file, "quant_method");
    if (!q.contains("bits")) throw Error("missing key", file, "bits");
    c.bits = q.at("bits").get<int>();
    if (c.bits != 4)
      throw Error("bits = " + std::to_string(c.bits) + ": expected 4 (Marlin and TinyLoop are int4)",
                  file, "bits");
    c.group_size = q.value("group_size", int64_t(-1));
    if (c.group_size == 0 || c.group_size < -1)
      throw Error("group_size = " + std::to_string(c.group_size) + ": expected -1 or > 0", file,
                  "group_size");
    c.sym = q.value("sym", true);
    c.desc_act = q.value("desc_act", false);
    if (q.value("is_marlin_format", false))
      throw Error("is_marlin_format: the checkpoint is already Marlin-packed (AutoGPTQ's layout); "
                  "expected a plain GPTQ checkpoint",
                  file, "is_marlin_format");
    c.checkpoint_format = q.value("checkpoint_format", std::string("gptq"));
    if (c.checkpoint_format == "gptq") {
      c.zeros_minus_one = true;
    } else if (c.checkpoint_format == "gptq_v2") {
      c.zeros_minus_one = false;
    } else {
      throw Error("checkpoint_format '" + c.checkpoint_format + "': expected 'gptq' or 'gptq_v2'",
                  file, "checkpoint_format");
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("bad quantization settings: ") + e.what(), file);
  }
  return c;
}

GptqCheckpointConfig read_gptq_config(const std::string& dir) {
  const std::string qc = dir + "/quantize_config.json";
  if (is_regular_file(qc)) return gptq_config_from_json(read_json(qc), qc);
  const std::string cfg = dir + "/config.json";
  if (is_regular_file(cfg)) {
    const nlohmann::json j = read_json(cfg);
    if (j.contains("quantization_config"))
      return gptq_config_from_json(j["quantization_config"], cfg + ": quantization_config");
  }
  throw Error("not a GPTQ checkpoint: expected quantize_config.json or a quantization_config in "
              "config.json",
              dir);
}

QuantWeight gptq_layer_to_tinyloop(const std::string& name, const GptqLayerView& v,
                                   const GptqCheckpointConfig& c, const std::string& file) {
  const int64_t K = v.K, N = v.N, G = v.G;
  const int64_t gs = group_size_from_upstream(c.group_size, K);
  if (K <= 0 || N <= 0 || N % 8 != 0 || K % 8 != 0)
    throw Error("expected K and N multiples of 8, got K = " + std::to_string(K) + ", N = " +
                    std::to_string(N),
                file, name);
  if (K % gs != 0 || G != K / gs)
    throw Error("scales have " + std::to_string(G) + " groups, expected K / group_size = " +
                    std::to_string(K) + " / " + std::to_string(gs) +
                    (K % gs ? " (group_size does not divide K)" : ""),
                file, name);
  if (v.g_idx) {
    for (int64_t k = 0; k < K; ++k)
      if (v.g_idx[k] != k / gs)
        throw Error("act-order checkpoint (desc_act = " + std::string(c.desc_act ? "true" : "false") +
                        "): g_idx[" + std::to_string(k) + "] = " + std::to_string(v.g_idx[k]) +
                        ", expected k / group_size = " + std::to_string(k / gs) +
                        "; TinyLoop groups are contiguous row blocks: re-quantize without "
                        "desc_act or with static_groups",
                    file, name);
  }

  QuantWeight w;
  w.name = name;
  w.bits = 4;
  w.K = K;
  w.N = N;
  w.group_size = gs;
  w.q.resize(size_t(K * N));
  for (int64_t r = 0; r < K / 8; ++r) {
    const int32_t* row = v.qweight + r * N;
    for (int i = 0; i < 8; ++i) {
      uint8_t* out = w.q.data() + (8 * r + i) * N;
      for (int64_t n = 0; n < N; ++n) out[n] = uint8_t((uint32_t(row[n]) >> (4 * i)) & 15u);
    }
  }

  w.scale.assign(v.scales, v.scales + G * N);
  w.zero.resize(size_t(G * N));
  const uint32_t offset = c.zeros_minus_one ? 1u : 0u;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      const uint32_t nibble = (uint32_t(v.qzeros[g * (N / 8) + n / 8]) >> (4 * (n % 8))) & 15u;
      const uint32_t z = nibble + offset;
      const half_bits sb = v.scales[g * N + n];
      const float s = half_to_float(sb);
      if (!std::isfinite(s) || !(s > 0.0f))
        throw Error("scales" + at2(g, n) + " = " + fmt_float(s) + ": expected finite and > 0",
                    file, name);
      if (c.sym && z != 8)
        throw Error("sym = true but zero point z" + at2(g, n) + " = " + std::to_string(z) +
                        " (stored nibble " + std::to_string(nibble) + ", checkpoint_format '" +
                        c.checkpoint_format + "'); symmetric checkpoints store 7 in 'gptq' (v1) "
                        "and 8 in 'gptq_v2': is checkpoint_format right?",
                    file, name);
      // z * s is exact in fp32 (5-bit integer times an 11-bit significand): one rounding.
      w.zero[size_t(g * N + n)] = float_to_half(-(float(z) * s));
    }
  w.provenance = {{"method", "gptq-checkpoint"},
                  {"checkpoint_format", c.checkpoint_format},
                  {"sym", c.sym},
                  {"desc_act", c.desc_act},
                  {"checkpoint_group_size", c.group_size},
                  {"source", c.source}};
  return w;
}

std::vector<int32_t> gptq_pack_qweight(const std::vector<uint8_t>& q, int64_t K, int64_t N) {
  if (K % 8 != 0 || int64_t(q.size()) != K * N) throw Error("gptq_pack_qweight: expected K % 8 == 0 and K * N codes");
  std::vector<int32_t> out(size_t(K / 8 * N), 0);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      out[size_t((k / 8) * N + n)] =
          int32_t(uint32_t(out[size_t((k / 8) * N + n)]) | (uint32_t(q[size_t(k * N + n)] & 15u) << (4 * (k % 8))));
  return out;
}

std::vector<int32_t> gptq_pack_qzeros(const std::vector<int32_t>& z, int64_t G, int64_t N,
                                      bool zeros_minus_one) {
  if (N % 8 != 0 || int64_t(z.size()) != G * N) throw Error("gptq_pack_qzeros: expected N % 8 == 0 and G * N zero points");
  std::vector<int32_t> out(size_t(G * N / 8), 0);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      // Per nibble, as AutoGPTQ's kernels read it back: (z - 1) & 15 for v1.
      const uint32_t nib = uint32_t(z[size_t(g * N + n)] - (zeros_minus_one ? 1 : 0)) & 15u;
      int32_t& word = out[size_t(g * (N / 8) + n / 8)];
      word = int32_t(uint32_t(word) | (nib << (4 * (n % 8))));
    }
  return out;
}

struct GptqCheckpoint::Impl {
  std::string dir;
  GptqCheckpointConfig config;
  SafetensorsReader st;
  bool has_model = false;
  ModelConfig model;
  std::vector<std::string> quant, dense;
  explicit Impl(const std::string& d) : dir(d), config(read_gptq_config(d)), st(d) {}
};

GptqCheckpoint::GptqCheckpoint(const std::string& dir) {
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
  std::set<std::string> layers;
  for (const std::string& n : impl_->st.names())
    if (ends_with(n, ".qweight")) layers.insert(n.substr(0, n.size() - 8));
  if (layers.empty()) throw Error("no '<layer>.qweight' tensors: not a GPTQ checkpoint", dir);
  impl_->quant.assign(layers.begin(), layers.end());
  for (const std::string& n : impl_->st.names()) {
    bool part = false;
    for (const char* suf : kLayerSuffixes)
      if (ends_with(n, suf) && layers.count(n.substr(0, n.size() - std::strlen(suf)))) part = true;
    if (!part) impl_->dense.push_back(n);
  }
  std::sort(impl_->dense.begin(), impl_->dense.end());
}

GptqCheckpoint::~GptqCheckpoint() = default;
GptqCheckpoint::GptqCheckpoint(GptqCheckpoint&&) noexcept = default;

const std::string& GptqCheckpoint::dir() const { return impl_->dir; }
const GptqCheckpointConfig& GptqCheckpoint::config() const { return impl_->config; }
bool GptqCheckpoint::has_model_config() const { return impl_->has_model; }
const ModelConfig& GptqCheckpoint::model_config() const { return impl_->model; }
std::vector<std::string> GptqCheckpoint::quant_names() const { return impl_->quant; }
std::vector<std::string> GptqCheckpoint::dense_names() const { return impl_->dense; }

QuantWeight GptqCheckpoint::read_quant(const std::string& name) const {
  const SafetensorsReader& st = impl_->st;
  const std::string& file = impl_->dir;
  auto need = [&](const std::string& suffix, DType dt, size_t rank) {
    const std::string t = name + suffix;
    if (!st.contains(t)) throw Error("missing tensor '" + t + "'", file, name);
    const SafetensorsEntry& e = st.entry(t);
    if (e.dtype != dt || e.shape.size() != rank)
      throw Error("expected " + std::string(dtype_name(dt)) + " with " + std::to_string(rank) +
                      " dimensions, found " + dtype_name(e.dtype) + " " + shape_str(e.shape),
                  file, t);
    return e.shape;
  };
  const auto qw = need(".qweight", DType::I32, 2);
  const auto qz = need(".qzeros", DType::I32, 2);
  const auto sc = need(".scales", DType::F16, 2);
  const int64_t K = qw[0] * 8, N = qw[1], G = sc[0];
  if (sc[1] != N || qz[0] != G || qz[1] * 8 != N)
    throw Error("inconsistent shapes: qweight " + shape_str(qw) + ", qzeros " + shape_str(qz) +
                    ", scales " + shape_str(sc) + "; expected [K/8, N], [G, N/8], [G, N]",
                file, name);
  const std::vector<int32_t> qweight = copy_as<int32_t>(st.read(name + ".qweight"));
  const std::vector<int32_t> qzeros = copy_as<int32_t>(st.read(name + ".qzeros"));
  const std::vector<half_bits> scales = copy_as<half_bits>(st.read(name + ".scales"));
  std::vector<int32_t> g_idx;
  if (st.contains(name + ".g_idx")) {
    const auto gi = need(".g_idx", DType::I32, 1);
    if (gi[0] != K)
      throw Error("g_idx has " + std::to_string(gi[0]) + " entries, expected K = " + std::to_string(K),
                  file, name + ".g_idx");
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
  return gptq_layer_to_tinyloop(name, v, impl_->config, file);
}

Tensor GptqCheckpoint::read_dense(const std::string& name) const {
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
