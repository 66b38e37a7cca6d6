// The Marlin weight layout (IST-DASLab/marlin, marlin.Layer.pack), packer and decoder.
//
// TinyLoop weights are asymmetric, W_hat[k, n] = q * scale + zero; Marlin is symmetric,
// W_marlin[k, n] = (q - 8) * s. With s = scale the codes carry over unchanged and the rest
// collapses per group into delta = zero + 8 * scale, so
//   C = A * W_hat = A * W_marlin + A_group_sum * delta.
//
// Layout of B (int32 [K/16, 2N]): word B[t, m] holds 8 nibbles; nibble i is q[k, n] with
//   b = m / 128, c = m % 128, lane = c / 4, j = c % 4,
//   k = 16 t + 2 (lane % 4) + {0,8,0,8,1,9,1,9}[i],
//   n = 64 b + 16 j + lane / 4 + {0,0,8,8,0,0,8,8}[i].
// Scales: grouped (G > 1): rows of 64, s_packed[r, 8a + b] = s[r, a + 8b];
//         per column (G == 1): rows of 32, s_packed[r, 8a + c] = s[r, 2a + {0,1,8,9,16,17,24,25}[c]].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/group_size.h"
#include "core/half.h"
#include "formats/tinyloop_file.h"

namespace tl {

// The gate (which shapes and group sizes the kernel runs) and the groupsize argument live in
// core/group_size.h, shared with the kernels and the readers.

// q: [K, N] codes 0..15 -> B: [K/16, 2N]. K % 16 == 0, N % 64 == 0. Throws tl::Error naming
// the first code outside [0, 15] (checked in the same pass). threads <= 0: one per core.
void marlin_pack_codes(const uint8_t* q, int64_t K, int64_t N, int32_t* B);
void marlin_pack_codes(const uint8_t* q, int64_t K, int64_t N, int32_t* B, int threads);
// The inverse: B -> q [K, N].
void marlin_unpack_codes(const int32_t* B, int64_t K, int64_t N, uint8_t* q);
// s: [G, N] -> permuted [G, N] (per_column selects the G == 1 permutation), and inverse.
void marlin_permute_scales(const half_bits* s, int64_t G, int64_t N, bool per_column, half_bits* out);
void marlin_unpermute_scales(const half_bits* s_packed, int64_t G, int64_t N, bool per_column,
                             half_bits* out);
// delta = float16(float32(zero) + 8 * float32(scale)), [G, N].
void marlin_delta(const half_bits* scale, const half_bits* zero, int64_t count, half_bits* delta);
// The delta of a compact weight (no stored delta): derived from its scale and zero, the one step
// that TinyloopReader::read_quant and the verifier's section reader both take; [G, NP] for the
// section m (a padded section's extra columns: 0).
std::vector<half_bits> compact_delta(const QuantWeight& w, const MarlinSection& m);

// Columns [c0, c1) of a [rows, cols] array: a padded section's own columns, or its padding.
template <class T>
std::vector<T> column_range(const T* v, int64_t rows, int64_t cols, int64_t c0, int64_t c1) {
  std::vector<T> out(size_t(rows * (c1 - c0)));
  for (int64_t r = 0; r < rows; ++r) std::copy(v + r * cols + c0, v + r * cols + c1, out.begin() + r * (c1 - c0));
  return out;
}
// A [rows, N] array widened to NP columns, the new ones `fill` (a padded section's zero weights).
template <class T>
std::vector<T> widen_columns(const T* v, int64_t rows, int64_t N, int64_t NP, T fill) {
  std::vector<T> out(size_t(rows * NP), fill);
  for (int64_t r = 0; r < rows; ++r) std::copy(v + r * N, v + (r + 1) * N, out.begin() + r * NP);
  return out;
}

// The whole section for one weight (gate checked by the caller; throws tl::Error otherwise).
MarlinSection marlin_pack(const QuantWeight& w);
// The same, naming `file` in its errors (bad codes, scales, shapes, a failed gate).
MarlinSection marlin_pack(const QuantWeight& w, const std::string& file);
// The same into `out`, reusing its buffers: a streaming packer keeps one section alive across
// weights, because faulting in fresh pages for B costs more than packing it (~0.8 GB/s).
void marlin_pack_into(const QuantWeight& w, const std::string& file, MarlinSection* out);

// Literal, one-nibble-at-a-time transcriptions of the layout formulas above: the references
// the fast tiled versions are tested against (and the definition to read first).
void marlin_pack_codes_ref(const uint8_t* q, int64_t K, int64_t N, int32_t* B);
void marlin_unpack_codes_ref(const int32_t* B, int64_t K, int64_t N, uint8_t* q);

// Decodes a whole section back into the TinyLoop view: q codes [K, N], scale [G, N] (Marlin's
// s un-permuted) and checks its shapes/groupsize/layout tag against w (throws tl::Error).
// delta may be empty (a compact weight's section, whose delta is derived on read).
// A padded section (MarlinSection::padded_n) decodes to the weight's N columns; its padding
// columns' codes and scales come back apart ([K, NP - N], [G, NP - N]; empty when not padded),
// for a checker to hold them to the format's zero weights (codes 8, scale 1).
struct MarlinDecoded {
  std::vector<uint8_t> q;
  std::vector<half_bits> scale;
  std::vector<uint8_t> pad_q;
  std::vector<half_bits> pad_scale;
};
MarlinDecoded marlin_decode(const MarlinSection& m, int64_t K, int64_t N, int64_t group_size,
                            const std::string& file = "", const std::string& item = "");

}  // namespace tl
