// tl-export --format gptq | compressed-tensors; see hf_export.h.
#include "jobs/hf_export.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/group_size.h"
#include "core/half.h"
#include "core/progress.h"
#include "formats/atomic_output.h"
#include "formats/file_check.h"
#include "formats/hf_config.h"
#include "formats/report_header.h"
#include "formats/safetensors.h"
#include "formats/tinyloop_file.h"
#include "libconvert/checkpoint_import.h"
#include "libconvert/checkpoint_layers.h"
#include "libconvert/quant_checkpoint.h"

namespace tl {
namespace {

// A zero point 0 under GPTQ v1 (stored z - 1): --gptq-format auto writes v2 instead.
struct V1ZeroPoint : Error {
  V1ZeroPoint(const std::string& what, const std::string& file, const std::string& item, std::string at)
      : Error(what, file, item), where(std::move(at)) {}
  std::string where;  // "<weight> group g, column n"
};

namespace fs = std::filesystem;
constexpr const char* kTool = "tl-export";

// Files of an HF folder copied as they are (the tokenizer in either form, generation defaults).
constexpr const char* kCopiedFiles[] = {"tokenizer.json",          "tokenizer_config.json", "tokenizer.model",
                                        "special_tokens_map.json", "added_tokens.json",     "vocab.json",
                                        "merges.txt",              "generation_config.json"};

// A TinyLoop linear's GPTQ layers: its HF weights (checkpoint_import.h) without ".weight".
struct HfPart {
  std::string hf;
  int64_t n0 = 0, n1 = 0;
};
std::vector<HfPart> linear_parts(const std::string& name, const ModelConfig& c) {
  if (!is_tinyloop_linear_name(name)) return {};
  std::vector<HfPart> out;
  for (const HfSource& s : tinyloop_to_hf_names(name, c)) out.push_back({s.hf.substr(0, s.hf.size() - 7), s.n0, s.n1});
  return out;
}

// The shape of w columns of a row-major [rows, N] (or [N]) tensor, transposed when `transpose`.
std::vector<int64_t> slice_shape(const std::vector<int64_t>& shape, int64_t w, bool transpose) {
  if (shape.size() != 2) return {w};
  return transpose ? std::vector<int64_t>{w, shape[0]} : std::vector<int64_t>{shape[0], w};
}

// Columns [n0, n1) of a row-major [rows, N] tensor, transposed when `transpose` ([n1 - n0, rows]).
Tensor column_slice(const Tensor& t, const std::string& name, int64_t n0, int64_t n1, bool transpose) {
  const size_t es = dtype_size(t.dtype);
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1, N = t.shape.back(), w = n1 - n0;
  Tensor out;
  out.name = name;
  out.dtype = t.dtype;
  out.shape = slice_shape(t.shape, w, transpose);
  out.data.resize(size_t(rows * w) * es);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < w; ++n) {
      const size_t dst = transpose ? size_t(n * rows + r) : size_t(r * w + n);
      std::memcpy(out.data.data() + dst * es, t.data.data() + size_t(r * N + n0 + n) * es, es);
    }
  return out;
}

// A dense entry's HF tensors: a linear weight [K, N] goes back to PyTorch's [N, K], part by part;
// a bias is split like its weight (sliced); everything else keeps its bytes under its HF name.
struct DenseOut {
  std::vector<HfSource> parts;
  bool linear = false, sliced = false;
};
DenseOut dense_out(const std::string& n, const ModelConfig& c, const std::string& file) {
  DenseOut d;
  d.parts = tinyloop_to_hf_names(n, c);
  if (d.parts.empty()) throw Error("no HF name for this entry", file, n);
  d.linear = is_tinyloop_linear_name(n);
  d.sliced = d.linear || d.parts.size() > 1;
  return d;
}

// A tensor holding a vector's bytes (I32 codes and zero points, F16 scales, the I64 shape).
template <class T>
Tensor vector_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
  Tensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(v.size() * sizeof(T));
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}
Tensor int32_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  return vector_tensor(name, DType::I32, std::move(shape), v);
}

// The spacing of fp16 numbers at h (2^-24 among subnormals).
double half_ulp(half_bits h) {
  const double v = std::fabs(double(half_to_float(h)));
  if (v < std::ldexp(1.0, -14)) return std::ldexp(1.0, -24);
  int e = 0;
  std::frexp(v, &e);  // v = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 11);
}

