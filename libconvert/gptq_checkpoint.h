// GPTQ checkpoints' layout (AutoGPTQ / GPTQModel) and its conversion to TinyLoop quantized
// weights, per layer; the folder is read by quant_checkpoint.h (with AWQ and compressed-tensors).
//
// The settings are quantize_config.json or config.json's "quantization_config" (quant_method
// "gptq"). Per quantized linear layer <p> (PyTorch Linear(K -> N)):
//   <p>.qweight  int32 [K/8, N]   8 codes per word along K: row k in bits 4*(k % 8) of word k/8
//   <p>.qzeros   int32 [G, N/8]   8 zero points per word along N: column n in bits 4*(n % 8)
//   <p>.scales   fp16  [G, N]
//   <p>.g_idx    int32 [K]        optional: the group of input row k
//   <p>.bias     fp16  [N]        optional (copied as a dense tensor)
// and W[k, n] = scales[g, n] * (q[k, n] - z[g, n]) with g = g_idx[k].
//
// Zero-point conventions (quantize_config "checkpoint_format"):
//   "gptq"     (v1, AutoGPTQ and the default when the key is absent): the stored nibble is
//              z - 1 (AutoGPTQ subtracted 1 before packing and its kernels add it back per
//              nibble); so z = nibble + 1, in [1, 16]. A symmetric v1 checkpoint stores 7.
//   "gptq_v2"  (GPTQModel): the stored nibble is z itself, in [0, 15]; symmetric stores 8.
// Symmetric checkpoints are checked to carry z == 8 everywhere, which also catches a v1 file
// labelled v2 or the reverse. Other formats ("marlin", "bitblas", ...) and bits != 4 are refused.
//
// Conversion to TinyLoop: q unchanged, scale = scales (fp16 bits), zero = fp16(-(z * scale))
// (z * scale is exact in fp32; one rounding to fp16, the golden files' convention), group_size
// = K when the checkpoint's group_size is -1. Act-order (desc_act) checkpoints whose g_idx is
// not k / group_size are refused: TinyLoop groups are contiguous row blocks, and honouring such
// a g_idx would need the rows of W (and columns of every activation) permuted at run time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/half.h"
#include "formats/model_config.h"
#include "formats/tensor.h"
#include "formats/tinyloop_file.h"

namespace tl {

struct GptqCheckpointConfig {
  int bits = 4;
  int64_t group_size = 128;            // as stored; -1 = one group per output column
  bool sym = true;
  bool desc_act = false;
  std::string checkpoint_format = "gptq";  // "gptq" (v1) or "gptq_v2"
  bool zeros_minus_one = true;         // v1: stored nibble = z - 1
  std::string source;                  // the file the settings came from
};

// Reads and checks GPTQ's quantization settings (throws tl::Error naming the file and key).
GptqCheckpointConfig gptq_config_from_json(const nlohmann::json& q, const std::string& file);

// One layer's tensors as stored (row-major, little-endian), for the pure conversion below.
struct GptqLayerView {
  int64_t K = 0, N = 0, G = 0;
  const int32_t* qweight = nullptr;    // [K/8, N]
  const int32_t* qzeros = nullptr;     // [G, N/8]
  const half_bits* scales = nullptr;   // [G, N]
  const int32_t* g_idx = nullptr;      // [K] or null
};

// Converts one layer to a TinyLoop QuantWeight (no Marlin section). Throws tl::Error naming
// `file` and `name` for a non-contiguous g_idx, scales that are not finite and > 0, or
// symmetric zero points other than 8.
QuantWeight gptq_layer_to_tinyloop(const std::string& name, const GptqLayerView& v,
                                   const GptqCheckpointConfig& c, const std::string& file);

// The inverse packing, for tests and for writing GPTQ checkpoints: codes [K, N] -> qweight
// [K/8, N]; integer zero points [G, N] -> qzeros [G, N/8] (minus one per nibble for v1).
std::vector<int32_t> gptq_pack_qweight(const std::vector<uint8_t>& q, int64_t K, int64_t N);
std::vector<int32_t> gptq_pack_qzeros(const std::vector<int32_t>& z, int64_t G, int64_t N,
                                      bool zeros_minus_one);

}  // namespace tl
