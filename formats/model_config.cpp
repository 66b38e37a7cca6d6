#include "formats/model_config.h"

#include <cmath>

#include "core/checked.h"
#include "core/error.h"

namespace tl {

void ModelConfig::validate(const std::string& file) const {
  auto need = [&](bool ok, const char* field, const std::string& what) {
    if (!ok) throw Error("expected " + what, file, std::string("config.") + field);
  };
  need(!architecture.empty(), "architecture", "a non-empty architecture name");
  // Upper bounds first, so no product or sum below (nor a reader's) can overflow.
  auto at_most = [&](int64_t v, int64_t limit, const char* field) {
    need(v <= limit, field, std::string(field) + " <= " + std::to_string(limit) + ", got " + std::to_string(v));
  };
  at_most(d_model, kMaxDim, "d_model");
  at_most(n_heads, kMaxDim, "n_heads");
  at_most(n_kv_heads, kMaxDim, "n_kv_heads");
  at_most(d_head, kMaxDim, "d_head");
  at_most(ffn, kMaxDim, "ffn");
  at_most(vocab, kMaxDim, "vocab");
  at_most(n_pre, kMaxBlocks, "n_pre");
  at_most(n_loop, kMaxBlocks, "n_loop");
  at_most(loops, kMaxBlocks, "loops");
  at_most(max_seq, kMaxDim, "max_seq");
  need(d_model > 0, "d_model", "d_model > 0, got " + std::to_string(d_model));
  need(n_heads > 0, "n_heads", "n_heads > 0, got " + std::to_string(n_heads));
  need(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "n_kv_heads",
       "n_kv_heads > 0 dividing n_heads = " + std::to_string(n_heads) + ", got " + std::to_string(n_kv_heads));
  need(d_head > 0 && d_head % 2 == 0, "d_head", "an even d_head > 0 (RoPE rotates pairs), got " + std::to_string(d_head));
  need(ffn > 0, "ffn", "ffn > 0, got " + std::to_string(ffn));
  need(vocab > 0, "vocab", "vocab > 0, got " + std::to_string(vocab));
  need(n_pre >= 0, "n_pre", "n_pre >= 0, got " + std::to_string(n_pre));
  need(n_loop >= 0, "n_loop", "n_loop >= 0, got " + std::to_string(n_loop));
  need(loops >= 0, "loops", "loops >= 0, got " + std::to_string(loops));
  need(n_loop == 0 || loops > 0, "loops", "loops > 0 when n_loop > 0");
  need(n_pre + n_loop > 0, "n_pre", "at least one block (n_pre + n_loop > 0)");
  need(std::isfinite(norm_eps) && norm_eps > 0, "norm_eps", "a finite norm_eps > 0");
  need(std::isfinite(rope_theta) && rope_theta > 0, "rope_theta", "a finite rope_theta > 0");
  need(max_seq > 0, "max_seq", "max_seq > 0");
  need(rope_type == "default" || rope_type == "linear" || rope_type == "llama3", "rope_type",
       "rope_type default, linear or llama3, got \"" + rope_type + "\"");
  need(std::isfinite(rope_factor) && rope_factor > 0 && (rope_type != "default" || rope_factor == 1.0), "rope_factor",
       "a finite rope_factor > 0 (1 for rope_type default)");
  if (rope_type == "llama3") {
    need(std::isfinite(rope_low_freq_factor) && std::isfinite(rope_high_freq_factor) && rope_low_freq_factor > 0 &&
             rope_high_freq_factor > rope_low_freq_factor,
         "rope_high_freq_factor", "0 < rope_low_freq_factor < rope_high_freq_factor (llama3 RoPE)");
    at_most(rope_original_max_seq, kMaxDim, "rope_original_max_seq");
    need(rope_original_max_seq > 0, "rope_original_max_seq", "rope_original_max_seq > 0 (llama3 RoPE)");
  }
  at_most(sliding_window, kMaxDim, "sliding_window");
  need(sliding_window >= 0, "sliding_window", "sliding_window >= 0 (0: no window)");
  need(window_first_block >= 0, "window_first_block", "window_first_block >= 0");
  need(sliding_window == 0 || n_loop == 0, "sliding_window", "no sliding window in a model with loop blocks");
}

bool ModelConfig::uses_family_features() const {
  return rope_type != "default" || qkv_bias || out_bias || mlp_bias || qk_norm || sliding_window > 0;
}

void to_json(nlohmann::json& j, const ModelConfig& c) {
  j = nlohmann::json{{"architecture", c.architecture},
                     {"d_model", c.d_model},
                     {"n_heads", c.n_heads},
                     {"n_kv_heads", c.n_kv_heads},
                     {"d_head", c.d_head},
                     {"ffn", c.ffn},
                     {"vocab", c.vocab},
                     {"n_pre", c.n_pre},
                     {"n_loop", c.n_loop},
                     {"loops", c.loops},
                     {"norm_eps", c.norm_eps},
                     {"rope_theta", c.rope_theta},
                     {"max_seq", c.max_seq},
                     {"tie_embeddings", c.tie_embeddings},
                     {"rope_type", c.rope_type},
                     {"rope_factor", c.rope_factor},
                     {"rope_low_freq_factor", c.rope_low_freq_factor},
                     {"rope_high_freq_factor", c.rope_high_freq_factor},
                     {"rope_original_max_seq", c.rope_original_max_seq},
                     {"qkv_bias", c.qkv_bias},
                     {"out_bias", c.out_bias},
                     {"mlp_bias", c.mlp_bias},
                     {"qk_norm", c.qk_norm},
                     {"sliding_window", c.sliding_window},
                     {"window_first_block", c.window_first_block}};
}

template <class T>
static void field(const nlohmann::json& j, const char* key, T* out, bool required) {
  if (!j.contains(key)) {
    if (required) throw Error(std::string("missing field '") + key + "'", "", "config");
    return;
  }
  const nlohmann::json& v = j.at(key);
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) throw Error(std::string("field '") + key + "': expected a string", "", "config");
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean() && !v.is_number_integer())
      throw Error(std::string("field '") + key + "': expected a bool", "", "config");
    *out = v.is_boolean() ? v.get<bool>() : v.get<int64_t>() != 0;
    return;
  } else if constexpr (std::is_integral_v<T>) {
    int64_t iv = 0;
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
      throw Error(std::string("field '") + key + "': " + v.dump() + " is out of range", "", "config");
    if (!v.is_number_integer() && !(v.is_number_float() && exact_int64(v.get<double>(), &iv)))
      throw Error(std::string("field '") + key + "': expected an integer, got " + v.dump(), "", "config");
    *out = v.is_number_integer() ? T(v.get<int64_t>()) : T(iv);
    return;
  } else {
    if (!v.is_number()) throw Error(std::string("field '") + key + "': expected a number, got " + v.dump(), "", "config");
  }
  *out = v.get<T>();
}

