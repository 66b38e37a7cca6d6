// The Marlin weight layout: packer, decoder, scale permutations and delta (see marlin_layout.h
// for the closed-form layout this file implements).
//
// Speed. The packer must beat 1 GB/s of int4 codes on two cores, i.e. ~2 G codes/s, so it
// never evaluates the per-nibble formula. It walks 16 x 64 tiles of q (16 rows of K, 64
// columns of N: exactly the 1024 codes of 128 consecutive words of one B row) and builds each
// output word from the inverse mapping. Writing lane = 4 cc + r (r = lane % 4, cc = lane / 4)
// and x = 16 j + cc, word c = 16 cc + 4 r + j of a tile is
//   byte 0 = q[2r][x]   | q[2r+8][x]   << 4     byte 1 = the same at column x + 8
//   byte 2 = q[2r+1][x] | q[2r+9][x]   << 4     byte 3 = the same at column x + 8
// (rows relative to 16 t, columns to 64 b). pack_strip does this with SSSE3 (merge, pair,
// interleave, 4 x 4 transpose; see there) or portably in two cache-resident passes. The tile's
// 1 KiB of input stays in L1; memory sees one streaming read of q and one streaming write of
// B. Strips of 16 rows are split across threads.
#include "formats/marlin_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#if defined(__SSSE3__) || (defined(__F16C__) && defined(__AVX__))
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/parallel.h"

