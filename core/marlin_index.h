// Where one weight's code and scale sit in a Marlin section (the layout of formats/marlin_layout.h,
// IST-DASLab/marlin Layer.pack), element by element: for kernels that read a single (k, n)
// instead of whole fragments (the dequantize-to-fp16 path, cuda/marlin_dequant.cu). Host and
// device; tested against the packer in tests/formats/test_marlin_index.cpp.
//
// Codes. Word B[t, m] (t = k / 16; m = 128 b + c, b = n / 64) holds nibble i at bits 4i..4i+3
// for k = 16 t + 2 (lane % 4) + 8 (i & 1) + ((i >> 2) & 1) and n = 64 b + 16 j + lane / 4 +
// 8 ((i >> 1) & 1), with c = 4 lane + j. Read backwards from kk = k % 16 and nn = n % 64:
// bit 0 of kk is bit 2 of i, bits 1..2 of kk are lane % 4, bit 3 of kk is bit 0 of i; bits 0..2
// of nn are lane / 4, bit 3 is bit 1 of i, bits 4..5 are j.
// Scales (s [G, N] flat): grouped, rows of 64, packed[8a + b] = natural[a + 8b] -- its own
// inverse; per column (G == 1), rows of 32, packed[8a + c] = natural[2a + (c & 1) + 8 (c >> 1)].
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TL_HD __host__ __device__ __forceinline__
#else
#define TL_HD inline
#endif

namespace tl {

struct MarlinCodeAt {
  int64_t word;  // flat index into B [K/16, 2N]
  int shift;     // the code is (B[word] >> shift) & 15
};

TL_HD MarlinCodeAt marlin_code_at(int64_t k, int64_t n, int64_t N) {
  const int kk = int(k & 15), nn = int(n & 63);
  const int lane = 4 * (nn & 7) + ((kk >> 1) & 3);
  const int j = nn >> 4;
  const int i = ((kk >> 3) & 1) | (((nn >> 3) & 1) << 1) | ((kk & 1) << 2);
  return {(k >> 4) * 2 * N + 128 * (n >> 6) + 4 * lane + j, 4 * i};
}

// Flat index into the permuted s of the natural scale [g, n].
TL_HD int64_t marlin_scale_at(int64_t g, int64_t n, int64_t N, bool per_column) {
  const int64_t idx = g * N + n;
  if (per_column) {
    const int w = int(idx & 31);
    const int c = ((w >> 3) << 1) | (w & 1);
    return (idx & ~int64_t(31)) + 8 * ((w >> 1) & 3) + c;
  }
  const int w = int(idx & 63);
  return (idx & ~int64_t(63)) + 8 * (w & 7) + (w >> 3);
}

}  // namespace tl
