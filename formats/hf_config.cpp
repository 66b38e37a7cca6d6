// HF config.json -> ModelConfig. Strict consumption: every key is either read into the config
// (the family's math), listed in kInertKeys (does not change the forward: token ids, dtype,
// generation defaults, ...), or refused by name. A key this file does not know is refused too:
// it may change the math (transformers adds such keys with new families), and a verifier that
// silently computes another model than transformers does is worse than one that says no.
#include "formats/hf_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "core/error.h"
#include "formats/file_check.h"

namespace tl {

namespace {

const char* const kFamilies = "llama, mistral, qwen2, qwen3 or tinyloop";

// Keys that never change what the forward computes (docs/model.md "Config keys"): ids, dtype,
// provenance, PretrainedConfig's generation and task defaults, dropout (inference has none),
// Llama's pretraining_tp (a sliced matmul, the same product), TinyLoop's tokenizer tag.
const std::set<std::string> kInertKeys = {
    "_name_or_path", "architectures", "auto_map", "transformers_version", "torch_dtype", "dtype",
    "use_cache", "initializer_range", "attention_dropout", "pretraining_tp", "bos_token_id", "eos_token_id",
    "pad_token_id", "sep_token_id", "decoder_start_token_id", "tokenizer_class", "tokenizer", "id2label",
    "label2id", "problem_type", "finetuning_task", "task_specific_params", "prefix", "return_dict",
    "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16", "tf_legacy_loss",
    "pruned_heads", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "add_cross_attention",
    "cross_attention_hidden_size", "tie_encoder_decoder", "max_length", "min_length", "do_sample",
    "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p",
    "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "_attn_implementation_autoset", "attn_implementation"};

// Reads keys of one JSON object and remembers which were read, so what is left can be refused.
class Keys {
 public:
  Keys(const nlohmann::json& j, std::string file, std::string where = "")
      : j_(j), file_(std::move(file)), where_(std::move(where)) {}

  bool has(const char* key) {
    used_.insert(key);
    return j_.contains(key) && !j_[key].is_null();
  }
  bool present(const char* key) const { return j_.contains(key); }  // null counts
  const nlohmann::json& at(const char* key) {
    used_.insert(key);
    return j_.at(key);
  }
  int64_t integer(const char* key, const int64_t* fallback = nullptr) {
    if (!has(key)) {
      if (fallback) return *fallback;
      throw Error("missing key (expected an integer)", file_, item(key));
    }
    const nlohmann::json& v = j_[key];
    const bool ok = v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(kMaxDim)) &&
                    v.get<int64_t>() <= kMaxDim && v.get<int64_t>() >= -kMaxDim;
    if (!ok) throw Error("expected an integer of at most " + std::to_string(kMaxDim) + ", got " + v.dump(), file_, item(key));
    return v.get<int64_t>();
  }
  double number(const char* key, double fallback) {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_[key];
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      throw Error("expected a finite number, got " + v.dump(), file_, item(key));
    return v.get<double>();
  }
  bool boolean(const char* key, bool fallback) {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) throw Error("expected true or false, got " + j_[key].dump(), file_, item(key));
    return j_[key].get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) {
    if (!has(key)) return fallback;
    if (!j_[key].is_string()) throw Error("expected a string, got " + j_[key].dump(), file_, item(key));
    return j_[key].get<std::string>();
  }
  // Every key neither read nor inert is refused, by name and value.
  void refuse_unread(const std::set<std::string>& inert) const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (used_.count(it.key()) || inert.count(it.key())) continue;
      std::string v = it.value().dump();
      if (v.size() > 60) v = v.substr(0, 57) + "...";
      throw Error("config key not modelled by tinyloop-tools (= " + v +
                      "); it may change the model's math, so the checkpoint is refused rather than approximated "
                      "(docs/model.md lists the keys read and the keys known to be inert)",
                  file_, item(it.key()));
    }
  }
  std::string item(const std::string& key) const { return where_.empty() ? key : where_ + "." + key; }
  const std::string& file() const { return file_; }

 private:
  const nlohmann::json& j_;
  std::string file_, where_;
  std::set<std::string> used_;
};

// rope_scaling (transformers 4) or rope_parameters (transformers 5: also holds rope_theta).
void read_rope(Keys& top, const char* key, ModelConfig& c) {
  const nlohmann::json& r = top.at(key);
  if (!r.is_object()) throw Error("expected an object or null, got " + r.dump(), top.file(), key);
  Keys k(r, top.file(), key);
  std::string type = k.string("rope_type", "");
  const std::string legacy = k.string("type", "");
  if (type.empty()) type = legacy.empty() ? "default" : legacy;
  c.rope_theta = k.number("rope_theta", c.rope_theta);
  if (k.has("partial_rotary_factor") && k.number("partial_rotary_factor", 1.0) != 1.0)
    throw Error("partial RoPE (a rotary factor below 1) is not modelled", top.file(), k.item("partial_rotary_factor"));
  if (type == "default") {
    // plain RoPE; nothing else may be set
  } else if (type == "linear" || type == "llama3") {
    c.rope_type = type;
    if (!k.has("factor")) throw Error("missing key (expected the scaling factor)", top.file(), k.item("factor"));
    c.rope_factor = k.number("factor", 1.0);
    if (type == "llama3") {
      c.rope_low_freq_factor = k.number("low_freq_factor", 1.0);
      c.rope_high_freq_factor = k.number("high_freq_factor", 4.0);
      c.rope_original_max_seq = k.integer("original_max_position_embeddings");
    }
  } else {
    throw Error("rope_type \"" + type + "\" is not modelled (supported: default, linear, llama3)", top.file(),
                k.item("rope_type"));
  }
  k.refuse_unread({});
}