namespace tl {
namespace {

// Row and column offsets of nibble i inside its word (the two tables of the layout).
constexpr int kNibbleRow[8] = {0, 8, 0, 8, 1, 9, 1, 9};
constexpr int kNibbleCol[8] = {0, 0, 8, 8, 0, 0, 8, 8};
// Per-column scale permutation: column offsets inside a row of 32.
constexpr int kScaleSingle[8] = {0, 1, 8, 9, 16, 17, 24, 25};

// Below this many codes per piece, starting a thread costs more than it saves (~50 us).
constexpr int64_t kMinCodesPerThread = int64_t(1) << 20;

// Runs f(begin, end) over [0, n) strips in pieces of a fixed size (at least kMinCodesPerThread
// codes each, so a small weight stays on the caller's thread), on the project's one pool
// (core/parallel.h) with up to `threads` threads (<= 0: every core).
template <class F>
void parallel_strips(int64_t n, int64_t codes_per_strip, int threads, F&& f) {
  const int64_t per = std::max<int64_t>(1, kMinCodesPerThread / std::max<int64_t>(1, codes_per_strip));
  const int64_t pieces = (n + per - 1) / per;
  parallel_for(pieces, resolve_threads(threads), [&](int64_t i) { f(i * per, std::min(n, (i + 1) * per)); });
}

// Packs one 16-row strip (all N / 64 tiles of it) into out = B + t * 2N. Returns the OR of
// every code read, so the caller learns about codes > 15 without a second pass over q (when
// one is present the output is garbage, but the caller throws before anyone sees it).
#if defined(__SSSE3__)
// SSSE3 version. Per tile and r, each 16-column chunk j gives, after merging row pairs into
// bytes, pairing byte x with x + 8 (pshufb) and interleaving lo/hi halves, the 8 words (cc =
// 0..7) of one j. Words with the same cc and r and j = 0..3 are 4 consecutive words of B
// (index 16 cc + 4 r + j), so a 4 x 4 transpose of 32-bit lanes turns [j][cc] into [cc][j]
// and every store is a full 16-byte store.
uint8_t pack_strip(const uint8_t* strip, int64_t N, uint32_t* out) {
  const __m128i pair = _mm_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  __m128i seen = _mm_setzero_si128();
  for (int64_t b = 0; b < N / 64; ++b) {
    uint32_t* o = out + 128 * b;
    for (int r = 0; r < 4; ++r) {
      const uint8_t* a = strip + (2 * r) * N + 64 * b;
      const uint8_t* a8 = strip + (2 * r + 8) * N + 64 * b;
      const uint8_t* c = strip + (2 * r + 1) * N + 64 * b;
      const uint8_t* c8 = strip + (2 * r + 9) * N + 64 * b;
      __m128i wlo[4], whi[4];  // [j]: words cc = 0..3 and cc = 4..7
      for (int j = 0; j < 4; ++j) {
        const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16 * j));
        const __m128i va8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a8 + 16 * j));
        const __m128i vc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 16 * j));
        const __m128i vc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c8 + 16 * j));
        seen = _mm_or_si128(seen, _mm_or_si128(_mm_or_si128(va, va8), _mm_or_si128(vc, vc8)));
        // Codes are < 16, so a 16-bit shift by 4 never carries into the neighbouring byte.
        const __m128i lo = _mm_shuffle_epi8(_mm_or_si128(va, _mm_slli_epi16(va8, 4)), pair);
        const __m128i hi = _mm_shuffle_epi8(_mm_or_si128(vc, _mm_slli_epi16(vc8, 4)), pair);
        wlo[j] = _mm_unpacklo_epi16(lo, hi);
        whi[j] = _mm_unpackhi_epi16(lo, hi);
      }
      for (int half = 0; half < 2; ++half) {
        const __m128i* w = half ? whi : wlo;
        const __m128i t0 = _mm_unpacklo_epi32(w[0], w[1]), t1 = _mm_unpacklo_epi32(w[2], w[3]);
        const __m128i t2 = _mm_unpackhi_epi32(w[0], w[1]), t3 = _mm_unpackhi_epi32(w[2], w[3]);
        uint32_t* dst = o + 64 * half + 4 * r;  // cc = 4 * half + i at dst + 16 i
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 0), _mm_unpacklo_epi64(t0, t1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), _mm_unpackhi_epi64(t0, t1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 32), _mm_unpacklo_epi64(t2, t3));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 48), _mm_unpackhi_epi64(t2, t3));
      }
    }
  }
  alignas(16) uint8_t bytes[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(bytes), seen);
  uint8_t acc = 0;
  for (uint8_t v : bytes) acc |= v;
  return acc;
}
#else
// Portable version: merge row pairs into bytes (contiguous, auto-vectorised), then assemble
// words in output order.
uint8_t pack_strip(const uint8_t* strip, int64_t N, uint32_t* out) {
  uint8_t seen = 0;
  for (int64_t b = 0; b < N / 64; ++b) {
    // lo[r][x]: rows 2r / 2r+8 merged into one byte; hi[r][x]: rows 2r+1 / 2r+9.
    alignas(64) uint8_t lo[4][64];
    alignas(64) uint8_t hi[4][64];
    for (int r = 0; r < 4; ++r) {
      const uint8_t* a = strip + (2 * r) * N + 64 * b;
      const uint8_t* a8 = strip + (2 * r + 8) * N + 64 * b;
      const uint8_t* c = strip + (2 * r + 1) * N + 64 * b;
      const uint8_t* c8 = strip + (2 * r + 9) * N + 64 * b;
      uint8_t s = 0;
      for (int x = 0; x < 64; ++x) {
        lo[r][x] = uint8_t(a[x] | (a8[x] << 4));
        hi[r][x] = uint8_t(c[x] | (c8[x] << 4));
        s |= uint8_t(a[x] | a8[x] | c[x] | c8[x]);
      }
      seen |= s;
    }
    uint32_t* o = out + 128 * b;
    for (int cc = 0; cc < 8; ++cc)
      for (int r = 0; r < 4; ++r)
        for (int j = 0; j < 4; ++j) {
          const int x = 16 * j + cc;
          o[16 * cc + 4 * r + j] = uint32_t(lo[r][x]) | uint32_t(lo[r][x + 8]) << 8 |
                                   uint32_t(hi[r][x]) << 16 | uint32_t(hi[r][x + 8]) << 24;
        }
  }
  return seen;
}
#endif

