// The weights of one TinyLoop model in float32, as the CPU forward (model_forward.h) and the GPU
// runner (libgpu/model_gpu.h) consume them.
//
// Entry names in a .tinyloop file (checkpoint_import writes them; DESIGN.md "The model"):
//   embed [vocab, D]                    token embedding (a lookup table, not a linear weight)
//   pre.<i>.attn_norm [D]               i < n_pre, distinct blocks
//   pre.<i>.attn_qkv  [D, (H + 2 Hkv) dh]   q | k | v concatenated along N
//   pre.<i>.attn_out  [H dh, D]
//   pre.<i>.mlp_norm  [D]
//   pre.<i>.mlp_gate, pre.<i>.mlp_up [D, FFN];  pre.<i>.mlp_down [FFN, D]
//   loop.<j>.*                          j < n_loop, the shared blocks (same names)
//   final_norm [D]
//   head [D, vocab]                     absent with tie_embeddings: head = embed^T
// and, where the config enables the feature (ModelConfig, docs/format.md "Family entries"):
//   <block>.attn_qkv.bias [(H + 2 Hkv) dh]  qkv_bias (q | k | v, like the weight)
//   <block>.attn_out.bias [D]               out_bias
//   <block>.mlp_{gate,up}.bias [FFN], <block>.mlp_down.bias [D]   mlp_bias
//   <block>.q_norm, <block>.k_norm [dh]     qk_norm (per-head RMSNorm gains)
// Strict consumption: a model input holding any other entry is refused, naming it
// (check_model_entry), and so is one that lacks an entry its config needs.
// Linear weights are [K, N] (Y = X W). A linear weight may be dense (/tensors, any float dtype)
// or quantized (/quant): the loader dequantizes W_hat = q * scale + zero and keeps the
// QuantWeight (with its Marlin section) so the GPU runner can upload the packed form.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/model_config.h"
#include "formats/tinyloop_file.h"
#include "libconvert/minmax_quantizer.h"

namespace tl {

struct LinearWeight {
  std::string name;                          // full entry name, e.g. "pre.0.attn_qkv"
  int64_t K = 0, N = 0;
  std::vector<float> W;                      // [K, N] row-major; W_hat when quantized
  std::shared_ptr<const QuantWeight> quant;  // the stored quantized form, or null (dense)
  std::vector<float> bias;                   // [N], added after the product; empty: none
};

// The five linear weights of a block, in execution order, by their short names.
constexpr const char* kBlockLinearNames[] = {"attn_qkv", "attn_out", "mlp_gate", "mlp_up", "mlp_down"};

struct BlockWeights {
  std::string prefix;                        // "pre.0" or "loop.0"
  std::vector<float> attn_norm, mlp_norm;    // [D]
  std::vector<float> q_norm, k_norm;         // [dh] with qk_norm, else empty
  LinearWeight attn_qkv, attn_out, mlp_gate, mlp_up, mlp_down;

  LinearWeight* linear(const std::string& short_name);  // null for an unknown name
  const LinearWeight* linear(const std::string& short_name) const;
};

struct ModelWeights {
  ModelConfig config;
  std::vector<float> embed;                  // [vocab, D]
  std::vector<BlockWeights> pre, loop;       // n_pre, n_loop
  std::vector<float> final_norm;             // [D]
  LinearWeight head;                         // [D, vocab]

  // Every linear weight by full name ("pre.1.mlp_up", "head"); null when absent.
  LinearWeight* find_linear(const std::string& name);
  const LinearWeight* find_linear(const std::string& name) const;
  // Names of every linear weight, in execution order (blocks, then head).
  std::vector<std::string> linear_names() const;
  // Throws tl::Error (file, entry, what was expected) on any shape that disagrees with config.
  void validate(const std::string& file = "") const;
};

std::string block_prefix(bool loop, int64_t index);  // "pre.<i>" / "loop.<j>"
// The sliding attention window of the block named `prefix` (ModelConfig::window_of_block).
int64_t block_window(const ModelConfig& c, const std::string& prefix);

// The shape `config` gives the model entry `name` (embed [vocab, D], norms [D], linears
// [K, N], biases [N], q/k norms [dh]); empty for a name that is not a TinyLoop model entry. A
// block index beyond n_pre / n_loop is tl::Error. The one place entry shapes are derived.
std::vector<int64_t> expected_entry_shape(const ModelConfig& config, const std::string& name);
// Strict consumption, the one place it is decided: throws tl::Error (file, the entry, what the
// tools do not model) unless `name` is an entry the model of `config` uses (a bias or q/k norm
// only where the config enables it).
void check_model_entry(const ModelConfig& config, const std::string& name, const std::string& file);

// Loads config + every tensor; quantized weights are dequantized (keeping the QuantWeight with
// its Marlin section when with_marlin). Throws tl::Error naming the file and entry.
ModelWeights load_model_weights(const TinyloopReader& reader, bool with_marlin = true);
ModelWeights load_model_weights(const std::string& tinyloop_path, bool with_marlin = true);
// A .tinyloop (by its HDF5 signature), a quantized checkpoint folder (GPTQ, AWQ, compressed-tensors:
// quant_checkpoint.h; its quantized layers as TinyLoop quantized weights, q | k | v joined, each
// Marlin-packed where the gate passes and with_marlin) or anything else gptq-quantize imports (an
// HF Llama-family folder, a TinyLoop HF-style folder: every linear weight dense).
ModelWeights load_model_weights_any(const std::string& path, bool with_marlin = true);

// The same inputs as load_model_weights_any, read piece by piece (GPU calibration streams a
// 7B model block by block: host memory holds one block, never the model). Every linear weight
// arrives dense (a quantized .tinyloop entry as its W_hat, without the Marlin section).
// Reads of an HF / safetensors input may run on another thread than the caller's other work
// (memory maps); a .tinyloop input uses HDF5 (hdf5() == true): serialize with other HDF5 use.
class ModelStream {
 public:
  explicit ModelStream(const std::string& path);  // throws tl::Error (no config, bad file)
  ~ModelStream();
  ModelStream(const ModelStream&) = delete;
  ModelStream& operator=(const ModelStream&) = delete;

  const ModelConfig& config() const;
  bool hdf5() const;
  std::vector<float> embed() const;                   // [vocab, D]
  BlockWeights block(bool loop, int64_t index) const; // shapes checked against the config
  std::vector<float> final_norm() const;              // [D]
  LinearWeight head() const;                          // stored, or embed^T when tied

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// RTN-quantizes one linear weight in place (minmax_quantizer.h; group_size as rtn_quantize takes
// it): quant holds the stored form, W becomes its W_hat. For tests and small tools.
void rtn_quantize_linear(LinearWeight& l, int64_t group_size, ZeroMode mode = ZeroMode::kInt);

// A model with seeded N(0, std) weights (norm gains near 1), for tests and cross-checks.
// std defaults to 1/sqrt(fan-in) per linear so activations stay O(1) through deep stacks.
ModelWeights random_model_weights(const ModelConfig& config, uint64_t seed);

// Writes the model as a dense .tinyloop (float dtype `dtype` for every tensor), atomically.
void write_model_tinyloop(const ModelWeights& w, const std::string& path, DType dtype,
                          const std::string& producer = "tinyloop-tools");

}  // namespace tl
