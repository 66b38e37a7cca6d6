// tl-export: a .tinyloop model -> a Hugging Face model folder that transformers and vLLM load as
// a 4-bit checkpoint, in one of two formats (the layouts quant_checkpoint.h reads back):
//   --format gptq                 AutoGPTQ / GPTQModel: qweight / qzeros / scales / g_idx
//   --format compressed-tensors   llm-compressor's pack-quantized W4A16, asymmetric:
//                                 weight_packed / weight_scale / weight_zero_point / weight_shape
//
//   tl-export FILE.tinyloop --format gptq|compressed-tensors -o OUT_DIR [--from HF_DIR]
//             [--gptq-format auto|v1|v2] [--max-shard-bytes N] [--json] [--quiet]
//
// What is written (docs/format.md, "Export (tl-export)"):
//   config.json            --from's config.json with "quantization_config" for the format and
//                          torch_dtype float16; without --from, the file's own config in HF
//                          form (model_config_to_hf)
//   tokenizer files, generation_config.json   copied from --from as they are
//   model.safetensors      (or model-0000i-of-0000n.safetensors + model.safetensors.index.json
//                          above --max-shard-bytes) with HF names: the format's tensors per
//                          quantized linear, <p>.bias as stored; attn_qkv split into q_proj |
//                          k_proj | v_proj along N (exact: groups run along K); dense tensors as
//                          stored, a dense head transposed to lm_head.weight [vocab, D] (and, for
//                          compressed-tensors, named in quantization_config.ignore).
//
// Exactness. Both formats store integer zero points z with W = scale * (q - z); a TinyLoop weight
// holds q, scale (fp16) and zero (fp16) with W_hat = q * scale + zero. z = -zero / scale must be
// an integer 0..15 in every group (1..15 for GPTQ v1, whose stored nibble is z - 1: z = 0 cannot
// be stored, AutoGPTQ's known overflow), else the weight is refused by name (a --zero float
// file). q, scale and z travel exactly; the zero term becomes the exact z * scale instead of the
// file's fp16-rounded one (our quantizer rounds -(z * scale32)), so a weight moves by at most one
// fp16 step of its zero: the summary reports how many groups moved and the largest |dW|, and
// reading the folder back gives the same q and scale bit for bit and zero = fp16(-(z * scale)).
//
// Refused by name (exit 2, nothing written): a looped model (n_loop > 0: a HF Llama has no
// shared blocks), group sizes that differ between layers, K or a split's N not a multiple of 8
// (GPTQ), a ragged last group (compressed-tensors' group strategy), a config from --from that
// disagrees with the file's, an existing output path.
// The folder is built beside OUT_DIR under a temporary name and renamed into place.
#pragma once

#include <cstdint>
#include <string>

namespace tl {

struct ExportOptions {
  std::string input;                 // .tinyloop model
  std::string output;                // folder to create
  std::string from;                  // original HF folder (config, tokenizer), optional
  std::string format = "gptq";       // "gptq" or "compressed-tensors"
  // GPTQ only: "v1" (AutoGPTQ, stored z - 1), "v2" (GPTQModel, z), or "auto": v1 unless a zero
  // point is 0 (which v1 cannot store), then v2, said on stderr and in --json.
  std::string gptq_format = "auto";
  uint64_t max_shard_bytes = 5000000000ull;  // transformers' save_pretrained default
  bool json = false;                 // JSON summary on stdout
  bool quiet = false;                // no progress on stderr
};

// Runs the export; returns 0. Throws tl::Error for bad input or I/O (nothing left at OUT_DIR).
int run_tl_export(const ExportOptions& options);

}  // namespace tl
