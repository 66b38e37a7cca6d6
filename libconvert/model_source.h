// One model, opened once: the one place a path becomes a model and the one reader of its weights.
//
//   ModelSource src(path);         // kind, config, entries -- checked before anything is read
//   src.read_block("pre.3")        // one block, each weight in the form the file stores it
//   src.read_linear("head")        // one weight
//
// Kinds of input (detect_input decides, for every tool):
//   .tinyloop file        HDF5 (formats/tinyloop_file.h): dense entries [K, N] in their stored
//                         dtype, quantized entries q / scale / zero (+ a Marlin section)
//   HF folder             config.json + safetensors, memory-mapped (checkpoint_import.h maps the
//                         names; linear weights are PyTorch's [N, K], q | k | v joined)
//   quantized folder      GPTQ, AWQ or compressed-tensors (quant_checkpoint.h): each quantized
//                         layer read as a TinyLoop quantized weight, q | k | v joined, Marlin-packed
//                         on the way in where the gate passes and with_marlin
// Opening checks the config, every entry's shape against it and strict consumption
// (model_entries.h): a model that would fail half way through a 70B run fails here.
//
// Reads never convert to float32 on the caller's behalf: a StoredLinear holds the stored bytes (a
// dense weight in its dtype and orientation, a quantized weight's codes and factors), so the GPU
// uploads what the file holds and converts there; to_float() gives the float32 [K, N] the CPU
// forward runs on (W_hat for a quantized weight, exactly what load_model_weights gives).
//
// Thread safety: reads of a .tinyloop use HDF5 (hdf5() == true): one thread at a time, and no
// other HDF5 use meanwhile. Reads of memory-mapped inputs may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/model_config.h"
#include "formats/tensor.h"
#include "formats/tinyloop_file.h"
#include "libconvert/model_entries.h"

namespace tl {

class CheckpointImport;

// What a path is, the one place it is decided (every tool asks here before opening anything).
enum class InputKind {
  kHdf5,               // an HDF5 file: a .tinyloop (or a calibration file, which tl-inspect reads)
  kHfFolder,           // a folder with config.json and safetensors weights
  kQuantFolder,        // a GPTQ / AWQ / compressed-tensors folder (quant_checkpoint.h)
  kSafetensorsFolder,  // a folder of safetensors shards without config.json
  kSafetensorsFile,    // a .safetensors file or a model.safetensors.index.json
};
// Throws tl::Error (one line naming the path: the system's reason, then "expected <what>") for
// a path that does not exist, an empty file, a FIFO or a device (never opened), and for a folder
// whose config.json is not a regular file.
InputKind detect_input(const std::string& path,
                       const std::string& what = "a model: a .tinyloop file, a model folder or a .safetensors file");

enum class ModelKind { kTinyloop, kHfFolder, kQuantFolder };
const char* model_kind_name(ModelKind k);  // "tinyloop", "hf-folder", "quantized-folder"

// One entry of the model as the source stores it (TinyLoop names, model_entries.h).
struct SourceEntry {
  std::string name;
  bool quantized = false;
  DType dtype = DType::F32;          // dense: the stored dtype
  std::vector<int64_t> shape;        // the TinyLoop shape ([K, N] for linear weights)
  int64_t group_size = 0;            // quantized: the effective group size
  int64_t marlin_n = 0;              // quantized: the Marlin section's columns (stored, or packed on the way in; 0: none)
};

// A linear weight in the form the file stores it.
struct StoredLinear {
  std::string name;
  int64_t K = 0, N = 0;
  std::shared_ptr<const QuantWeight> quant;  // quantized: codes, scale, zero (+ Marlin section)
  Tensor dense;                              // dense: the stored bytes, dtype and all
  bool transposed = false;                   // dense holds PyTorch's [N, K] (an HF input), else [K, N]
  std::vector<float> bias;                   // [N], or empty

  // The weight as float32 [K, N]: W_hat = q * scale + zero for a quantized weight, the stored
  // values widened (and transposed) for a dense one. Bit for bit what the loaders always gave.
  std::vector<float> to_float() const;
};

// One block of the schedule in stored form: norms (float32), the five linears.
struct StoredBlock {
  std::string prefix;                       // "pre.3", "loop.0"
  std::vector<float> attn_norm, mlp_norm;   // [D]
  std::vector<float> q_norm, k_norm;        // [dh] with qk_norm, else empty
  StoredLinear lin[kBlockLinears];          // kBlockLinearNames order
};

class ModelSource {
 public:
  // Opens and checks `path` (any ModelKind). with_marlin: quantized weights come with their Marlin
  // section (a .tinyloop's own; a quantized folder's packed on the way in where the gate passes).
  // Throws tl::Error naming the path and, where one is at fault, the entry.
  explicit ModelSource(const std::string& path, bool with_marlin = true);
  // A .tinyloop the caller has open already (tl-verify opens FILE once for every tier).
  ModelSource(std::shared_ptr<const TinyloopReader> reader, bool with_marlin);
  // A checkpoint the caller has imported already (gptq-quantize's input: a .tinyloop or an HF
  // folder), read through that import's open files rather than opening them again. `opened`
  // must outlive the source; its --only selection does not matter here (every entry is read).
  ModelSource(const CheckpointImport& opened, bool with_marlin);
  ~ModelSource();
  ModelSource(const ModelSource&) = delete;
  ModelSource& operator=(const ModelSource&) = delete;

  ModelKind kind() const;
  const std::string& path() const;
  const ModelConfig& config() const;
  const std::vector<SourceEntry>& entries() const;  // sorted by name
  const SourceEntry* entry(const std::string& name) const;  // null when absent
  int64_t quantized_count() const;
  bool hdf5() const;                            // reads go through HDF5 (see Thread safety)
  bool with_marlin() const;                    // quantized reads come with their Marlin section

  // float32 vector entries (norms, biases), checked finite and of the config's shape.
  std::vector<float> read_vector(const std::string& name) const;
  // The embedding [vocab, D] as stored (checked finite).
  Tensor read_embedding() const;
  // One linear weight (checked against the config's shape, finite), its bias with it.
  StoredLinear read_linear(const std::string& name) const;
  StoredBlock read_block(const std::string& prefix) const;
  // The head: stored, or with a tied embedding the embedding itself (dense, transposed: the
  // embedding [vocab, D] is the head's [N, K]).
  StoredLinear read_head() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The embedding rows of `tokens` as float32 [rows, D] (throws tl::Error on an id outside the
// vocabulary): what embed_tokens computes from the model's float32 embedding.
std::vector<float> embedding_rows(const Tensor& embed, const int32_t* tokens, int64_t rows);

}  // namespace tl