// The inverse of pack_strip.
void unpack_strip(const uint32_t* in, int64_t N, uint8_t* strip) {
  for (int64_t b = 0; b < N / 64; ++b) {
    const uint32_t* w = in + 128 * b;
    for (int cc = 0; cc < 8; ++cc)
      for (int r = 0; r < 4; ++r) {
        uint8_t* a = strip + (2 * r) * N + 64 * b;
        uint8_t* a8 = strip + (2 * r + 8) * N + 64 * b;
        uint8_t* c = strip + (2 * r + 1) * N + 64 * b;
        uint8_t* c8 = strip + (2 * r + 9) * N + 64 * b;
        for (int j = 0; j < 4; ++j) {
          const uint32_t v = w[16 * cc + 4 * r + j];
          const int x = 16 * j + cc;
          a[x] = v & 15u;
          a8[x] = (v >> 4) & 15u;
          a[x + 8] = (v >> 8) & 15u;
          a8[x + 8] = (v >> 12) & 15u;
          c[x] = (v >> 16) & 15u;
          c8[x] = (v >> 20) & 15u;
          c[x + 8] = (v >> 24) & 15u;
          c8[x + 8] = (v >> 28) & 15u;
        }
      }
  }
}

void check_code_shape(int64_t K, int64_t N) {
  if (K <= 0 || N <= 0 || K % 16 != 0 || N % 64 != 0)
    throw Error("Marlin codes need K % 16 == 0 and N % 64 == 0, got K = " + std::to_string(K) +
                ", N = " + std::to_string(N));
}

void check_scale_shape(int64_t G, int64_t N, bool per_column) {
  const int64_t row = per_column ? 32 : 64;
  if (G <= 0 || N <= 0 || (G * N) % row != 0)
    throw Error("Marlin scale permutation needs G * N % " + std::to_string(row) +
                " == 0, got G = " + std::to_string(G) + ", N = " + std::to_string(N));
}

std::string fmt_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", double(v));
  return buf;
}

// Where permuted element i of a [G, N] scale array comes from in the natural one: per column,
// rows of 32 with out[8a + c] = s[2a + {0,1,8,9,16,17,24,25}[c]]; grouped, rows of 64 with
// out[8a + b] = s[a + 8b]. Both directions of the permutation use it.
int64_t scale_source(int64_t i, bool per_column) {
  if (per_column) {
    const int64_t row = i & ~int64_t(31), j = i & 31;
    return row + 2 * (j / 8) + kScaleSingle[j % 8];
  }
  const int64_t row = i & ~int64_t(63), j = i & 63;
  return row + j / 8 + 8 * (j % 8);
}

}  // namespace

void marlin_pack_codes_ref(const uint8_t* q, int64_t K, int64_t N, int32_t* B) {
  check_code_shape(K, N);
  for (int64_t t = 0; t < K / 16; ++t)
    for (int64_t m = 0; m < 2 * N; ++m) {
      const int64_t b = m / 128, c = m % 128, lane = c / 4, j = c % 4;
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) {
        const int64_t k = 16 * t + 2 * (lane % 4) + kNibbleRow[i];
        const int64_t n = 64 * b + 16 * j + lane / 4 + kNibbleCol[i];
        word |= uint32_t(q[k * N + n] & 15u) << (4 * i);
      }
      B[t * 2 * N + m] = int32_t(word);
    }
}

void marlin_unpack_codes_ref(const int32_t* B, int64_t K, int64_t N, uint8_t* q) {
  check_code_shape(K, N);
  for (int64_t t = 0; t < K / 16; ++t)
    for (int64_t m = 0; m < 2 * N; ++m) {
      const int64_t b = m / 128, c = m % 128, lane = c / 4, j = c % 4;
      const uint32_t word = uint32_t(B[t * 2 * N + m]);
      for (int i = 0; i < 8; ++i) {
        const int64_t k = 16 * t + 2 * (lane % 4) + kNibbleRow[i];
        const int64_t n = 64 * b + 16 * j + lane / 4 + kNibbleCol[i];
        q[k * N + n] = uint8_t((word >> (4 * i)) & 15u);
      }
    }
}

