// HF config.json -> ModelConfig for the Llama family (model_type llama, mistral, qwen2):
// hidden_size, num_attention_heads, num_key_value_heads (GQA), intermediate_size,
// num_hidden_layers (-> n_pre, n_loop = 0), vocab_size, rms_norm_eps, rope_theta, head_dim,
// tie_word_embeddings. Anything else is a tl::Error naming the model_type.
// A TinyLoop config.json (model_type "tinyloop", with n_pre / n_loop / loops) is read too.
#pragma once

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/model_config.h"

namespace tl {

ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& file = "config.json");
// The top-level keys accepted without being read: they never change what the forward computes
// (ids, dtype, generation defaults, ...; docs/model.md "Config keys"). Every other key is read
// or refused by name.
const std::set<std::string>& inert_config_keys();
ModelConfig read_hf_config(const std::string& path);  // path to config.json
nlohmann::json model_config_to_hf(const ModelConfig& c);  // for exports and tests
// quantization_config's quant_method: "gptq" when the key is absent or not a string (AutoGPTQ's
// configs predate the key); the one reading of it (hf_config, libconvert/quant_checkpoint.h).
std::string quant_method_of(const nlohmann::json& quantization_config);

}  // namespace tl