// Sliding-window keys: Mistral (sliding_window on every layer), Qwen2 / Qwen3 (only with
// use_sliding_window, only layers >= max_window_layers), and transformers 5's layer_types, which
// must say the same thing (first the full layers, then the windowed ones).
void read_window(Keys& k, const std::string& type, ModelConfig& c) {
  const bool qwen = type == "qwen2" || type == "qwen3";
  if (type == "llama" || type == "tinyloop") return;  // no window keys: refused if present
  // Absent (not null): the family default of transformers' config classes, 4096.
  const int64_t dflt_window = 4096;
  int64_t window = k.has("sliding_window") ? k.integer("sliding_window") : 0;
  if (!k.present("sliding_window")) window = dflt_window;
  if (window < 0) throw Error("expected a positive window or null", k.file(), "sliding_window");
  int64_t first = 0;
  if (qwen) {
    if (!k.boolean("use_sliding_window", false)) window = 0;
    const int64_t dflt = 28;  // transformers' default for both
    first = k.integer("max_window_layers", &dflt);
  }
  c.sliding_window = window;
  c.window_first_block = window > 0 ? std::min(first, c.n_pre) : 0;
  if (c.window_first_block >= c.n_pre) c.sliding_window = 0, c.window_first_block = 0;
  if (k.has("layer_types")) {
    const nlohmann::json& lt = k.at("layer_types");
    if (!lt.is_array() || int64_t(lt.size()) != c.n_pre)
      throw Error("expected a list of num_hidden_layers = " + std::to_string(c.n_pre) + " layer types", k.file(),
                  "layer_types");
    for (int64_t i = 0; i < c.n_pre; ++i) {
      const nlohmann::json& t = lt[size_t(i)];
      const char* want = c.window_of_block(false, i) > 0 ? "sliding_attention" : "full_attention";
      if (!t.is_string() || t.get<std::string>() != want)
        throw Error("layer " + std::to_string(i) + " is " + t.dump() + "; the window keys give \"" + want +
                        "\" (only full layers followed by windowed ones are modelled)",
                    k.file(), "layer_types");
    }
  }
}

}  // namespace