void marlin_pack_codes(const uint8_t* q, int64_t K, int64_t N, int32_t* B, int threads) {
  check_code_shape(K, N);
  const int64_t strips = K / 16;
  std::vector<uint8_t> seen(size_t(strips), 0);
  parallel_strips(strips, 16 * N, threads, [&](int64_t s0, int64_t s1) {
    for (int64_t t = s0; t < s1; ++t)
      seen[size_t(t)] = pack_strip(q + t * 16 * N, N, reinterpret_cast<uint32_t*>(B) + t * 2 * N);
  });
  for (int64_t t = 0; t < strips; ++t) {
    if (seen[size_t(t)] <= 15) continue;
    for (int64_t i = t * 16 * N; i < (t + 1) * 16 * N; ++i)
      if (q[i] > 15)
        throw Error("code " + std::to_string(int(q[i])) + " at [" + std::to_string(i / N) + ", " +
                    std::to_string(i % N) + "] is outside [0, 15]");
  }
}

void marlin_pack_codes(const uint8_t* q, int64_t K, int64_t N, int32_t* B) {
  marlin_pack_codes(q, K, N, B, 0);
}

void marlin_unpack_codes(const int32_t* B, int64_t K, int64_t N, uint8_t* q) {
  check_code_shape(K, N);
  parallel_strips(K / 16, 16 * N, 0, [&](int64_t s0, int64_t s1) {
    for (int64_t t = s0; t < s1; ++t)
      unpack_strip(reinterpret_cast<const uint32_t*>(B) + t * 2 * N, N, q + t * 16 * N);
  });
}

void marlin_permute_scales(const half_bits* s, int64_t G, int64_t N, bool per_column,
                           half_bits* out) {
  check_scale_shape(G, N, per_column);
  for (int64_t i = 0; i < G * N; ++i) out[i] = s[scale_source(i, per_column)];
}

void marlin_unpermute_scales(const half_bits* s_packed, int64_t G, int64_t N, bool per_column,
                             half_bits* out) {
  check_scale_shape(G, N, per_column);
  for (int64_t i = 0; i < G * N; ++i) out[scale_source(i, per_column)] = s_packed[i];
}

std::vector<half_bits> compact_delta(const QuantWeight& w, const MarlinSection& m) {
  if (w.scale.size() != w.zero.size())
    throw Error("scale and zero differ in size (" + std::to_string(w.scale.size()) + " vs " +
                    std::to_string(w.zero.size()) + ")", "", w.name);
  std::vector<half_bits> d(w.zero.size());
  marlin_delta(w.scale.data(), w.zero.data(), int64_t(d.size()), d.data());
  const int64_t N = w.N, NP = m.columns(N);
  if (NP == N || N <= 0) return d;
  return widen_columns(d.data(), int64_t(d.size()) / N, N, NP, half_bits(0));
}

void marlin_delta(const half_bits* scale, const half_bits* zero, int64_t count, half_bits* delta) {
  // Both terms are exact in float32 (8 * scale only shifts the exponent, so a fused multiply-add
  // gives the same result); the sum is rounded once to float32 and once to float16, exactly as
  // the golden files (and the GPU) do it. F16C converts with the same round-to-nearest-even.
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  const __m256 eight = _mm256_set1_ps(8.0f);
  for (; i + 8 <= count; i += 8) {
    const __m256 s = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scale + i)));
    const __m256 z = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zero + i)));
    const __m256 d = _mm256_add_ps(z, _mm256_mul_ps(eight, s));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(delta + i),
                     _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < count; ++i)
    delta[i] = float_to_half(half_to_float(zero[i]) + 8.0f * half_to_float(scale[i]));
}

