// Checkpoint import for gptq-quantize: an input checkpoint seen as a list of output entries
// (TinyLoop names), each read on demand, one at a time, so a 7B model never sits in RAM.
//
// Inputs (detected by CheckpointImport):
//  * HF Llama-family folder: config.json (model_type llama / mistral / qwen2, read by
//    formats/hf_config.h) + model.safetensors or sharded model-*.safetensors with
//    model.safetensors.index.json. Names are mapped to TinyLoop's (n_loop = 0, every layer
//    is a distinct "pre" block):
//        model.embed_tokens.weight                  -> embed        [vocab, D] (as stored)
//        model.layers.<i>.input_layernorm.weight    -> pre.<i>.attn_norm
//        model.layers.<i>.self_attn.{q,k,v}_proj.weight
//                                                   -> pre.<i>.attn_qkv  [D, (H + 2 Hkv) dh]:
//                                                      q | k | v concatenated along N
//        model.layers.<i>.self_attn.o_proj.weight   -> pre.<i>.attn_out
//        model.layers.<i>.post_attention_layernorm.weight -> pre.<i>.mlp_norm
//        model.layers.<i>.mlp.{gate,up,down}_proj.weight  -> pre.<i>.mlp_{gate,up,down}
//        model.norm.weight                          -> final_norm
//        lm_head.weight                             -> head         [D, vocab]
//        model.layers.<i>.self_attn.{q,k,v}_proj.bias -> pre.<i>.attn_qkv.bias (q | k | v)
//        model.layers.<i>.{self_attn.o_proj,mlp.*_proj}.bias -> pre.<i>.<linear>.bias
//        model.layers.<i>.self_attn.{q,k}_norm.weight -> pre.<i>.{q,k}_norm (Qwen3)
//    Linear weights are transposed from PyTorch's [N, K] to [K, N]. Strict consumption: any
//    other tensor is refused by name (model_weights.h check_model_entry decides what the
//    config uses), except rotary caches (self_attn.rotary_emb.inv_freq, recomputed from the
//    config) and, with tie_word_embeddings, an lm_head.weight equal to the embedding.
//  * A bare .safetensors file: every 2-D float tensor whose name matches --only (default: all
//    of them) is a linear weight stored [N, K]; names are kept; the rest is carried over.
//  * A .tinyloop: 2-D float tensors named like TinyLoop linears are linear weights already
//    [K, N]; quantized entries and everything else are copied unchanged with the config.
//
// Selection (which linear weights get quantized): --only REGEX, matched with std::regex_search
// against the output name (anchor with ^...$ for an exact match). Default for HF and .tinyloop
// inputs: the block linears (attn_qkv, attn_out, mlp_gate, mlp_up, mlp_down); the head and the
// embedding stay dense (the usual GPTQ practice; `--only 'head|mlp'` quantizes the head too).
// Linear weights that are not selected are stored dense as [K, N] in their source dtype.
//
// Thread safety: read_linear / read_dense of safetensors inputs may run concurrently (memory
// maps); a .tinyloop input uses HDF5, which the caller must serialize with all other HDF5 use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/model_config.h"
#include "formats/tensor.h"
#include "formats/tinyloop_file.h"
#include "libconvert/model_entries.h"

namespace tl {

enum class CheckpointKind { kHfFolder, kSafetensors, kTinyloop };
const char* checkpoint_kind_name(CheckpointKind k);

struct ImportEntry {
  enum class Kind {
    kLinear,       // selected linear weight: quantize it
    kDenseLinear,  // linear weight not selected: stored dense [K, N]
    kDense,        // any other tensor, stored as read
    kQuantized,    // .tinyloop input: already quantized, copied unchanged
  };
  std::string name;                   // output name
  Kind kind = Kind::kDense;
  DType dtype = DType::F32;           // source dtype (the first source's)
  std::vector<int64_t> shape;         // output shape: [K, N] for linear weights
  std::vector<std::string> sources;   // source tensor names (q, k, v for attn_qkv)
  int64_t K() const { return shape.size() == 2 ? shape[0] : 0; }
  int64_t N() const { return shape.size() == 2 ? shape[1] : 0; }
};

// Maps one HF tensor name to its TinyLoop name; empty for unknown names. For q/k/v projections
// the name of the fused weight is returned and *part is set to 0/1/2 (else -1).
std::string hf_to_tinyloop_name(const std::string& hf_name, int* part);

// The inverse: the HF tensors a TinyLoop entry `name` is made of, each with the columns [n0, n1)
// of the TinyLoop tensor it fills (attn_qkv and attn_qkv.bias: q | k | v along N, widths from
// `c`; every other entry one tensor, all columns). Empty for a name the mapping does not know.
// For exports (tl-export) and for GPTQ checkpoints read as models (model_weights.h).
struct HfSource {
  std::string hf;         // "model.layers.0.self_attn.k_proj.weight"
  int64_t n0 = 0, n1 = 0;
};
std::vector<HfSource> tinyloop_to_hf_names(const std::string& name, const ModelConfig& c);

// Rotary caches some HF checkpoints still carry (transformers recomputes them from the config).
bool is_ignorable_hf_tensor(const std::string& hf_name);


class CheckpointImport {
 public:
  // `only`: the --only regex, empty for the default selection. Throws tl::Error (bad input,
  // unknown layout, regex syntax, a q/k/v triple with mismatched shapes, ...).
  CheckpointImport(const std::string& path, const std::string& only);
  ~CheckpointImport();
  CheckpointImport(const CheckpointImport&) = delete;
  CheckpointImport& operator=(const CheckpointImport&) = delete;

  CheckpointKind kind() const;
  const std::string& path() const;
  bool has_config() const;
  const ModelConfig& config() const;  // throws when !has_config()
  const std::vector<ImportEntry>& entries() const;

  // A linear weight (kLinear / kDenseLinear) as float32 [K, N], checked finite.
  std::vector<float> read_linear(const ImportEntry& e) const;
  // The tensor to store for kDense / kDenseLinear entries (dtype kept; linears as [K, N]).
  Tensor read_dense(const ImportEntry& e) const;
  // A linear weight (kLinear / kDenseLinear) as the input stores it, unconverted: a safetensors
  // input's parts concatenated along N in PyTorch's orientation ([N, K], the parts' common dtype;
  // stores_transposed() is true), a .tinyloop's dense [K, N]. Not checked finite.
  Tensor read_stored_linear(const ImportEntry& e) const;
  bool stores_transposed() const;
  // The opened .tinyloop (kTinyloop inputs only; for copying quantized entries and config).
  const TinyloopReader* tinyloop() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tl