void from_json(const nlohmann::json& j, ModelConfig& c) {
  if (!j.is_object()) throw Error("expected a JSON object", "", "config");
  ModelConfig d;  // defaults for the optional fields
  c = d;
  field(j, "architecture", &c.architecture, false);
  field(j, "d_model", &c.d_model, true);
  field(j, "n_heads", &c.n_heads, true);
  field(j, "n_kv_heads", &c.n_kv_heads, false);
  if (!j.contains("n_kv_heads")) c.n_kv_heads = c.n_heads;
  field(j, "d_head", &c.d_head, false);
  if (!j.contains("d_head") && c.n_heads > 0) c.d_head = c.d_model / c.n_heads;
  field(j, "ffn", &c.ffn, true);
  field(j, "vocab", &c.vocab, true);
  field(j, "n_pre", &c.n_pre, true);
  field(j, "n_loop", &c.n_loop, true);
  field(j, "loops", &c.loops, true);
  field(j, "norm_eps", &c.norm_eps, false);
  field(j, "rope_theta", &c.rope_theta, false);
  field(j, "max_seq", &c.max_seq, false);
  field(j, "tie_embeddings", &c.tie_embeddings, false);
  // The family features (format_version 3); absent in older files, which had none of them.
  field(j, "rope_type", &c.rope_type, false);
  field(j, "rope_factor", &c.rope_factor, false);
  field(j, "rope_low_freq_factor", &c.rope_low_freq_factor, false);
  field(j, "rope_high_freq_factor", &c.rope_high_freq_factor, false);
  field(j, "rope_original_max_seq", &c.rope_original_max_seq, false);
  field(j, "qkv_bias", &c.qkv_bias, false);
  field(j, "out_bias", &c.out_bias, false);
  field(j, "mlp_bias", &c.mlp_bias, false);
  field(j, "qk_norm", &c.qk_norm, false);
  field(j, "sliding_window", &c.sliding_window, false);
  field(j, "window_first_block", &c.window_first_block, false);
}

}  // namespace tl
