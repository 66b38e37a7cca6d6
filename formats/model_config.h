// TinyLoop model hyper-parameters (the /config group of a .tinyloop file). A plain HF
// Llama-family checkpoint (llama, mistral, qwen2, qwen3) is the case n_loop == 0; the fields
// after tie_embeddings are the family features (docs/model.md "Families"), each computed as
// transformers computes it: RoPE scaling, linear biases, per-head q/k norms, a sliding window.
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

  // RoPE frequencies (transformers' rope_type): "default" theta^(-2i/dh); "linear" those / factor;
  // "llama3" (Llama 3.1+) low frequencies / factor, high ones kept, a smooth blend between,
  // set by low/high_freq_factor and the original context length.
  std::string rope_type = "default";
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_seq = 0;
  // Biases (float, added after the product): q|k|v (Qwen2, Llama attention_bias), o (Llama
  // attention_bias), gate / up / down (Llama mlp_bias). Entries "<block>.<linear>.bias" [N].
  bool qkv_bias = false;
  bool out_bias = false;
  bool mlp_bias = false;
  // Qwen3: RMSNorm over each q and k head (gains "<block>.q_norm" / "<block>.k_norm" [dh],
  // epsilon norm_eps) before RoPE.
  bool qk_norm = false;
  // Sliding-window attention: a query at position i sees keys j with i - W < j <= i, in the
  // distinct blocks with index >= window_first_block (Mistral: 0; Qwen2: max_window_layers).
  // 0: every block attends to the whole causal prefix.
  int64_t sliding_window = 0;
  int64_t window_first_block = 0;

  // The attention window of distinct block `index` (loop blocks never have one); 0 = none.
  int64_t window_of_block(bool loop, int64_t index) const {
    return !loop && sliding_window > 0 && index >= window_first_block ? sliding_window : 0;
  }
  // True when the model uses a feature format_version 3 introduced (any of the fields above
  // away from its default): readers older than it must refuse the file, not drop the feature.
  bool uses_family_features() const;

  // Throws tl::Error when a field is missing or inconsistent (names the field).
  void validate(const std::string& file = "") const;
};

void to_json(nlohmann::json& j, const ModelConfig& c);
void from_json(const nlohmann::json& j, ModelConfig& c);

}  // namespace tl
