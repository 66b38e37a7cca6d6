// TinyLoop model hyper-parameters (the /config group of a .tinyloop file). A plain HF
// Llama-family checkpoint is the case n_loop == 0.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace tl {

// Bounds validate() enforces: every extent of a real model is far below them (vocab 256k, FFN
// 50k, d_model 16k, 126 layers), and products of two of them fit in int64.
constexpr int64_t kMaxDim = int64_t(1) << 24;
constexpr int64_t kMaxBlocks = int64_t(1) << 16;

struct ModelConfig {
  std::string architecture = "tinyloop";  // "tinyloop" or the HF model_type ("llama", ...)
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t d_head = 0;       // d_model / n_heads unless the checkpoint says otherwise
  int64_t ffn = 0;
  int64_t vocab = 0;
  int64_t n_pre = 0;        // distinct blocks before the loop
  int64_t n_loop = 0;       // shared blocks applied `loops` times
  int64_t loops = 0;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t max_seq = 2048;
  bool tie_embeddings = false;

  // Throws tl::Error when a field is missing or inconsistent (names the field).
  void validate(const std::string& file = "") const;
};

void to_json(nlohmann::json& j, const ModelConfig& c);
void from_json(const nlohmann::json& j, ModelConfig& c);

}  // namespace tl
