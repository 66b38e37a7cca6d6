// .tinyloop v1: an HDF5 file holding a model for the TinyLoop runtime. The schema is in
// docs/format.md; the short form:
//
//   /                 attrs format="tinyloop", format_version=1, producer, producer_version
//   /config           attrs: ModelConfig fields (architecture, d_model, n_heads, ...)
//   /tensors/<name>   dense tensors in their stored dtype; 2-D linear weights are [K, N]
//   /quant/<name>/    one quantized linear weight W[K, N]
//       attrs  bits, group_size (effective, == K for per-row), K, N, G, method, ...provenance
//       q      uint8 [K, ceil(N/2)]   two 4-bit codes per byte: low nibble = even n
//       scale  float16 [G, N]
//       zero   float16 [G, N]         W_hat[k, n] = q[k, n] * scale[g, n] + zero[g, n]
//       (frac4, sign_bit, ... optional runtime channels, carried through unchanged)
//       marlin/        attrs groupsize (-1 = per column), layout, K, N
//           B      int32 [K/16, 2N]   bit-identical to upstream marlin.Layer.pack
//           s      float16 [G, N]     permuted scales
//           delta  float16 [G, N]     zero + 8 * scale
//   A compact weight (marlin-pack --drop-native; attribute codes = "marlin") stores the codes
//   once: zero + marlin/{B, s}, no q, scale or delta. The reader rebuilds q and scale from the
//   section (the exact inverse of the packer) and delta from scale and zero (marlin_delta), so
//   every consumer sees the same QuantWeight as from the native form. A file holding a compact
//   weight has format_version 2. A file whose /config uses a family feature (RoPE scaling,
//   biases, q/k norms, a sliding window: ModelConfig::uses_family_features) has version 3, so
//   a reader that would drop the feature refuses the file instead. A weight whose N is not a
//   multiple of 128 (a vocabulary of 50257) has its section padded to marlin_padded_n(N)
//   columns: marlin/ attr N is that padded count, B / s / delta have it, the extra columns are
//   zero weights (codes 8, s 1, delta 0); a file holding a padded section has version 4.
//   This build reads 1 to 4.
//
// Every dataset is chunked with the Fletcher32 checksum filter. Readers check the version,
// dtypes and shapes and throw tl::Error naming the file, the dataset and what was expected.
// Writers write "<dir>/.<name>.tmp-<pid>-<n>" and rename it into place on commit(); an
// uncommitted writer removes its temporary file, so a failed run leaves no output behind.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/group_size.h"
#include "core/half.h"
#include "formats/model_config.h"
#include "formats/tensor.h"

namespace tl {

constexpr int kTinyloopFormatVersion = 1;         // written when every weight is native
constexpr int kTinyloopCompactFormatVersion = 2;  // written when some weight is compact
constexpr int kTinyloopFamilyFormatVersion = 3;   // written when the config uses family features
constexpr int kTinyloopPaddedFormatVersion = 4;   // written when some Marlin section is padded
constexpr const char* kMarlinLayoutTag = "ist-daslab-marlin-v1";

struct MarlinSection {
  int64_t groupsize = -1;               // Marlin's argument: -1 per column, else the group size
  std::string layout = kMarlinLayoutTag;
  // 0: the section has the weight's N columns. Else N was not a multiple of 128 and the section
  // has padded_n = marlin_padded_n(N) columns, N..padded_n-1 zero weights (codes 8, s = 1,
  // delta = 0: (q - 8) s + delta = 0); NP below is padded_n or N (docs/format.md).
  int64_t padded_n = 0;
  std::vector<int32_t> B;               // [K/16, 2 NP]
  std::vector<half_bits> s;             // [G, NP], Marlin-permuted
  std::vector<half_bits> delta;         // [G, NP], natural order
  int64_t columns(int64_t N) const { return padded_n > 0 ? padded_n : N; }
};

// The one padding rule: a section of a weight of N columns is not padded (padded_n 0), or N is
// not a multiple of 128 and padded_n = marlin_padded_n(N).
inline bool marlin_padding_ok(int64_t N, int64_t padded_n) {
  return padded_n == 0 || (N % kMarlinTileN != 0 && padded_n == marlin_padded_n(N));
}
// What a section of a weight of N columns has, for messages: "N = 256 (no padding)" or
// "256 (N = 200 padded to a multiple of 128)".
inline std::string marlin_padding_expected(int64_t N) {
  return N % kMarlinTileN == 0 ? "N = " + std::to_string(N) + " (no padding)"
                               : std::to_string(marlin_padded_n(N)) + " (N = " + std::to_string(N) +
                                     " padded to a multiple of 128)";
}

// How a packed weight's codes are stored: both forms (native q + scale, and the Marlin section),
// or the Marlin section only (compact: one copy of the codes, ~half the bytes).
enum class CodeStorage { kNative, kMarlinOnly };

struct QuantWeight {
  std::string name;
  int bits = 4;
  int64_t K = 0, N = 0;
  int64_t group_size = 0;               // effective group size along K; == K means per-row
  std::vector<uint8_t> q;               // [K, N], one code per byte in memory (0..15)
  std::vector<half_bits> scale, zero;   // [G, N]
  nlohmann::json provenance = nlohmann::json::object();  // method, damp, block_size, loss, ...
  std::optional<MarlinSection> marlin;