MarlinSection marlin_pack(const QuantWeight& w) { return marlin_pack(w, ""); }

MarlinSection marlin_pack(const QuantWeight& w, const std::string& file) {
  MarlinSection m;
  marlin_pack_into(w, file, &m);
  return m;
}

void marlin_pack_into(const QuantWeight& w, const std::string& file, MarlinSection* out) {
  const std::string& item = w.name;
  if (w.bits != 4)
    throw Error("bits = " + std::to_string(w.bits) + ": Marlin packs 4-bit codes only", file, item);
  if (w.K <= 0 || w.N <= 0 || w.group_size <= 0 || w.K % w.group_size != 0)
    throw Error("expected K, N > 0 and a group size dividing K, got K = " + std::to_string(w.K) +
                    ", N = " + std::to_string(w.N) + ", group_size = " + std::to_string(w.group_size),
                file, item);
  const MarlinGate gate = marlin_gate(w.K, w.N, w.group_size);
  if (!gate.ok) throw Error("not Marlin-compatible: " + gate.reason, file, item);
  const int64_t K = w.K, N = w.N, G = w.groups();
  if (int64_t(w.q.size()) != K * N)
    throw Error("q holds " + std::to_string(w.q.size()) + " codes, expected K * N = " +
                    std::to_string(K * N),
                file, item);
  if (int64_t(w.scale.size()) != G * N || int64_t(w.zero.size()) != G * N)
    throw Error("scale/zero hold " + std::to_string(w.scale.size()) + "/" +
                    std::to_string(w.zero.size()) + " values, expected G * N = " +
                    std::to_string(G * N),
                file, item);
  // Range checks on the float16 bits (branch-free, so the compiler vectorises the scan):
  // scale must be positive, non-zero and finite; zero finite.
  uint32_t bad = 0;
  for (int64_t i = 0; i < G * N; ++i) {
    const uint32_t s = w.scale[size_t(i)], z = w.zero[size_t(i)];
    bad |= uint32_t((s & 0x8000u) != 0) | uint32_t((s & 0x7c00u) == 0x7c00u) | uint32_t(s == 0) |
           uint32_t((z & 0x7c00u) == 0x7c00u);
  }
  if (bad) {
    for (int64_t i = 0; i < G * N; ++i) {
      const std::string at = "[" + std::to_string(i / N) + ", " + std::to_string(i % N) + "]";
      const float s = half_to_float(w.scale[size_t(i)]);
      if (!std::isfinite(s) || !(s > 0.0f))
        throw Error("scale" + at + " = " + fmt_float(s) + ": expected finite and > 0", file, item);
      const float z = half_to_float(w.zero[size_t(i)]);
      if (!std::isfinite(z)) throw Error("zero" + at + " = " + fmt_float(z) + ": expected finite", file, item);
    }
  }

  // zero + 8 * scale can leave float16's range for huge scales (> ~8190): the kernel would add
  // an infinity, so such a weight is refused rather than packed.
  for (int64_t i = 0; i < G * N; ++i) {
    const half_bits d = float_to_half(half_to_float(w.zero[size_t(i)]) + 8.0f * half_to_float(w.scale[size_t(i)]));
    if ((d & 0x7c00u) == 0x7c00u)
      throw Error("delta[" + std::to_string(i / N) + ", " + std::to_string(i % N) +
                      "] = zero + 8 * scale overflows float16 (scale " +
                      fmt_float(half_to_float(w.scale[size_t(i)])) + ", zero " +
                      fmt_float(half_to_float(w.zero[size_t(i)])) + ")",
                  file, item);
  }
  // N not a multiple of 128: the section gets marlin_padded_n(N) columns, the extra ones zero
  // weights: code 8, scale 1 and zero -8, so (q - 8) s = 0 and delta = zero + 8 scale = 0.
  const int64_t NP = marlin_padded_n(N);
  std::vector<uint8_t> q_pad;
  std::vector<half_bits> scale_pad, zero_pad;
  const uint8_t* q = w.q.data();
  const half_bits *scale = w.scale.data(), *zero = w.zero.data();
  if (NP != N) {
    q = (q_pad = widen_columns(q, K, N, NP, uint8_t(8))).data();
    scale = (scale_pad = widen_columns(scale, G, N, NP, float_to_half(1.0f))).data();
    zero = (zero_pad = widen_columns(zero, G, N, NP, float_to_half(-8.0f))).data();
  }
  MarlinSection& m = *out;
  m.groupsize = marlin_groupsize_arg(K, w.group_size);
  m.layout = kMarlinLayoutTag;
  m.padded_n = NP != N ? NP : 0;
  m.B.resize(size_t(K / 16 * 2 * NP));  // keeps (and does not refill) the pages already held
  try {
    marlin_pack_codes(q, K, NP, m.B.data());
  } catch (const Error& e) {
    throw Error(e.what(), file, item);  // the code and its [k, n], now with file and weight
  }
  m.s.resize(size_t(G * NP));
  marlin_permute_scales(scale, G, NP, m.groupsize == -1, m.s.data());
  m.delta.resize(size_t(G * NP));
  marlin_delta(scale, zero, G * NP, m.delta.data());
}

