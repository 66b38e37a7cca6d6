// ModelConfig JSON and HF config.json import (llama / mistral / qwen2 / tinyloop).
#include <doctest/doctest.h>

#include <functional>

#include "fixtures.h"
#include "core/error.h"
#include "formats/hf_config.h"

using namespace tl;
using nlohmann::json;

namespace {
json llama() {
  return {{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32},
          {"num_key_value_heads", 8}, {"intermediate_size", 14336}, {"num_hidden_layers", 32},
          {"vocab_size", 128256}, {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0},
          {"max_position_embeddings", 8192}, {"tie_word_embeddings", false}, {"hidden_act", "silu"},
          {"rope_scaling", nullptr}};
}
}  // namespace

TEST_CASE("hf_config: llama with GQA") {
  const ModelConfig c = model_config_from_hf(llama());
  CHECK(c.architecture == "llama");
  CHECK(c.d_model == 4096);
  CHECK(c.n_heads == 32);
  CHECK(c.n_kv_heads == 8);
  CHECK(c.d_head == 128);
  CHECK(c.ffn == 14336);
  CHECK(c.n_pre == 32);
  CHECK(c.n_loop == 0);
  CHECK(c.vocab == 128256);
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.norm_eps == 1e-5);
  CHECK(c.max_seq == 8192);
  CHECK(!c.tie_embeddings);
}

TEST_CASE("hf_config: mistral (explicit head_dim), qwen2 (tied), MHA default") {
  json m = llama();
  m["model_type"] = "mistral";
  m["hidden_size"] = 5120;
  m["head_dim"] = 128;  // 5120 / 32 = 160, but the checkpoint says 128 (Mistral-Nemo)
  CHECK(model_config_from_hf(m).d_head == 128);
  json q = llama();
  q["model_type"] = "qwen2";
  q["tie_word_embeddings"] = true;
  q.erase("num_key_value_heads");
  const ModelConfig c = model_config_from_hf(q);
  CHECK(c.tie_embeddings);
  CHECK(c.n_kv_heads == 32);
  q["head_dim"] = nullptr;  // null means "derive it"
  CHECK(model_config_from_hf(q).d_head == 128);
}

TEST_CASE("hf_config: tinyloop configs in HF names and in /config names") {
  json t = llama();
  t["model_type"] = "tinyloop";
  t["n_pre"] = 2;
  t["n_loop"] = 1;
  t["loops"] = 8;
  const ModelConfig c = model_config_from_hf(t);
  CHECK(c.architecture == "tinyloop");
  CHECK(c.n_pre == 2);
  CHECK(c.n_loop == 1);
  CHECK(c.loops == 8);
  // to_hf -> from_hf is the identity
  const ModelConfig s = test::small_config();
  json a, b;
  to_json(a, model_config_from_hf(model_config_to_hf(s)));
  to_json(b, s);
  CHECK(a == b);
  json direct = b;
  direct["model_type"] = "tinyloop";
  to_json(a, model_config_from_hf(direct));
  CHECK(a == b);
}

