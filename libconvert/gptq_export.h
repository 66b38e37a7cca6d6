// tl-export --format gptq: a .tinyloop model -> a Hugging Face model folder in the AutoGPTQ /
// GPTQModel layout (the one gptq_checkpoint.h reads), which transformers, vLLM and GPTQModel load
// as a GPTQ checkpoint.
//
//   tl-export FILE.tinyloop --format gptq -o OUT_DIR [--from HF_DIR] [--gptq-format v1|v2]
//             [--max-shard-bytes N] [--json] [--quiet]
//
// What is written (docs/format.md, "GPTQ export"):
//   config.json            --from's config.json with "quantization_config" (quant_method gptq,
//                          bits 4, group_size, sym false, desc_act false, checkpoint_format,
//                          lm_head) and torch_dtype float16; without --from, the file's own
//                          config in HF form (model_config_to_hf)
//   tokenizer files, generation_config.json   copied from --from as they are
//   model.safetensors      (or model-0000i-of-0000n.safetensors + model.safetensors.index.json
//                          above --max-shard-bytes) with HF names: per quantized linear <p>
//                          qweight int32 [K/8, N], qzeros int32 [G, N/8], scales fp16 [G, N],
//                          g_idx int32 [K] (= k / group_size: TinyLoop groups are contiguous),
//                          <p>.bias as stored; attn_qkv split into q_proj | k_proj | v_proj
//                          along N (exact: groups run along K); dense tensors as stored, a dense
//                          head transposed to lm_head.weight [vocab, D].
//
// Exactness. GPTQ stores integer zero points z with W = scales * (q - z); a TinyLoop weight holds
// q, scale (fp16) and zero (fp16) with W_hat = q * scale + zero. z = -zero / scale must be an
// integer 0..15 in every group (1..15 for v1, whose stored nibble is z - 1: z = 0 cannot be
// stored, AutoGPTQ's known overflow), else the weight is refused by name (a --zero float file).
// q, scale and z travel exactly; the zero term becomes the exact z * scale instead of the file's
// fp16-rounded one (our quantizer rounds -(z * scale32)), so a weight moves by at most one fp16
// step of its zero: the summary reports how many groups moved and the largest |dW|, and reading
// the folder back (gptq_checkpoint.h) gives the same q and scale bit for bit and zero =
// fp16(-(z * scale)).
//
// Refused by name (exit 2, nothing written): a looped model (n_loop > 0: a HF Llama has no
// shared blocks), group sizes that differ between layers, K or a split's N not a multiple of 8,
// a config from --from that disagrees with the file's, an existing output path.
// The folder is built beside OUT_DIR under a temporary name and renamed into place.
#pragma once

#include <cstdint>
#include <string>

namespace tl {

struct ExportOptions {
  std::string input;                 // .tinyloop model
  std::string output;                // folder to create
  std::string from;                  // original HF folder (config, tokenizer), optional
  std::string format = "gptq";       // the only one so far
  std::string gptq_format = "v1";    // "v1" (AutoGPTQ, stored z - 1) or "v2" (GPTQModel, z)
  uint64_t max_shard_bytes = 5000000000ull;  // transformers' save_pretrained default
  bool json = false;                 // JSON summary on stdout
  bool quiet = false;                // no progress on stderr
};

// Runs the export; returns 0. Throws tl::Error for bad input or I/O (nothing left at OUT_DIR).
int run_tl_export(const ExportOptions& options);

}  // namespace tl