MarlinDecoded marlin_decode(const MarlinSection& m, int64_t K, int64_t N, int64_t group_size,
                            const std::string& file, const std::string& item) {
  if (m.layout != kMarlinLayoutTag)
    throw Error("marlin layout '" + m.layout + "', expected '" + kMarlinLayoutTag + "'", file, item);
  if (K <= 0 || N <= 0 || K % 16 != 0 || m.columns(N) % 64 != 0 || group_size <= 0 || K % group_size != 0)
    throw Error("cannot decode a Marlin section for K = " + std::to_string(K) + ", N = " +
                    std::to_string(N) + ", group_size = " + std::to_string(group_size),
                file, item);
  const int64_t want_gs = marlin_groupsize_arg(K, group_size);
  if (m.groupsize != want_gs)
    throw Error("marlin groupsize " + std::to_string(m.groupsize) + ", expected " +
                    std::to_string(want_gs) + " for group_size " + std::to_string(group_size),
                file, item);
  const int64_t G = K / group_size, NP = m.columns(N);
  if (!marlin_padding_ok(N, m.padded_n))
    throw Error("marlin section of " + std::to_string(m.padded_n) + " columns: expected " + marlin_padding_expected(N),
                file, item);
  if (int64_t(m.B.size()) != K / 16 * 2 * NP)
    throw Error("marlin/B holds " + std::to_string(m.B.size()) + " words, expected [" +
                    std::to_string(K / 16) + ", " + std::to_string(2 * NP) + "]",
                file, item);
  if (int64_t(m.s.size()) != G * NP || (!m.delta.empty() && int64_t(m.delta.size()) != G * NP))
    throw Error("marlin/s or marlin/delta size differs from [" + std::to_string(G) + ", " +
                    std::to_string(NP) + "]",
                file, item);
  MarlinDecoded d;
  d.q.resize(size_t(K * NP));
  marlin_unpack_codes(m.B.data(), K, NP, d.q.data());
  d.scale.resize(size_t(G * NP));
  marlin_unpermute_scales(m.s.data(), G, NP, m.groupsize == -1, d.scale.data());
  if (NP != N) {  // the weight's own columns; the padding is returned apart
    d.pad_q = column_range(d.q.data(), K, NP, N, NP);
    d.q = column_range(d.q.data(), K, NP, 0, N);
    d.pad_scale = column_range(d.scale.data(), G, NP, N, NP);
    d.scale = column_range(d.scale.data(), G, NP, 0, N);
  }
  return d;
}

}  // namespace tl
