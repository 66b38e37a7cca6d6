// The entries of a TinyLoop model, the one place their names and shapes are decided: which
// entries a config's model has, the shape each must have, and strict consumption (an input that
// holds anything else is refused by name). Everything that reads a model -- the HF import, the
// model source (model_source.h), the loaders -- asks here.
//
// Entry names (DESIGN.md "The model"; the same in a .tinyloop file and in memory):
//   embed [vocab, D]                    token embedding (a lookup table, not a linear weight)
//   pre.<i>.attn_norm [D]               i < n_pre, distinct blocks
//   pre.<i>.attn_qkv  [D, (H + 2 Hkv) dh]   q | k | v concatenated along N
//   pre.<i>.attn_out  [H dh, D]
//   pre.<i>.mlp_norm  [D]
//   pre.<i>.mlp_gate, pre.<i>.mlp_up [D, FFN];  pre.<i>.mlp_down [FFN, D]
//   loop.<j>.*                          j < n_loop, the shared blocks (same names)
//   final_norm [D]
//   head [D, vocab]                     absent with tie_embeddings: head = embed^T
// and, where the config enables the feature (ModelConfig, docs/format.md "Family entries"):
//   <block>.attn_qkv.bias [(H + 2 Hkv) dh]  qkv_bias (q | k | v, like the weight)
//   <block>.attn_out.bias [D]               out_bias
//   <block>.mlp_{gate,up}.bias [FFN], <block>.mlp_down.bias [D]   mlp_bias
//   <block>.q_norm, <block>.k_norm [dh]     qk_norm (per-head RMSNorm gains)
// Linear weights are [K, N] (Y = X W).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/model_config.h"

namespace tl {

// The five linear weights of a block, in execution order, by their short names.
constexpr const char* kBlockLinearNames[] = {"attn_qkv", "attn_out", "mlp_gate", "mlp_up", "mlp_down"};
constexpr int kBlockLinears = 5;

// True for TinyLoop linear-weight names: (pre|loop).<i>.(attn_qkv|attn_out|mlp_*) and head.
bool is_tinyloop_linear_name(const std::string& name);

std::string block_prefix(bool loop, int64_t index);  // "pre.<i>" / "loop.<j>"
// The sliding attention window of the block named `prefix` (ModelConfig::window_of_block).
int64_t block_window(const ModelConfig& c, const std::string& prefix);

// The shape `config` gives the model entry `name` (embed [vocab, D], norms [D], linears
// [K, N], biases [N], q/k norms [dh]); empty for a name that is not a TinyLoop model entry. A
// block index beyond n_pre / n_loop is tl::Error. The one place entry shapes are derived.
std::vector<int64_t> expected_entry_shape(const ModelConfig& config, const std::string& name);
// The entries a config enables or not, one row each: strict consumption refuses a row's entry
// where its flag is off, the model source requires it where it is on, and the tests walk the
// rows (tests/convert/test_strict_entries.cpp). Every block has each enabled row's entry.
struct OptionalEntry {
  const char* suffix;         // ".attn_out.bias": the entry is "<block>" + suffix
  const char* feature;        // what the config does not enable, for the message
  bool ModelConfig::*flag;    // the config's switch
};
const std::vector<OptionalEntry>& optional_entries();
// Every entry a block can have, as "<block>" + suffix (".attn_norm", ".attn_qkv.bias", ...): the
// five linears and two norms every block has, and the rows of optional_entries().
std::vector<std::string> block_entry_suffixes();
// Whether the config's blocks have `<block><suffix>` (a row of optional_entries; false otherwise).
bool optional_entry_enabled(const ModelConfig& c, const std::string& suffix);

// Strict consumption, the one place it is decided: throws tl::Error (file, the entry, what the
// tools do not model) unless `name` is an entry the model of `config` uses (a bias or q/k norm
// only where the config enables it).
void check_model_entry(const ModelConfig& config, const std::string& name, const std::string& file);

}  // namespace tl