  int64_t groups() const { return group_count(K, group_size); }
  // Shape/range checks (codes in [0, 15], scale finite and > 0, zero finite); throws tl::Error.
  void validate(const std::string& file = "") const;
  // W_hat[k, n] = q * scale + zero in float32 (float16 scale/zero widened).
  std::vector<float> dequantize() const;
};

// Payload bytes of a [K, N] 4-bit weight with G groups as the writer stores it: native q (two
// codes per byte) + scale + zero, plus with a Marlin section B (4 bits per code), s and delta;
// compact: B + s + zero (one copy of the codes); a packed section has marlin_padded_n(N) columns
// (docs/format.md). The unit of every "bytes / bits per weight" in the tools' summaries
// (tl-inspect reports what HDF5 really stores, chunk padding included).
inline uint64_t quant_payload_bytes(int64_t K, int64_t N, int64_t G, bool packed, CodeStorage storage) {
  const uint64_t NP = uint64_t(marlin_padded_n(N));
  const uint64_t gn = uint64_t(G) * uint64_t(N) * sizeof(half_bits), b = uint64_t(K) * NP / 2;
  const uint64_t gnp = uint64_t(G) * NP * sizeof(half_bits);
  if (storage == CodeStorage::kMarlinOnly) return b + gnp + gn;
  return uint64_t(K) * uint64_t((N + 1) / 2) + 2 * gn + (packed ? b + 2 * gnp : 0);
}
inline double bits_per_weight(uint64_t bytes, double params) { return params > 0 ? double(bytes) * 8.0 / params : 0.0; }

// Metadata of one entry, read without loading its data (tl-inspect, planning).
struct EntryInfo {
  std::string name;
  bool quantized = false;
  DType dtype = DType::F32;             // dense only
  std::vector<int64_t> shape;           // dense: stored shape; quantized: {K, N}
  int64_t group_size = 0;               // quantized only
  bool has_marlin = false;
  bool compact = false;                 // codes only in the Marlin section (CodeStorage::kMarlinOnly)
  int64_t marlin_groupsize = 0;
  int64_t marlin_n = 0;                 // the section's columns: N, or N padded to a multiple of 128
  uint64_t stored_bytes = 0;            // payload bytes of the entry's datasets
  uint64_t marlin_bytes = 0;            // of which the Marlin section's (quantized, packed only)
  nlohmann::json attributes = nlohmann::json::object();
};

class TinyloopReader {
 public:
  explicit TinyloopReader(const std::string& path);  // throws tl::Error (bad file, version, ...)
  ~TinyloopReader();
  TinyloopReader(TinyloopReader&&) noexcept;
  TinyloopReader& operator=(TinyloopReader&&) noexcept;

  const std::string& path() const;
  nlohmann::json root_attributes() const;
  bool has_config() const;
  ModelConfig config() const;
  std::vector<std::string> dense_names() const;   // sorted
  std::vector<std::string> quant_names() const;   // sorted
  bool has_dense(const std::string& name) const;
  bool has_quant(const std::string& name) const;
  EntryInfo info(const std::string& name) const;
  Tensor read_dense(const std::string& name) const;
  QuantWeight read_quant(const std::string& name, bool with_marlin = true) const;
  // The checks read_quant makes before reading data -- layout attributes (bits, K, N,
  // group_size, G), the dtype and shape of q, scale, zero and the Marlin section -- from
  // metadata alone (marlin-pack runs them on weights it copies unread; with_marlin = false
  // leaves the Marlin section to the caller, as read_quant(name, false)). Throws tl::Error.
  void check_quant(const std::string& name, bool with_marlin = true) const;

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

class TinyloopWriter {
 public:
  // Creates the temporary file beside `path` (throws tl::Error if the folder is not writable).
  explicit TinyloopWriter(const std::string& path, const std::string& producer);
  ~TinyloopWriter();  // removes the temporary file unless commit() ran

  void write_config(const ModelConfig& config);
  void write_dense(const Tensor& t);
  // With its Marlin section if present; kMarlinOnly needs one (the compact form above).
  void write_quant(const QuantWeight& w, CodeStorage storage = CodeStorage::kNative);
  // Copies an entry (dense or quantized, every dataset and attribute, known or not) unchanged.
  void copy_entry(const TinyloopReader& src, const std::string& name);
  // Copies quantized weight w.name (as read from src) with its marlin/ group replaced by `m`,
  // in the given storage: unknown datasets and attributes travel unchanged; kMarlinOnly leaves
  // out q, scale and delta; kNative writes q and scale from `w` where src holds none (a compact
  // source).
  void copy_quant_with_marlin(const TinyloopReader& src, const QuantWeight& w, const MarlinSection& m,
                              CodeStorage storage);
  // Copies /config and the root attributes this writer does not set itself.
  void copy_config_and_attributes(const TinyloopReader& src);
  // Closes the file and renames it onto the target path.
  void commit();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// True when the first bytes of `path` are the HDF5 signature.
bool is_hdf5_file(const std::string& path);

}  // namespace tl