const std::set<std::string>& inert_config_keys() { return kInertKeys; }

ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object()) throw Error("expected a JSON object", file);
  if (!j.contains("model_type") || !j["model_type"].is_string())
    throw Error(std::string("missing key (expected a string: ") + kFamilies + ")", file, "model_type");
  const std::string type = j["model_type"].get<std::string>();
  if (type != "llama" && type != "mistral" && type != "qwen2" && type != "qwen3" && type != "tinyloop")
    throw Error("unsupported model_type '" + type + "' (expected " + kFamilies + ")", file, "model_type");

  // A tinyloop config may use the .tinyloop /config field names directly.
  if (type == "tinyloop" && j.contains("d_model")) {
    ModelConfig c;
    try {
      from_json(j, c);
    } catch (const Error& e) {
      throw Error(e.what(), file);
    }
    c.architecture = "tinyloop";
    c.validate(file);
    return c;
  }

  Keys k(j, file);
  k.string("model_type", "");
  ModelConfig c;
  c.architecture = type;
  const std::string act = k.string("hidden_act", "silu");
  if (act != "silu") throw Error("hidden_act \"" + act + "\": expected \"silu\" (SwiGLU MLP)", file, "hidden_act");
  c.d_model = k.integer("hidden_size");
  c.n_heads = k.integer("num_attention_heads");
  c.n_kv_heads = k.integer("num_key_value_heads", &c.n_heads);  // absent: MHA
  // Qwen3Config defaults head_dim to 128; the others to hidden_size / num_attention_heads.
  const int64_t dh = type == "qwen3" ? 128 : c.n_heads > 0 ? c.d_model / c.n_heads : 0;
  const bool explicit_dh = k.has("head_dim");
  c.d_head = k.integer("head_dim", &dh);
  c.ffn = k.integer("intermediate_size");
  c.vocab = k.integer("vocab_size");
  // HF's defaults per family: rms_norm_eps 1e-6 (Llama/Mistral/Qwen configs), rope_theta 1e4.
  c.norm_eps = k.number("rms_norm_eps", 1e-6);
  c.rope_theta = k.number("rope_theta", 10000.0);
  if (k.has("rope_scaling")) read_rope(k, "rope_scaling", c);
  if (k.has("rope_parameters")) read_rope(k, "rope_parameters", c);
  if (k.has("partial_rotary_factor") && k.number("partial_rotary_factor", 1.0) != 1.0)
    throw Error("partial RoPE (a rotary factor below 1) is not modelled", file, "partial_rotary_factor");
  const int64_t max_seq = 2048;
  c.max_seq = k.integer("max_position_embeddings", &max_seq);
  c.tie_embeddings = k.boolean("tie_word_embeddings", false);
  if (type == "tinyloop") {
    c.n_pre = k.integer("n_pre");
    c.n_loop = k.integer("n_loop");
    c.loops = k.integer("loops");
    k.integer("num_hidden_layers", &c.n_pre);  // informational (the distinct blocks)
  } else {
    c.n_pre = k.integer("num_hidden_layers");  // a plain stack: every block distinct
  }
  // Biases: Qwen2 always has q/k/v biases (never o); Llama and Qwen3 follow attention_bias
  // (q, k, v and o); Llama's mlp_bias adds gate / up / down biases.
  if (type == "qwen2") {
    c.qkv_bias = true;
  } else if (type == "llama" || type == "qwen3") {
    c.qkv_bias = c.out_bias = k.boolean("attention_bias", false);
  }
  if (type == "llama") c.mlp_bias = k.boolean("mlp_bias", false);
  c.qk_norm = type == "qwen3";
  read_window(k, type, c);
  // quantization_config is read by the quantized-checkpoint import (libconvert/quant_checkpoint.h);
  // any other quantization method is not.
  if (k.has("quantization_config")) {
    const nlohmann::json& q = k.at("quantization_config");
    const std::string method = quant_method_of(q);
    if (method != "gptq" && method != "awq" && method != "compressed-tensors")
      throw Error("quant_method \"" + method + "\" is not read (GPTQ, AWQ and compressed-tensors checkpoints are)", file,
                  "quantization_config.quant_method");
  }
  k.refuse_unread(kInertKeys);
  // Every integer is bounded by kMaxDim (2^24), so d_head * n_heads fits in int64.
  if (c.n_heads > 0 && c.d_head * c.n_heads != c.d_model && !explicit_dh && type != "qwen3")
    throw Error("hidden_size " + std::to_string(c.d_model) + " is not divisible by num_attention_heads " +
                    std::to_string(c.n_heads) + " and head_dim is not given", file, "head_dim");
  c.validate(file);
  return c;
}

ModelConfig read_hf_config(const std::string& path_in) {
  const std::string path = is_directory(path_in) ? path_in + "/config.json" : path_in;
  require_regular_file(path, "a config.json");
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) throw Error("invalid JSON", path);
  return model_config_from_hf(j, path);
}

nlohmann::json model_config_to_hf(const ModelConfig& c) {
  const bool loop = c.architecture == "tinyloop";
  nlohmann::json j = {{"model_type", loop ? "tinyloop" : c.architecture},
                      {"hidden_size", c.d_model},
                      {"num_attention_heads", c.n_heads},
                      {"num_key_value_heads", c.n_kv_heads},
                      {"head_dim", c.d_head},
                      {"intermediate_size", c.ffn},
                      {"vocab_size", c.vocab},
                      {"num_hidden_layers", c.n_pre + c.n_loop},
                      {"rms_norm_eps", c.norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"max_position_embeddings", c.max_seq},
                      {"tie_word_embeddings", c.tie_embeddings},
                      {"hidden_act", "silu"}};
  if (c.rope_type != "default") {
    j["rope_scaling"] = {{"rope_type", c.rope_type}, {"factor", c.rope_factor}};
    if (c.rope_type == "llama3") {
      j["rope_scaling"]["low_freq_factor"] = c.rope_low_freq_factor;
      j["rope_scaling"]["high_freq_factor"] = c.rope_high_freq_factor;
      j["rope_scaling"]["original_max_position_embeddings"] = c.rope_original_max_seq;
    }
  }
  if (c.architecture == "llama") {
    j["attention_bias"] = c.qkv_bias;
    j["mlp_bias"] = c.mlp_bias;
  } else if (c.architecture == "qwen3") {
    j["attention_bias"] = c.qkv_bias;
  }
  if (c.sliding_window > 0) {
    j["sliding_window"] = c.sliding_window;
    if (c.architecture == "qwen2" || c.architecture == "qwen3") {
      j["use_sliding_window"] = true;
      j["max_window_layers"] = c.window_first_block;
    }
  }
  if (loop) {
    j["n_pre"] = c.n_pre;
    j["n_loop"] = c.n_loop;
    j["loops"] = c.loops;
    j["num_hidden_layers"] = c.n_pre;
  }
  return j;
}

std::string quant_method_of(const nlohmann::json& q) {
  return q.is_object() && q.contains("quant_method") && q["quant_method"].is_string() ? q["quant_method"].get<std::string>()
                                                                                       : "gptq";
}

}  // namespace tl
