// Strict config consumption walked key by key: every key of every family fixture's config.json
// (written by transformers' own config classes, tests/data/families) and every key of
// hf_config's inert table. A key the reader reads must matter: changed, it changes the parsed
// ModelConfig or is refused naming that key. An inert key must not: set or removed, the config is
// the same. A key the reader neither reads nor lists as inert is refused by name. The cases come
// from the fixtures' configs and from inert_config_keys(), so a key added to either is tested
// without a new case: a key read and then dropped (attention_bias read but not applied to the
// output bias), a math key moved into the inert table, or a family that forgets a key fail here.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "fixtures.h"
#include "formats/hf_config.h"

using nlohmann::json;

namespace {

const std::vector<std::string> kFixtures = {"llama-rope-llama3", "llama-rope-linear", "llama-head-dim", "llama-bias-tied",
                                            "mistral-window",    "qwen2-bias-tied",   "qwen2-window",   "qwen3"};

json fixture_config(const std::string& name) {
  std::ifstream in(std::string(TL_FAMILY_DIR) + "/" + name + "/config.json");
  REQUIRE(in.good());
  return json::parse(in);
}

json parsed(const json& j) {
  json out;
  tl::to_json(out, tl::model_config_from_hf(j, "config.json"));
  return out;
}

// One changed value of the same JSON type (an object's keys are walked one by one by the caller).
json changed(const json& v) {
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>() == 0 ? json(1) : json(v.get<int64_t>() * 2);
  if (v.is_number()) return v.get<double>() == 0 ? json(0.5) : json(v.get<double>() * 2);
  if (v.is_string()) return v.get<std::string>() + "-changed";
  if (v.is_null()) return 64;
  if (v.is_array()) {
    json a = v;
    if (!a.empty()) a[0] = a[0].is_string() ? json(a[0].get<std::string>() + "-changed") : changed(a[0]);
    return a;
  }
  return v;
}

// The keys a family reads only under another key's setting (transformers' config classes):
// Qwen2 / Qwen3 read sliding_window and max_window_layers only with use_sliding_window on, and a
// window that is null or starts at or after the last layer windows nothing, whatever the switch.
bool governed_off(const json& cfg, const std::string& key) {
  const std::string type = cfg.value("model_type", "");
  if (type != "qwen2" && type != "qwen3") return false;
  const bool no_window = cfg.value("sliding_window", json()).is_null() ||
                         cfg.value("max_window_layers", int64_t(28)) >= cfg.value("num_hidden_layers", int64_t(0));
  if (key == "use_sliding_window") return no_window;
  if (key == "sliding_window" || key == "max_window_layers") return no_window || !cfg.value("use_sliding_window", false);
  return false;
}

// transformers 5's layer_types restates the layer count and the window keys: a change to one of
// those is refused naming layer_types, which then disagrees with it.
bool restated_by_layer_types(const json& cfg, const std::string& key) {
  return cfg.contains("layer_types") && (key == "num_hidden_layers" || key == "use_sliding_window" ||
                                         key == "sliding_window" || key == "max_window_layers");
}

// The outcome of parsing `j` whose key `path` was changed: "refused" (naming the key), "changed"
// (another ModelConfig), "same", or the message of a refusal that names another key.
std::string outcome(const json& j, const json& before, const std::string& path) {
  try {
    return parsed(j) == before ? "same" : "changed";
  } catch (const tl::Error& e) {
    const std::string m = e.what();
    return m.find("config.json: " + path + ":") == 0 ? "refused" : "refused naming another key: " + m;
  }
}

}  // namespace

TEST_CASE("config keys: every key a family fixture's config reads changes the model or is refused by name") {
  const std::set<std::string>& inert = tl::inert_config_keys();
  int read_cases = 0, governed = 0;
  for (const std::string& name : kFixtures) {
    const json cfg = fixture_config(name);
    const json before = parsed(cfg);
    for (auto it = cfg.begin(); it != cfg.end(); ++it) {
      const std::string key = it.key();
      if (inert.count(key)) continue;
      std::vector<std::pair<std::string, json>> cases;  // (key path, the changed config)
      if (it.value().is_object()) {
        for (auto sub = it.value().begin(); sub != it.value().end(); ++sub) {
          json c = cfg;
          c[key][sub.key()] = changed(sub.value());
          cases.push_back({key + "." + sub.key(), c});
        }
      } else {
        json c = cfg;
        c[key] = changed(it.value());
        cases.push_back({key, c});
      }
      for (const auto& [path, c] : cases) {
        CAPTURE(name);
        CAPTURE(path);
        const std::string got = outcome(c, before, path);
        CAPTURE(got);
        if (got.find("refused naming another key: config.json: layer_types:") == 0 && restated_by_layer_types(cfg, key)) {
          ++read_cases;
          continue;
        }
        if (got == "same" && governed_off(cfg, key)) {
          ++governed;
          continue;
        }
        CHECK((got == "changed" || got == "refused"));
        ++read_cases;
      }
    }
  }
  MESSAGE(read_cases << " read keys changed, " << governed << " governed by an off switch");
  CHECK(read_cases >= 8 * 15);
}

TEST_CASE("config keys: every inert key, set or removed, leaves every family's model unchanged") {
  for (const std::string& name : kFixtures) {
    const json cfg = fixture_config(name);
    const json before = parsed(cfg);
    for (const std::string& key : tl::inert_config_keys()) {
      CAPTURE(name);
      CAPTURE(key);
      json set = cfg;
      set[key] = cfg.contains(key) ? changed(cfg[key]) : json(7);
      CHECK(outcome(set, before, key) == "same");
      json removed = cfg;
      removed.erase(key);
      CHECK(outcome(removed, before, key) == "same");
    }
  }
}

TEST_CASE("config keys: a key neither read nor inert is refused by name, in every family") {
  // Each read key's near-namesake (a key the reader cannot know), and the keys of the families
  // still refused (mixture of experts, Gemma's soft-capping, DeepSeek's MLA) at the top level.
  const std::vector<std::string> foreign = {"num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
                                            "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
                                            "mlp_only_layers", "router_aux_loss_coef", "attn_logit_softcapping",
                                            "final_logit_softcapping", "query_pre_attn_scalar", "kv_lora_rank", "q_lora_rank"};
  for (const std::string& name : kFixtures) {
    const json cfg = fixture_config(name);
    const json before = parsed(cfg);
    std::vector<std::string> keys = foreign;
    for (auto it = cfg.begin(); it != cfg.end(); ++it)
      if (!tl::inert_config_keys().count(it.key())) keys.push_back(it.key() + "_v2");
    for (const std::string& key : keys) {
      CAPTURE(name);
      CAPTURE(key);
      json c = cfg;
      c[key] = 8;
      const std::string got = outcome(c, before, key);
      CHECK(got == "refused");
      if (got == "refused") {
        const std::string m = tl::test::error_message([&] { tl::model_config_from_hf(c); });
        CHECK(m.find("config key not modelled by tinyloop-tools") != std::string::npos);
      }
    }
  }
}
