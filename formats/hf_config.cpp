// HF config.json -> ModelConfig. The Llama family (llama, mistral, qwen2) shares key names;
// what differs is defaults and optional keys (head_dim, num_key_value_heads). Features the
// TinyLoop block cannot express (scaled RoPE, a non-SiLU MLP) are refused, not ignored.
#include "formats/hf_config.h"

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "formats/file_check.h"

namespace tl {

namespace {

const char* const kFamily[] = {"llama", "mistral", "qwen2"};

int64_t get_int(const nlohmann::json& j, const char* key, const std::string& file, const int64_t* fallback = nullptr) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback) return *fallback;
    throw Error("missing key (expected an integer)", file, key);
  }
  if (!j[key].is_number_integer() || (j[key].is_number_unsigned() && j[key].get<uint64_t>() > uint64_t(kMaxDim)))
    throw Error("expected an integer of at most " + std::to_string(kMaxDim) + ", got " + j[key].dump(), file, key);
  const int64_t v = j[key].get<int64_t>();
  if (v > kMaxDim || v < -kMaxDim)
    throw Error("expected an integer of at most " + std::to_string(kMaxDim) + ", got " + j[key].dump(), file, key);
  return v;
}

double get_num(const nlohmann::json& j, const char* key, double fallback, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number() || !std::isfinite(j[key].get<double>()))
    throw Error("expected a finite number, got " + j[key].dump(), file, key);
  return j[key].get<double>();
}

bool get_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw Error("expected true or false, got " + j[key].dump(), file, key);
  return j[key].get<bool>();
}

}  // namespace

ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object()) throw Error("expected a JSON object", file);
  if (!j.contains("model_type") || !j["model_type"].is_string())
    throw Error("missing key (expected a string: llama, mistral, qwen2 or tinyloop)", file, "model_type");
  const std::string type = j["model_type"].get<std::string>();
  bool family = false;
  for (const char* t : kFamily) family = family || type == t;
  if (!family && type != "tinyloop")
    throw Error("unsupported model_type '" + type + "' (expected llama, mistral, qwen2 or tinyloop)", file, "model_type");

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

  auto default_rope = [](const nlohmann::json& r) {  // {"rope_type": "default", ...} is plain RoPE
    return r.is_object() && ((r.contains("rope_type") && r["rope_type"] == "default") ||
                             (r.contains("type") && r["type"] == "default"));
  };
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null() && !default_rope(j["rope_scaling"]))
    throw Error("rope_scaling " + j["rope_scaling"].dump() + " is not supported (the TinyLoop block uses plain RoPE)",
                file, "rope_scaling");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    throw Error("hidden_act " + j["hidden_act"].dump() + ": expected \"silu\" (SwiGLU MLP)", file, "hidden_act");

  ModelConfig c;
  c.architecture = type;
  c.d_model = get_int(j, "hidden_size", file);
  c.n_heads = get_int(j, "num_attention_heads", file);
  c.n_kv_heads = get_int(j, "num_key_value_heads", file, &c.n_heads);  // absent: MHA
  const int64_t dh = c.n_heads > 0 ? c.d_model / c.n_heads : 0;
  c.d_head = get_int(j, "head_dim", file, &dh);  // mistral-nemo etc. set it explicitly
  c.ffn = get_int(j, "intermediate_size", file);
  c.vocab = get_int(j, "vocab_size", file);
  // HF's defaults per family: rms_norm_eps 1e-6 (Llama/Mistral/Qwen2 configs), rope_theta 1e4.
  c.norm_eps = get_num(j, "rms_norm_eps", 1e-6, file);
  c.rope_theta = get_num(j, "rope_theta", 10000.0, file);
  // transformers >= 5 writes RoPE as rope_parameters {rope_type, rope_theta}; only "default"
  // (plain RoPE) is the TinyLoop block's.
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const nlohmann::json& rp = j["rope_parameters"];
    if (rp.contains("rope_type") && rp["rope_type"] != "default")
      throw Error("rope_parameters " + rp.dump() + " is not supported (the TinyLoop block uses plain RoPE)", file,
                  "rope_parameters");
    c.rope_theta = get_num(rp, "rope_theta", c.rope_theta, file);
  }
  const int64_t max_seq = 2048;
  c.max_seq = get_int(j, "max_position_embeddings", file, &max_seq);
  c.tie_embeddings = get_bool(j, "tie_word_embeddings", false, file);
  if (type == "tinyloop") {
    c.n_pre = get_int(j, "n_pre", file);
    c.n_loop = get_int(j, "n_loop", file);
    c.loops = get_int(j, "loops", file);
  } else {
    c.n_pre = get_int(j, "num_hidden_layers", file);  // a plain stack: every block distinct
    c.n_loop = 0;
    c.loops = 0;
  }
  // Every integer is bounded by kMaxDim (2^24), so d_head * n_heads fits in int64.
  if (c.n_heads > 0 && c.d_head * c.n_heads != c.d_model && !j.contains("head_dim"))
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
  if (loop) {
    j["n_pre"] = c.n_pre;
    j["n_loop"] = c.n_loop;
    j["loops"] = c.loops;
  }
  return j;
}

}  // namespace tl