struct ZeroStats {
  uint64_t groups = 0, moved = 0;  // moved: the file's zero differs from fp16(-(z * scale))
  double max_dw = 0;               // the largest |zero_file + z * scale| over moved groups
};

// Columns [n0, n1) of a quantized weight with integer zero points: codes [K, Np], z [G, Np], scales
// [G, Np]; z checked as hf_export.h says (min_z: 1 for GPTQ v1, whose stored nibble is z - 1).
struct ExportFormat {
  bool ct = false;        // compressed-tensors, else GPTQ
  bool gptq_v1 = false;   // GPTQ v1: stored zero nibble z - 1
  const char* label = "GPTQ";
};
struct PartCodes {
  int64_t K = 0, Np = 0, G = 0, group_size = 0;
  std::vector<uint8_t> q;
  std::vector<int32_t> z;
  std::vector<half_bits> scales;
};
PartCodes integer_part(const QuantWeight& w, const HfPart& part, const ExportFormat& fmt, const std::string& file,
                       ZeroStats* stats) {
  PartCodes p;
  p.K = w.K;
  p.Np = part.n1 - part.n0;
  p.G = w.groups();
  p.group_size = w.group_size;
  const int64_t K = p.K, Np = p.Np, G = p.G;
  p.q.resize(static_cast<size_t>(K * Np));
  for (int64_t k = 0; k < K; ++k) std::memcpy(&p.q[size_t(k * Np)], &w.q[size_t(k * w.N + part.n0)], size_t(Np));
  p.z.resize(static_cast<size_t>(G * Np));
  p.scales.resize(static_cast<size_t>(G * Np));
  const int min_z = fmt.gptq_v1 ? 1 : 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < Np; ++n) {
      const size_t i = size_t(g * w.N + part.n0 + n);
      const half_bits s16 = w.scale[i], z16 = w.zero[i];
      const double s = half_to_float(s16), zero = half_to_float(z16);
      const double zf = -zero / s, zi = std::nearbyint(zf);
      // The file's zero is fp16(-(z * scale32)) with scale16 = fp16(scale32): within half an fp16
      // step of itself plus z half-steps of the scale of -(z * scale16).
      const double slack = 0.5 * half_ulp(z16) + zi * 0.5 * half_ulp(s16);
      if (zi < min_z || zi > 15 || std::fabs(zero + zi * s) > slack * (1 + 1e-9)) {
        char buf[320];
        if (zi == 0 && min_z == 1 && std::fabs(zero) <= slack) {
          char where[160];
          std::snprintf(where, sizeof where, "%s group %lld, column %lld", w.name.c_str(), (long long)g,
                        (long long)(part.n0 + n));
          std::snprintf(buf, sizeof buf,
                        "group %lld, column %lld has zero point 0, which the v1 layout (stored z - 1) cannot hold; "
                        "use --gptq-format v2 or auto", (long long)g, (long long)(part.n0 + n));
          throw V1ZeroPoint(buf, file, w.name, where);
        }
          std::snprintf(buf, sizeof buf,
                        "group %lld, column %lld: zero / scale = %.6g is not an integer zero point 0..15 (%s stores "
                        "W = scale * (q - z)); a --zero float file cannot be exported as %s",
                        (long long)g, (long long)(part.n0 + n), -zf, fmt.label, fmt.label);
        throw Error(buf, file, w.name);
      }
      p.z[size_t(g * Np + n)] = int32_t(zi);
      p.scales[size_t(g * Np + n)] = s16;
      ++stats->groups;
      if (float_to_half(float(-(zi * s))) != z16) {
        ++stats->moved;
        stats->max_dw = std::max(stats->max_dw, std::fabs(zero + zi * s));
      }
    }
  return p;
}

