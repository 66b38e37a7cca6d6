// 4-bit checkpoint folders people download, read as TinyLoop quantized weights: GPTQ (AutoGPTQ /
// GPTQModel, gptq_checkpoint.h), AWQ (AutoAWQ GEMM) and compressed-tensors pack-quantized
// (llm-compressor, vLLM) (checkpoint_layers.h). tl-verify's e2e tier scores such a folder as a
// model (load_model_weights), marlin-pack converts it to a .tinyloop, tl-inspect lists it.
//
// A folder is safetensors (single or sharded) + config.json whose "quantization_config" names
// the format (or, for GPTQ, a quantize_config.json):
//   quant_method "gptq"                 bits 4; see gptq_checkpoint.h
//   quant_method "awq"                  bits 4, version "gemm", zero_point, group_size (-1 = one
//                                       group per column); modules_to_not_convert stay dense
//   quant_method "compressed-tensors"   format "pack-quantized" (top level or per config group);
//                                       every config group's weights: num_bits 4, type "int",
//                                       strategy "group" (group_size) or "channel", dynamic
//                                       false, the same settings in every group;
//                                       input_activations / output_activations null (W4A16);
//                                       quantization_status "compressed"; no kv_cache_scheme,
//                                       sparsity_config or transform_config (rotations): refused
//                                       by name, since the weights alone would not be the model
// Anything else is refused by name (another quant_method, bits, AWQ's GEMV / Marlin / ExLlama
// versions, compressed-tensors' float / marlin-24 / naive formats, act-order whose groups are not
// contiguous row blocks). A quantized layer is one with the format's code tensor (".qweight",
// ".weight_packed"); every other tensor is dense and keeps its name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/model_config.h"
#include "formats/tensor.h"
#include "formats/tinyloop_file.h"
#include "libconvert/gptq_checkpoint.h"

namespace tl {

enum class QuantFormat { kGptq, kAwq, kCompressedTensors };
const char* quant_format_name(QuantFormat f);  // "gptq", "awq", "compressed-tensors"

struct QuantCheckpointConfig {
  QuantFormat format = QuantFormat::kGptq;
  int64_t group_size = 128;   // as stored; -1 = one group per output column
  bool sym = false;           // no zero points stored (z = 8)
  GptqCheckpointConfig gptq;  // format == kGptq: the GPTQ settings
  std::string source;         // the file the settings came from
};

// The format of a quantized checkpoint folder, or false when `dir` is not one (no
// quantize_config.json, no config.json with a quantization_config naming a known quant_method).
bool quant_checkpoint_format(const std::string& dir, QuantFormat* format = nullptr);
inline bool is_quant_checkpoint(const std::string& dir) { return quant_checkpoint_format(dir); }
// Reads and checks the settings (tl::Error naming the file and the key).
QuantCheckpointConfig read_quant_checkpoint_config(const std::string& dir);
QuantCheckpointConfig awq_config_from_json(const nlohmann::json& q, const std::string& file);
QuantCheckpointConfig ct_config_from_json(const nlohmann::json& q, const std::string& file);

// A folder opened for streaming: tensors are read one layer at a time.
class QuantCheckpoint {
 public:
  explicit QuantCheckpoint(const std::string& dir);  // throws tl::Error
  ~QuantCheckpoint();
  QuantCheckpoint(QuantCheckpoint&&) noexcept;

  const std::string& dir() const;
  const QuantCheckpointConfig& config() const;
  // The model's hyper-parameters when config.json describes a supported architecture.
  bool has_model_config() const;
  const ModelConfig& model_config() const;
  std::vector<std::string> quant_names() const;  // layer prefixes <p> (sorted)
  // Everything that is not a quantized layer's tensor (sorted). Biases keep their names.
  std::vector<std::string> dense_names() const;
  QuantWeight read_quant(const std::string& name) const;
  // A dense tensor as stored, except 2-D Linear weights of the Llama family (names ending in
  // "_proj.weight", and "lm_head.weight"), which are transposed to TinyLoop's [K, N].
  Tensor read_dense(const std::string& name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tl
