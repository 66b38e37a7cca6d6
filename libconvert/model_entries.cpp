#include "libconvert/model_entries.h"

#include <map>
#include <regex>

#include "core/error.h"

namespace tl {

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
  static const std::map<std::string, int> kParts = {
      {"attn_norm", 0}, {"mlp_norm", 0},      {"attn_qkv", 1},      {"attn_out", 2},       {"mlp_gate", 3},
      {"mlp_up", 3},    {"mlp_down", 4},      {"attn_qkv.bias", 5}, {"attn_out.bias", 6},  {"mlp_gate.bias", 7},
      {"mlp_up.bias", 7}, {"mlp_down.bias", 6}, {"q_norm", 8},      {"k_norm", 8}};
  const auto it = kParts.find(part);
  if (it == kParts.end()) return {};
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
  auto ends = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  const char* off = nullptr;
  if (ends(".attn_qkv.bias") && !c.qkv_bias) off = "q/k/v biases (qkv_bias; HF: attention_bias)";
  if (ends(".attn_out.bias") && !c.out_bias) off = "an output-projection bias (out_bias; HF: attention_bias)";
  if ((ends(".mlp_gate.bias") || ends(".mlp_up.bias") || ends(".mlp_down.bias")) && !c.mlp_bias)
    off = "MLP biases (mlp_bias)";
  if ((ends(".q_norm") || ends(".k_norm")) && !c.qk_norm) off = "per-head q/k norms (qk_norm)";
  if (off)
    throw Error(std::string("the config does not enable ") + off + ", so " + model +
                    " would not use this entry; refused rather than ignored",
                file, name);
}

}  // namespace tl
