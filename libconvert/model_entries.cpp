#include "libconvert/model_entries.h"

#include <map>
#include <regex>

#include "core/error.h"

namespace tl {
namespace {

// Every entry a block may have, by its part of the name, with its shape's kind (below).
const std::map<std::string, int>& block_parts() {
  static const std::map<std::string, int> parts = {
      {"attn_norm", 0}, {"mlp_norm", 0},      {"attn_qkv", 1},      {"attn_out", 2},       {"mlp_gate", 3},
      {"mlp_up", 3},    {"mlp_down", 4},      {"attn_qkv.bias", 5}, {"attn_out.bias", 6},  {"mlp_gate.bias", 7},
      {"mlp_up.bias", 7}, {"mlp_down.bias", 6}, {"q_norm", 8},      {"k_norm", 8}};
  return parts;
}

}  // namespace

std::vector<std::string> block_entry_suffixes() {
  std::vector<std::string> out;
  for (const auto& kv : block_parts()) out.push_back("." + kv.first);
  return out;
}

const std::vector<OptionalEntry>& optional_entries() {
  static const std::vector<OptionalEntry> rows = {
      {".attn_qkv.bias", "q/k/v biases (qkv_bias; HF: attention_bias)", &ModelConfig::qkv_bias},
      {".attn_out.bias", "an output-projection bias (out_bias; HF: attention_bias)", &ModelConfig::out_bias},
      {".mlp_gate.bias", "MLP biases (mlp_bias)", &ModelConfig::mlp_bias},
      {".mlp_up.bias", "MLP biases (mlp_bias)", &ModelConfig::mlp_bias},
      {".mlp_down.bias", "MLP biases (mlp_bias)", &ModelConfig::mlp_bias},
      {".q_norm", "per-head q/k norms (qk_norm)", &ModelConfig::qk_norm},
      {".k_norm", "per-head q/k norms (qk_norm)", &ModelConfig::qk_norm},
  };
  return rows;
}

bool optional_entry_enabled(const ModelConfig& c, const std::string& suffix) {
  for (const OptionalEntry& o : optional_entries())
    if (suffix == o.suffix) return c.*o.flag;
  return false;
}

bool is_tinyloop_linear_name(const std::string& name) {
  static const std::regex re(R"(^((pre|loop)\.[0-9]+\.(attn_qkv|attn_out|mlp_gate|mlp_up|mlp_down)|head)$)");
  return std::regex_match(name, re);
}

std::string block_prefix(bool loop, int64_t index) {
  return std::string(loop ? "loop." : "pre.") + std::to_string(index);
}

int64_t block_window(const ModelConfig& c, const std::string& prefix) {
  if (c.sliding_window <= 0 || prefix.rfind("pre.", 0) != 0) return 0;
  return c.window_of_block(false, std::stoll(prefix.substr(4)));
}

std::vector<int64_t> expected_entry_shape(const ModelConfig& c, const std::string& name) {
  const int64_t D = c.d_model, F = c.ffn, V = c.vocab;
  const int64_t qkv = (c.n_heads + 2 * c.n_kv_heads) * c.d_head, att = c.n_heads * c.d_head;
  if (name == "embed") return {V, D};
  if (name == "final_norm") return {D};
  if (name == "head") return {D, V};
  const bool loop = name.rfind("loop.", 0) == 0;
  if (!loop && name.rfind("pre.", 0) != 0) return {};
  const size_t dot = name.find('.', loop ? 5 : 4);
  const std::string index = name.substr(loop ? 5 : 4, dot == std::string::npos ? std::string::npos : dot - (loop ? 5 : 4));
  if (dot == std::string::npos || index.empty() || index.size() > 9 || index.find_first_not_of("0123456789") != std::string::npos)
    return {};
  const std::string part = name.substr(dot + 1);
  const auto it = block_parts().find(part);
  if (it == block_parts().end()) return {};
  const int64_t i = std::stoll(index), blocks = loop ? c.n_loop : c.n_pre;
  if (i >= blocks)
    throw Error("block " + name.substr(0, dot) + " is not in the model: the config has " +
                    (loop ? "n_loop = " : "n_pre = ") + std::to_string(blocks), "", name);
  switch (it->second) {
    case 0: return {D};
    case 1: return {D, qkv};
    case 2: return {att, D};
    case 3: return {D, F};
    case 4: return {F, D};
    case 5: return {qkv};
    case 6: return {D};
    case 7: return {F};
    default: return {c.d_head};
  }
}

void check_model_entry(const ModelConfig& c, const std::string& name, const std::string& file) {
  std::vector<int64_t> shape;
  try {
    shape = expected_entry_shape(c, name);
  } catch (const Error& e) {
    throw Error(e.what(), file);
  }
  const std::string model = "the " + c.architecture + " model the tools build";
  if (shape.empty())
    throw Error("not an entry of " + model + " (docs/model.md lists what is modelled); refused rather than ignored",
                file, name);
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  for (const OptionalEntry& o : optional_entries())
    if (ends(o.suffix) && !(c.*o.flag))
      throw Error(std::string("the config does not enable ") + o.feature + ", so " + model +
                      " would not use this entry; refused rather than ignored",
                  file, name);
}

}  // namespace tl
