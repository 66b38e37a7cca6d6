// The weights of one TinyLoop model in float32, as the CPU forward (model_forward.h) and the GPU
// runner (libgpu/model_gpu.h) consume them.
//
// Entry names and shapes, and strict consumption: model_entries.h. Where the weights come from
// (a .tinyloop, an HF folder, a quantized checkpoint folder): model_source.h, which reads them
// block by block; load_model_weights below holds a whole model (small models, tests).
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
#include "libconvert/model_entries.h"
#include "libconvert/model_source.h"
#include "libconvert/minmax_quantizer.h"

namespace tl {

struct LinearWeight {
  std::string name;                          // full entry name, e.g. "pre.0.attn_qkv"
  int64_t K = 0, N = 0;
  std::vector<float> W;                      // [K, N] row-major; W_hat when quantized
  std::shared_ptr<const QuantWeight> quant;  // the stored quantized form, or null (dense)
  std::vector<float> bias;                   // [N], added after the product; empty: none
};

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

// A whole model in float32 (quantized weights dequantized, each keeping its QuantWeight and, with
// with_marlin, its Marlin section): every block of the source read and widened. For small models
// and tests; the tools stream block by block (model_source.h). Throws tl::Error naming the file
// and entry.
ModelWeights load_model_weights(const ModelSource& src);
ModelWeights load_model_weights(const std::string& path, bool with_marlin = true);
// One stored weight / block widened to float32 (StoredLinear::to_float), the quantized form kept.
LinearWeight to_linear_weight(const StoredLinear& s);
BlockWeights to_block_weights(const StoredBlock& s);

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
