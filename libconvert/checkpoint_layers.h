// The per-layer layouts of two more 4-bit checkpoint formats, both ways: AWQ (AutoAWQ's GEMM
// layout) and compressed-tensors' pack-quantized (what llm-compressor writes and vLLM serves).
// GPTQ's layout is in gptq_checkpoint.h; the folders are read by quant_checkpoint.h.
//
// In both, a Linear(K -> N) holds codes q in 0..15, one scale per (group, column) and an integer
// zero point z, with W[k, n] = scale[g, n] * (q[k, n] - z[g, n]), g = k / group_size. TinyLoop
// takes q and the scale as they are and zero = fp16(-(z * scale)) (z * scale is exact in fp32: a
// 4-bit integer times an 11-bit significand), the convention of the GPTQ importer.
//
// AWQ, GEMM version (quant_method "awq", version "gemm"):
//   <p>.qweight  int32 [K, N/8]   8 columns per word along N
//   <p>.qzeros   int32 [G, N/8]   the same packing (absent when zero_point is false: z = 8)
//   <p>.scales   fp16  [G, N]
//   Within a word, the nibble at bits 4*i holds column 8*(n/8) + kAwqOrder[i], AutoAWQ's order
//   {0, 2, 4, 6, 1, 3, 5, 7} (its dequantization kernel's register layout); codes and zero
//   points are stored as they are (no offset).
//
// compressed-tensors, format "pack-quantized", int weights of 4 bits:
//   <p>.weight_packed      int32 [N, ceil(K/8)]  row n: element k at bits 4*(k % 8) of word k/8,
//                                                stored as q_signed + 8 = q (the library's int4
//                                                range is -8..7); padding nibbles are 0
//   <p>.weight_scale       fp16 / bf16 / fp32 [N, G]  (strategy "group"; "channel": [N, 1])
//   <p>.weight_zero_point  int32 [ceil(N/8), G]  asymmetric only: packed along N (packed_dim 0):
//                                                column g of word row r holds z[8r + j] at
//                                                bits 4*j, stored as zp_signed + 8 = z
//   <p>.weight_shape       int32 / int64 [2] = {N, K}
//   <p>.weight_g_idx       int32 [K]  optional (actorder "group"): the group of input row k
//   and W = scale * (q_signed - zp_signed) = scale * (q - z). Symmetric: no zero point, z = 8.
//   A scale that fp16 cannot hold exactly (bf16 subnormal in fp16, an fp32 scale) is refused by
//   name: TinyLoop's scales are fp16 and the import is exact or nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/half.h"
#include "formats/tinyloop_file.h"

namespace tl {

constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// One AWQ layer as stored (row-major, little-endian).
struct AwqLayerView {
  int64_t K = 0, N = 0, G = 0, group_size = 0;  // effective group size (K for one group)
  const int32_t* qweight = nullptr;              // [K, N/8]
  const int32_t* qzeros = nullptr;               // [G, N/8], or null: z = 8
  const half_bits* scales = nullptr;             // [G, N]
};
QuantWeight awq_layer_to_tinyloop(const std::string& name, const AwqLayerView& v, const std::string& file);
// [rows, N] values 0..15 -> [rows, N/8] words in AWQ's order (qweight from codes, qzeros from z).
std::vector<int32_t> awq_pack(const std::vector<int32_t>& values, int64_t rows, int64_t N);

// One compressed-tensors layer, scales already widened to fp16 bits (ct_scale_to_half).
struct CtLayerView {
  int64_t K = 0, N = 0, G = 0, group_size = 0;   // effective group size
  const int32_t* packed = nullptr;                // [N, ceil(K/8)]
  const half_bits* scales = nullptr;              // [N, G]
  const int32_t* zero_points = nullptr;           // [ceil(N/8), G], or null: z = 8
  const int32_t* g_idx = nullptr;                 // [K], or null
};
QuantWeight ct_layer_to_tinyloop(const std::string& name, const CtLayerView& v, const std::string& file);
// codes [K, N] (TinyLoop's order) -> weight_packed [N, ceil(K/8)].
std::vector<int32_t> ct_pack_weight(const std::vector<uint8_t>& q, int64_t K, int64_t N);
// z [G, N] (0..15) -> weight_zero_point [ceil(N/8), G].
std::vector<int32_t> ct_pack_zero_points(const std::vector<int32_t>& z, int64_t G, int64_t N);

// A TinyLoop weight from codes [K, N], integer zero points [G, N] and fp16 scales [G, N]:
// zero = fp16(-(z * scale)); the converter of all three formats (GPTQ's too). Throws tl::Error
// naming `file` and `name` for a scale that is not finite and > 0 or a zero point outside 0..16
// (16: GPTQ v1's stored nibble 15, read as z - 1 + 1).
QuantWeight quant_weight_from_integer_zeros(const std::string& name, int64_t K, int64_t N, int64_t group_size,
                                            std::vector<uint8_t> q, const std::vector<int32_t>& z,
                                            std::vector<half_bits> scales, const std::string& file);

}  // namespace tl