// The format's tensors of one part [K, Np] with G groups, as planned: GPTQ qweight [K/8, Np],
// qzeros [G, Np/8], scales [G, Np], g_idx [K] (K and Np multiples of 8, else refused by name);
// compressed-tensors weight_packed [Np, ceil(K/8)], weight_scale [Np, G], weight_zero_point
// [ceil(Np/8), G], weight_shape int64 [2].
std::vector<SafetensorsSpec> part_specs(const ExportFormat& fmt, const HfPart& part, int64_t K, int64_t G,
                                        const std::string& file, const std::string& weight) {
  const int64_t Np = part.n1 - part.n0;
  if (fmt.ct)
    return {{part.hf + ".weight_packed", DType::I32, {Np, (K + 7) / 8}},
            {part.hf + ".weight_scale", DType::F16, {Np, G}},
            {part.hf + ".weight_zero_point", DType::I32, {(Np + 7) / 8, G}},
            {part.hf + ".weight_shape", DType::I64, {2}}};
  if (K % 8 != 0 || Np % 8 != 0)
    throw Error("K = " + std::to_string(K) + ", N = " + std::to_string(Np) + " (" + part.hf +
                    "): GPTQ packs 8 codes per int32 along K and 8 zero points along N (both multiples of 8)",
                file, weight);
  return {{part.hf + ".qweight", DType::I32, {K / 8, Np}},
          {part.hf + ".qzeros", DType::I32, {G, Np / 8}},
          {part.hf + ".scales", DType::F16, {G, Np}},
          {part.hf + ".g_idx", DType::I32, {K}}};
}

// GPTQ: qweight [K/8, Np], qzeros [G, Np/8], scales [G, Np], g_idx [K] (part_specs checked K, Np).
std::vector<Tensor> gptq_tensors(const PartCodes& p, const HfPart& part, bool v1) {
  const int64_t K = p.K, Np = p.Np, G = p.G;
  std::vector<int32_t> g_idx(static_cast<size_t>(K));
  const int64_t gs = p.group_size;
  for (int64_t k = 0; k < K; ++k) g_idx[size_t(k)] = int32_t(k / gs);
  std::vector<Tensor> out;
  out.push_back(int32_tensor(part.hf + ".qweight", {K / 8, Np}, gptq_pack_qweight(p.q, K, Np)));
  out.push_back(int32_tensor(part.hf + ".qzeros", {G, Np / 8}, gptq_pack_qzeros(p.z, G, Np, v1)));
  out.push_back(vector_tensor(part.hf + ".scales", DType::F16, {G, Np}, p.scales));
  out.push_back(int32_tensor(part.hf + ".g_idx", {K}, g_idx));
  return out;
}

// compressed-tensors pack-quantized: weight_packed [Np, ceil(K/8)], weight_scale [Np, G] (fp16),
// weight_zero_point [ceil(Np/8), G], weight_shape int64 [2] = {Np, K}.
std::vector<Tensor> ct_tensors(const PartCodes& p, const HfPart& part) {
  const int64_t K = p.K, Np = p.Np, G = p.G;
  std::vector<half_bits> scale_t(p.scales.size());
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < Np; ++n) scale_t[size_t(n * G + g)] = p.scales[size_t(g * Np + n)];
  std::vector<Tensor> out;
  out.push_back(int32_tensor(part.hf + ".weight_packed", {Np, (K + 7) / 8}, ct_pack_weight(p.q, K, Np)));
  out.push_back(vector_tensor(part.hf + ".weight_scale", DType::F16, {Np, G}, scale_t));
  out.push_back(int32_tensor(part.hf + ".weight_zero_point", {(Np + 7) / 8, G}, ct_pack_zero_points(p.z, G, Np)));
  out.push_back(vector_tensor(part.hf + ".weight_shape", DType::I64, {2}, std::vector<int64_t>{Np, K}));
  return out;
}

// The folder's tensors, planned from the file's metadata before any weight is read: names, dtypes
// and shapes in writing order, each from one entry of the file (a quantized weight gives its
// parts' format tensors, a dense entry its HF tensors), then cut into shards of at most max_bytes
// (a tensor larger than that gets a shard alone): model.safetensors when one suffices, else
// model-0000i-of-0000n.safetensors + index. Writing then reads each entry once, when its first
// tensor is due, and streams the shard out tensor by tensor.
struct PlannedTensor {
  SafetensorsSpec spec;
  size_t entry = 0;  // index into the plan's entries
};
struct ExportPlan {
  std::vector<std::string> entries;  // quantized weights first, then dense entries (sorted each)
  size_t quantized = 0;              // entries [0, quantized) are quantized
  std::vector<PlannedTensor> tensors;
  std::vector<std::vector<size_t>> shards;  // tensor indices per shard
  uint64_t total = 0;
  std::string shard_name(size_t i) const {
    char name[64];
    if (shards.size() == 1) std::snprintf(name, sizeof name, "model.safetensors");
    else std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    return name;
  }
};

