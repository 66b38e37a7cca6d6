// TinyLoop's two-codes-per-byte layout of 4-bit codes (the .tinyloop `q` dataset, and what the
// native int4_gemm reads on the GPU): byte [k, j] of a [K, ceil(N/2)] array holds code [k, 2j]
// in its low nibble and code [k, 2j + 1] in its high nibble; an odd N leaves the last high
// nibble 0. The one implementation, used by the file reader and writer and by every upload.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/parallel.h"

namespace tl {

inline int64_t packed_row_bytes(int64_t N) { return N / 2 + N % 2; }

// codes [K, N] (one 0..15 code per byte; higher bits are ignored) -> packed [K, ceil(N/2)] at
// `out` (K * packed_row_bytes(N) bytes, every one written).
inline void pack_nibbles_into(const uint8_t* codes, int64_t K, int64_t N, uint8_t* out) {
  const int64_t W = packed_row_bytes(N);
  const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(1, N));  // rows per piece
  parallel_chunks(K, rows, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      uint8_t* row = out + k * W;
      for (int64_t j = 0; j < W; ++j) row[j] = 0;
      for (int64_t n = 0; n < N; ++n) row[n / 2] |= uint8_t((codes[k * N + n] & 0xf) << (4 * (n & 1)));
    }
  });
}
inline std::vector<uint8_t> pack_nibbles(const uint8_t* codes, int64_t K, int64_t N) {
  std::vector<uint8_t> p(size_t(K * packed_row_bytes(N)));
  pack_nibbles_into(codes, K, N, p.data());
  return p;
}

// packed [K, ceil(N/2)] -> codes [K, N].
inline std::vector<uint8_t> unpack_nibbles(const uint8_t* packed, int64_t K, int64_t N) {
  const int64_t W = packed_row_bytes(N);
  std::vector<uint8_t> q(size_t(K * N));
  const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(1, N));
  parallel_chunks(K, rows, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t n = 0; n < N; ++n) {
        const uint8_t b = packed[k * W + n / 2];
        q[size_t(k * N + n)] = (n & 1) ? uint8_t(b >> 4) : uint8_t(b & 0xf);
      }
  });
  return q;
}

}  // namespace tl