TEST_CASE("hf_config: errors name the file and the key") {
  json g = llama();
  g["model_type"] = "gpt2";
  CHECK(test::error_message([&] { model_config_from_hf(g, "x/config.json"); }) ==
        "x/config.json: model_type: unsupported model_type 'gpt2' (expected llama, mistral, qwen2, qwen3 or tinyloop)");
  json m = llama();
  m.erase("intermediate_size");
  CHECK(test::error_message([&] { model_config_from_hf(m); }).find("intermediate_size: missing key") != std::string::npos);
  json r = llama();
  r["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  CHECK(test::error_message([&] { model_config_from_hf(r); }).find("rope_scaling.original_max_position_embeddings: missing key") != std::string::npos);
  json k = llama();
  k["num_key_value_heads"] = 7;
  CHECK(test::error_message([&] { model_config_from_hf(k); }).find("config.n_kv_heads") != std::string::npos);
  json s = llama();
  s["hidden_size"] = "4096";
  CHECK(test::error_message([&] { model_config_from_hf(s); }).find("hidden_size: expected an integer") != std::string::npos);
  CHECK(test::error_message([&] { model_config_from_hf(json::array()); }).find("expected a JSON object") != std::string::npos);
  json t = llama();
  t["model_type"] = "tinyloop";
  CHECK(test::error_message([&] { model_config_from_hf(t); }).find("n_pre: missing key") != std::string::npos);
}

TEST_CASE("hf_config: family features (RoPE scaling, biases, q/k norms, sliding windows)") {
  json l = llama();
  l["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  l["attention_bias"] = true;
  l["mlp_bias"] = true;
  ModelConfig c = model_config_from_hf(l);
  CHECK(c.rope_type == "llama3");
  CHECK(c.rope_factor == 8.0);
  CHECK(c.rope_original_max_seq == 8192);
  CHECK((c.qkv_bias && c.out_bias && c.mlp_bias && !c.qk_norm && c.sliding_window == 0));
  CHECK(c.uses_family_features());
  // transformers 5 spells it rope_parameters, with rope_theta inside
  json p = llama();
  p.erase("rope_scaling");
  p.erase("rope_theta");
  p["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 1e6}};
  c = model_config_from_hf(p);
  CHECK((c.rope_type == "linear" && c.rope_factor == 4.0 && c.rope_theta == 1e6));
  // Qwen2: q/k/v biases always, the window only with use_sliding_window, from max_window_layers
  json q = llama();
  q["model_type"] = "qwen2";
  q["sliding_window"] = 4096;
  q["use_sliding_window"] = false;
  c = model_config_from_hf(q);
  CHECK((c.qkv_bias && !c.out_bias && c.sliding_window == 0));
  q["use_sliding_window"] = true;
  q["max_window_layers"] = 20;
  c = model_config_from_hf(q);
  CHECK((c.sliding_window == 4096 && c.window_first_block == 20));
  CHECK((c.window_of_block(false, 19) == 0 && c.window_of_block(false, 20) == 4096));
  json lt = json::array();
  for (int i = 0; i < 32; ++i) lt.push_back(i < 20 ? "full_attention" : "sliding_attention");
  q["layer_types"] = lt;
  CHECK(model_config_from_hf(q).window_first_block == 20);
  q["layer_types"][3] = "sliding_attention";  // not "full layers, then windowed ones"
  CHECK(test::error_message([&] { model_config_from_hf(q); }).find("layer_types: layer 3") != std::string::npos);
  // Mistral: the window on every layer; absent means transformers' default 4096, null none
  json m = llama();
  m["model_type"] = "mistral";
  m["sliding_window"] = 64;
  c = model_config_from_hf(m);
  CHECK((c.sliding_window == 64 && c.window_first_block == 0));
  m.erase("sliding_window");
  CHECK(model_config_from_hf(m).sliding_window == 4096);
  m["sliding_window"] = nullptr;
  CHECK(model_config_from_hf(m).sliding_window == 0);
  // Qwen3: q/k norms; head_dim defaults to 128, not hidden / heads
  json q3 = llama();
  q3["model_type"] = "qwen3";
  q3["hidden_size"] = 2048;
  c = model_config_from_hf(q3);
  CHECK((c.qk_norm && c.d_head == 128 && !c.qkv_bias));
}

TEST_CASE("hf_config: strict keys: an unknown or unmodelled key is refused by name") {
  json u = llama();
  u["attn_logit_softcapping"] = 50.0;  // Gemma 2's: changes the math
  CHECK(test::error_message([&] { model_config_from_hf(u, "c.json"); })
            .find("c.json: attn_logit_softcapping: config key not modelled by tinyloop-tools (= 50.0)") == 0);
  json y = llama();
  y["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  CHECK(test::error_message([&] { model_config_from_hf(y); }).find("rope_scaling.rope_type: rope_type \"yarn\" is not modelled") != std::string::npos);
  json x = llama();
  x["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}, {"mscale", 2.0}};
  CHECK(test::error_message([&] { model_config_from_hf(x); }).find("rope_scaling.mscale: config key not modelled") != std::string::npos);
  json pr = llama();
  pr["partial_rotary_factor"] = 0.5;
  CHECK(test::error_message([&] { model_config_from_hf(pr); }).find("partial_rotary_factor: partial RoPE") != std::string::npos);
  json w = llama();
  w["sliding_window"] = 128;  // Llama has no window: the key is not read, so it is refused
  CHECK(test::error_message([&] { model_config_from_hf(w); }).find("sliding_window: config key not modelled") != std::string::npos);
  json a = llama();
  a["quantization_config"] = {{"quant_method", "bitsandbytes"}};
  CHECK(test::error_message([&] { model_config_from_hf(a); }).find("quant_method \"bitsandbytes\" is not read") != std::string::npos);
  for (const char* m : {"gptq", "awq", "compressed-tensors"}) {  // read by libconvert/quant_checkpoint.h
    a["quantization_config"] = {{"quant_method", m}};
    CHECK_NOTHROW(model_config_from_hf(a));
  }
  json inert = llama();  // keys that do not change the forward pass
  inert["bos_token_id"] = 1;
  inert["torch_dtype"] = "bfloat16";
  inert["attention_dropout"] = 0.0;
  inert["pretraining_tp"] = 1;
  inert["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  CHECK(model_config_from_hf(inert).d_model == 4096);
}

TEST_CASE("hf_config: read_hf_config from a file or a folder; bad files") {
  const std::string dir = test::scratch("hfcfg");
  test::spit(dir + "/config.json", llama().dump(2));
  CHECK(read_hf_config(dir).d_model == 4096);
  CHECK(read_hf_config(dir + "/config.json").n_kv_heads == 8);
  test::spit(dir + "/config.json", std::string("{\"model_type\": \"llama\", "));
  CHECK(test::error_message([&] { read_hf_config(dir); }) == dir + "/config.json: invalid JSON");
  test::spit(dir + "/config.json", std::string());
  CHECK(test::error_message([&] { read_hf_config(dir); }).find("empty file") != std::string::npos);
  const std::string empty_dir = test::scratch("hfcfg_empty");
  CHECK(test::error_message([&] { read_hf_config(empty_dir); }).find("No such file") != std::string::npos);
}

TEST_CASE("model_config: from_json requires the structural fields, validate checks consistency") {
  json j;
  to_json(j, test::small_config());
  ModelConfig c;
  from_json(j, c);
  CHECK_NOTHROW(c.validate());
  j.erase("loops");
  CHECK(test::error_message([&] { ModelConfig d; from_json(j, d); }).find("missing field 'loops'") != std::string::npos);
  c.n_loop = 2;
  c.loops = 0;
  CHECK(test::error_message([&] { c.validate("f"); }) == "f: config.loops: expected loops > 0 when n_loop > 0");
}