void plan_shards(ExportPlan& p, uint64_t max_bytes) {
  uint64_t pending = 0;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const uint64_t b = spec_bytes(p.tensors[i].spec);
    if (p.shards.empty() || (!p.shards.back().empty() && pending + b > max_bytes)) {
      p.shards.emplace_back();
      pending = 0;
    }
    p.shards.back().push_back(i);
    pending += b;
    p.total += b;
  }
}

// The folder being built beside the target; removed unless committed.
class TempDir {
 public:
  explicit TempDir(const std::string& target) : target_(target) {
    const fs::path t(target);
    const fs::path parent = t.has_parent_path() ? t.parent_path() : fs::path(".");
    if (!is_directory(parent.string())) throw Error("no such folder", parent.string());
    path_ = (parent / ("." + t.filename().string() + ".tmp-" + std::to_string(getpid()))).string();
    std::error_code ec;
    if (!fs::create_directory(path_, ec)) throw Error("cannot create a folder here: " + (ec ? ec.message() : "exists"), path_);
  }
  ~TempDir() {
    if (!committed_) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  const std::string& path() const { return path_; }
  // rename(2) without replacing: a folder (even an empty one) that appeared at the target since
  // the start -- another run of the same command -- is refused, not replaced.
  void commit() {
    int rc = renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && (errno == ENOSYS || errno == EINVAL)) {  // a file system without it
      if (fs::exists(fs::symlink_status(target_))) errno = EEXIST;
      else rc = ::rename(path_.c_str(), target_.c_str());
    }
    if (rc != 0) {
      if (errno == EEXIST || errno == ENOTEMPTY) throw Error("exists; tl-export writes a new folder", target_);
      throw Error(std::string("cannot rename the finished folder into place: ") + std::strerror(errno), target_);
    }
    committed_ = true;
  }

 private:
  std::string target_, path_;
  bool committed_ = false;
};

// config.json: --from's with quantization_config, checked against the file's, or the file's own.
nlohmann::ordered_json export_config(const ExportOptions& o, const ModelConfig& c, int64_t group_size, bool lm_head,
                                     const std::vector<std::string>& dense_linears) {
  nlohmann::ordered_json j;
  if (!o.from.empty()) {
    const std::string path = o.from + "/config.json";
    std::ifstream in(path);
    if (!in) throw Error("cannot read config.json of --from", path);
    try {
      j = nlohmann::ordered_json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("not valid JSON: ") + e.what(), path);
    }
    const ModelConfig h = model_config_from_hf(nlohmann::json::parse(j.dump()), path);
    auto same = [&](const char* what, int64_t a, int64_t b) {
      if (a != b)
        throw Error(std::string(what) + " is " + std::to_string(b) + " in --from's config.json but " + std::to_string(a) +
                        " in the file: not the model it was quantized from",
                    path);
    };
    same("hidden_size", c.d_model, h.d_model);
    same("num_attention_heads", c.n_heads, h.n_heads);
    same("num_key_value_heads", c.n_kv_heads, h.n_kv_heads);
    same("head_dim", c.d_head, h.d_head);
    same("intermediate_size", c.ffn, h.ffn);
    same("vocab_size", c.vocab, h.vocab);
    same("num_hidden_layers", c.n_pre, h.n_pre);
  } else {
    if (c.architecture == "tinyloop")
      throw Error("the file's config is TinyLoop's own (no HF model_type); give --from the original HF folder", o.input);
    j = nlohmann::ordered_json::parse(model_config_to_hf(c).dump());
  }
  j["torch_dtype"] = "float16";
  if (o.format == "compressed-tensors") {
    // One config group for every Linear; the dense ones (an unquantized head) in "ignore".
    nlohmann::ordered_json weights = {{"num_bits", 4},
                                      {"type", "int"},
                                      {"symmetric", false},
                                      {"group_size", group_size == -1 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(group_size)},
                                      {"strategy", group_size == -1 ? "channel" : "group"},
                                      {"block_structure", nullptr},
                                      {"dynamic", false},
                                      {"actorder", nullptr},
                                      {"observer", "minmax"},
                                      {"observer_kwargs", nlohmann::ordered_json::object()}};
    nlohmann::ordered_json group = {{"targets", {"Linear"}},
                                    {"weights", weights},
                                    {"input_activations", nullptr},
                                    {"output_activations", nullptr},
                                    {"format", "pack-quantized"}};
    j["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                {"format", "pack-quantized"},
                                {"quantization_status", "compressed"},
                                {"config_groups", {{"group_0", group}}},
                                {"ignore", dense_linears},
                                {"kv_cache_scheme", nullptr},
                                {"sparsity_config", nlohmann::ordered_json::object()},
                                {"global_compression_ratio", nullptr}};
  } else {
    j["quantization_config"] = {{"quant_method", "gptq"},   {"bits", 4},
                                {"group_size", group_size}, {"sym", false},
                                {"desc_act", false},        {"static_groups", false},
                                {"true_sequential", true},  {"damp_percent", 0.01},
                                {"checkpoint_format", o.gptq_format == "v1" ? "gptq" : "gptq_v2"},
                                {"lm_head", lm_head}};
  }
  return j;
}

}  // namespace

