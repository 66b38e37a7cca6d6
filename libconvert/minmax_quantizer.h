// Asymmetric 4-bit min-max quantization: the parameters and the rounding of IST-DASLab/gptq
// `quant.py` (`Quantizer(bits=4, perchannel=True, sym=False, mse=False)`, `quantize`), reproduced
// operation for operation in float32 so codes and parameters match upstream bit for bit:
//
//   xmin = min(min_k w, 0), xmax = max(max_k w, 0)      (the range always contains 0)
//   xmin == xmax == 0  ->  xmin = -1, xmax = +1         (all-zero column of a group)
//   scale = (xmax - xmin) / 15                          float32 division
//   z     = round_half_even(-xmin / scale)              float32 division; torch.round is half-to-
//                                                       even (the all-zero case gives
//                                                       1/0.13333334f = 7.4999995 -> z = 7)
//   q     = clamp(round_half_even(w / scale) + z, 0, 15)
//   W_hat = scale * (q - z)                             upstream's dequantized value (float32)
//
// TinyLoop stores W_hat = q * scale + zero with float16 scale and zero = -(z * scale) (float32
// product, then one round-to-nearest-even to float16) -- see ZeroMode::kInt.
//
// ZeroMode::kFloat (`--zero float`) keeps the exact minimum as a float zero point instead of an
// integer one: xmin = min_k w, xmax = max_k w (no clamping to 0, so the grid spans exactly the
// data), scale = (xmax - xmin) / 15, zero = xmin, q = clamp(round((w - zero) / scale), 0, 15).
// Both parameters are rounded to float16 *before* quantizing, so the codes are chosen (and
// GPTQ's error feedback sees) exactly what the file stores. A constant group (xmax == xmin)
// gets scale = 1 and zero = the constant, which reconstructs it with q = 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/range_search.h"

namespace tl {

enum class ZeroMode { kInt, kFloat };

constexpr int kQuantBits = 4;
constexpr int kQuantMaxQ = (1 << kQuantBits) - 1;  // 15

const char* zero_mode_name(ZeroMode m);                   // "int" / "float"
bool zero_mode_from_name(const std::string& s, ZeroMode* out);

// Per-output-column parameters of one group (N entries each). For kInt, `zq` is the integer zero
// point z (an integral float, as upstream keeps it); for kFloat it is the float zero (= xmin).
struct MinMaxParams {
  std::vector<float> scale, zq;
  void resize(int64_t n) { scale.resize(size_t(n)); zq.resize(size_t(n)); }
};

// Round half to even, the rounding of torch.round / numpy.round (std::nearbyint in the default
// rounding mode; std::round would round 2.5 to 3).
inline float round_half_even(float x) { return __builtin_nearbyintf(x); }

// Range search (gptq-quantize --range-search): upstream GPTQ's Quantizer(mse=True) -- GPTQModel's
// `mse`, the grid search llama.cpp's quantizers also make. For each column the range above,
// [xmin, xmax], is shrunk to [s xmin, s xmax] for s = 1 - i / kRangeGrid, i = 0 ..
// kRangeMaxShrink * kRangeGrid - 1 (1.0 down to 0.21), each giving scale = (s xmax - s xmin) / 15
// and z = round_half_even(-s xmin / scale); the pair whose dequantized group has the least
// sum_k |W_hat - w|^kRangeNorm is kept, the first on ties. s = 1 comes first, so the search is
// never worse than min-max in that norm. Integer zero points only (ZeroMode::kInt). The grid's
// constants: core/range_search.h (shared with the GPU's search).

// Parameters over `rows` rows of a row-major [rows, N] block with leading dimension `ld`
// (columns n are independent). Writes p->scale / p->zq (resized to N). range_search: as above
// (kInt only; tl::Error for kFloat).
void minmax_find_params(const float* w, int64_t rows, int64_t N, int64_t ld, ZeroMode mode,
                        MinMaxParams* p, bool range_search = false);

// Quantizes one row w[0..N) with per-column parameters: codes to q (may be null) and the
// dequantized values to w_hat (may be null).
void minmax_quantize_row(const float* w, int64_t N, const MinMaxParams& p, ZeroMode mode,
                         uint8_t* q, float* w_hat);

// TinyLoop's stored parameters from a group's MinMaxParams: scale16 = fp16(scale),
// zero16 = fp16(-(z * scale)) for kInt, fp16(zero) for kFloat. Also the float32 zero
// (zero_f32 = -(z * scale) in float32, as the golden files store it) when zero_f32 is non-null.
void minmax_storage_params(const MinMaxParams& p, ZeroMode mode, half_bits* scale16,
                           half_bits* zero16, float* zero_f32 = nullptr);

// Result of quantizing a whole [K, N] weight with contiguous groups along K.
struct MinMaxResult {
  int64_t K = 0, N = 0, group_size = 0, G = 0;  // group_size effective (== K for per-row)
  std::vector<uint8_t> q;                       // [K, N]
  std::vector<float> scale, zq;                 // [G, N] float32 parameters
  std::vector<half_bits> scale16, zero16;       // [G, N] as stored
  std::vector<float> w_hat;                     // [K, N] float32 reference dequantization
};

// Plain round-to-nearest (`--method rtn`; the golden files' rtn/ group): each group's
// parameters from the original W (with range_search: searched, see above), then every entry
// rounded. group_size: effective, 0 < group_size <= K (K: per row).
MinMaxResult rtn_quantize(const float* W, int64_t K, int64_t N, int64_t group_size,
                          ZeroMode mode, bool range_search = false);

}  // namespace tl