namespace {

int export_folder(const ExportOptions& o, const std::string& format_reason);

}  // namespace

// --gptq-format auto: v1 (what every GPTQ reader takes) unless a zero point 0 shows up, then v2
// from the start (the v1 attempt's temporary folder is discarded).
int run_tl_export(const ExportOptions& o) {
  if (o.gptq_format != "auto" && o.gptq_format != "v1" && o.gptq_format != "v2")
    throw Error("unknown --gptq-format '" + o.gptq_format + "' (auto, v1, v2)");
  if (o.gptq_format != "auto" || o.format != "gptq") return export_folder(o, "");
  ExportOptions v1 = o, v2 = o;
  v1.gptq_format = "v1";
  v2.gptq_format = "v2";
  try {
    return export_folder(v1, "--gptq-format auto: every zero point is 1..15");
  } catch (const V1ZeroPoint& e) {
    const std::string why = "--gptq-format auto: " + e.where + " has zero point 0, which v1 (stored z - 1) cannot hold: GPTQ v2";
    if (!o.quiet) std::fprintf(stderr, "%s: %s (checkpoint_format gptq_v2)\n", kTool, why.c_str());
    return export_folder(v2, why);
  }
}

namespace {

int export_folder(const ExportOptions& o, const std::string& format_reason) {
  if (o.input.empty()) throw Error("missing INPUT");
  if (o.output.empty()) throw Error("missing -o OUT_DIR");
  if (o.format != "gptq" && o.format != "compressed-tensors")
    throw Error("unknown --format '" + o.format + "' (gptq, compressed-tensors)");
  if (o.max_shard_bytes < (1u << 20)) throw Error("--max-shard-bytes below 1 MiB");
  if (fs::exists(fs::symlink_status(o.output))) throw Error("exists; tl-export writes a new folder", o.output);
  if (!o.from.empty() && !is_directory(o.from)) throw Error("--from is not a folder", o.from);
  ExportFormat fmt;
  fmt.ct = o.format == "compressed-tensors";
  fmt.gptq_v1 = !fmt.ct && o.gptq_format == "v1";
  fmt.label = fmt.ct ? "compressed-tensors" : "GPTQ";

  const TinyloopReader in(o.input);
  if (!in.has_config()) throw Error("no model config: tl-export writes whole models", o.input);
  const ModelConfig c = in.config();
  if (c.n_loop > 0)
    throw Error("a looped model (n_loop = " + std::to_string(c.n_loop) + "): a Hugging Face Llama has no shared blocks",
                o.input);
  const std::vector<std::string> quant = in.quant_names(), dense = in.dense_names();
  if (quant.empty()) throw Error(std::string("no quantized weight: nothing to export as ") + fmt.label, o.input);
  // One group size for the folder (quantization_config holds one): that of the grouped weights
  // (group size < K); a weight with one group per column fits it where its K is that group size
  // (one group either way), and every weight is per column when the config says -1.
  int64_t stored_gs = -1;
  std::string first;
  for (const std::string& n : quant) {
    const EntryInfo e = in.info(n);
    if (linear_parts(n, c).empty()) throw Error("not a linear of a Llama-family model: no HF name for it", o.input, n);
    const int64_t K = e.shape.size() == 2 ? e.shape[0] : 0;
    if (e.group_size == K) continue;
    if (stored_gs == -1) stored_gs = e.group_size, first = n;
    else if (e.group_size != stored_gs)
      throw Error("group size " + std::to_string(e.group_size) + " where " + first + " has " + std::to_string(stored_gs) +
                      ": a " + std::string(fmt.label) + " config holds one group size",
                  o.input, n);
  }
  for (const std::string& n : quant) {
    const EntryInfo e = in.info(n);
    const int64_t K = e.shape.size() == 2 ? e.shape[0] : 0;
    if (e.group_size == K && stored_gs != -1 && K != stored_gs)
      throw Error("one group per column (K = " + std::to_string(K) + ") where " + first + " has groups of " +
                      std::to_string(stored_gs) + ": a " + std::string(fmt.label) + " config holds one group size",
                  o.input, n);
  }
  const bool lm_head = in.has_quant("head");
  // compressed-tensors' group strategy needs groups that tile K (its loaders take in_features =
  // groups * group_size).
  if (fmt.ct && stored_gs != -1)
    for (const std::string& n : quant) {
      const EntryInfo e = in.info(n);
      if (e.shape.size() == 2 && e.group_size != e.shape[0] && e.shape[0] % stored_gs != 0)
        throw Error("K = " + std::to_string(e.shape[0]) + " is not a multiple of the group size " +
                        std::to_string(stored_gs) + " (a ragged last group): compressed-tensors' group strategy "
                        "cannot hold it",
                    o.input, n);
    }
  // The HF modules of dense linears: compressed-tensors' "ignore" list.
  std::vector<std::string> dense_linears;
  for (const std::string& n : dense)
    if (is_tinyloop_linear_name(n))
      for (const HfSource& p : tinyloop_to_hf_names(n, c)) dense_linears.push_back(p.hf.substr(0, p.hf.size() - 7));

  // The plan, from metadata: every shape check before a byte is read or written.
  ExportPlan plan;
  plan.entries = quant;
  plan.quantized = quant.size();
  plan.entries.insert(plan.entries.end(), dense.begin(), dense.end());
  for (size_t ei = 0; ei < plan.entries.size(); ++ei) {
    const std::string& n = plan.entries[ei];
    const EntryInfo e = in.info(n);
    auto add = [&](SafetensorsSpec s) { plan.tensors.push_back({std::move(s), ei}); };
    if (ei < plan.quantized) {
      const int64_t K = e.shape.at(0);
      for (const HfPart& part : linear_parts(n, c))
        for (SafetensorsSpec& s : part_specs(fmt, part, K, group_count(K, e.group_size), o.input, n)) add(std::move(s));
      continue;
    }
    const DenseOut d = dense_out(n, c, o.input);
    for (const HfSource& p : d.parts) add({p.hf, e.dtype, d.sliced ? slice_shape(e.shape, p.n1 - p.n0, d.linear) : e.shape});
  }
  plan_shards(plan, o.max_shard_bytes);

  TempDir tmp(o.output);
  ZeroStats zs;
  size_t hf_layers = 0;
  Progress progress(kTool, quant.size(), 0, o.quiet);
  progress.set_sparse(true);  // without a terminal: a line every ~10 % or ~10 s
  // One entry's tensors at a time: made when the first of them is due, by name.
  size_t cached = SIZE_MAX;
  std::map<std::string, Tensor> made;
  auto make = [&](size_t ei) {
    made.clear();
    const std::string& n = plan.entries[ei];
    if (ei < plan.quantized) {
      const QuantWeight w = in.read_quant(n, /*with_marlin=*/false);
      if (w.bits != 4)
        throw Error("bits = " + std::to_string(w.bits) + ": " + fmt.label + " export writes 4-bit weights", o.input, n);
      for (const HfPart& part : linear_parts(n, c)) {
        const PartCodes codes = integer_part(w, part, fmt, o.input, &zs);
        for (Tensor& t : fmt.ct ? ct_tensors(codes, part) : gptq_tensors(codes, part, fmt.gptq_v1)) {
          std::string name = t.name;
          made.emplace(std::move(name), std::move(t));
        }
        ++hf_layers;
      }
      progress.finished(n);
    } else {
      const Tensor t = in.read_dense(n);
      const DenseOut d = dense_out(n, c, o.input);
      for (const HfSource& p : d.parts) {
        if (d.sliced) {
          made.emplace(p.hf, column_slice(t, p.hf, p.n0, p.n1, d.linear));
        } else {
          Tensor copy = t;
          copy.name = p.hf;
          made.emplace(p.hf, std::move(copy));
        }
      }
    }
    cached = ei;
  };
  for (size_t si = 0; si < plan.shards.size(); ++si) {
    std::vector<SafetensorsSpec> specs;
    for (size_t ti : plan.shards[si]) specs.push_back(plan.tensors[ti].spec);
    write_safetensors_stream(tmp.path() + "/" + plan.shard_name(si), specs, {{"format", "pt"}},
                             [&](size_t k) -> const Tensor& {
                               const PlannedTensor& pt = plan.tensors[plan.shards[si][k]];
                               if (cached != pt.entry) make(pt.entry);
                               return made.at(pt.spec.name);
                             });
  }
  made.clear();
  progress.end();
  const size_t n_shards = plan.shards.size();
  if (n_shards > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", plan.total}}}, {"weight_map", nlohmann::ordered_json::object()}};
    for (size_t si = 0; si < n_shards; ++si)
      for (size_t ti : plan.shards[si]) index["weight_map"][plan.tensors[ti].spec.name] = plan.shard_name(si);
    AtomicOutput out(tmp.path() + "/model.safetensors.index.json", OutputSink::kStream);
    out.write_text([&](std::ostream& os) { os << index.dump(2) << "\n"; });
  }

  {
    AtomicOutput cfg(tmp.path() + "/config.json", OutputSink::kStream);
    const nlohmann::ordered_json j = export_config(o, c, stored_gs, lm_head, dense_linears);
    cfg.write_text([&](std::ostream& os) { os << j.dump(2) << "\n"; });
  }
  std::vector<std::string> copied;
  if (!o.from.empty())
    for (const char* f : kCopiedFiles) {
      const std::string src = o.from + "/" + f;
      if (!fs::is_regular_file(src)) continue;
      std::error_code ec;
      fs::copy_file(src, tmp.path() + "/" + f, ec);
      if (ec) throw Error("cannot copy: " + ec.message(), src);
      copied.push_back(f);
    }
  tmp.commit();

  char moved[200];
  std::snprintf(moved, sizeof moved, "%llu of %llu groups' zero moved to z * scale (max |dW| %.3g)",
                (unsigned long long)zs.moved, (unsigned long long)zs.groups, zs.max_dw);
  const std::string what = fmt.ct ? std::string("compressed-tensors pack-quantized")
                                  : "GPTQ " + o.gptq_format;
  if (!o.quiet)
    std::fprintf(stderr, "%s: wrote %s (%s, group size %lld, %zu quantized weights -> %zu HF layers%s, %zu shard(s), "
                         "%.1f MB); %s; copied %zu file(s) from --from\n",
                 kTool, o.output.c_str(), what.c_str(), (long long)stored_gs, quant.size(), hf_layers,
                 lm_head ? " incl. lm_head" : "", n_shards, double(plan.total) / 1e6, moved, copied.size());
  if (o.json) {
    nlohmann::json j = report_header(kTool, 2);
    j["input"] = o.input;
    j["output"] = o.output;
    j["format"] = o.format;
    if (!fmt.ct) j["checkpoint_format"] = fmt.gptq_v1 ? "gptq" : "gptq_v2";
    if (!format_reason.empty()) j["checkpoint_format_reason"] = format_reason;
    j["group_size"] = stored_gs;
    j["quantized_weights"] = quant.size();
    j["hf_layers"] = hf_layers;
    j["lm_head"] = lm_head;
    j["ignored_linears"] = dense_linears;
    j["shards"] = n_shards;
    j["bytes"] = plan.total;
    j["zero_points"] = {{"groups", zs.groups}, {"moved", zs.moved}, {"max_abs_dw", zs.max_dw}};
    j["copied"] = copied;
    std::cout << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

}  // namespace tl
