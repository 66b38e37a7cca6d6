// The benchmarks' layer shapes, and GPU-side random layers for bench_kernels: generating a 70B layer (470 M codes) on the CPU
// would cost more device-machine time than timing it. B is random bits (every 32-bit word is a
// valid Marlin word); the other layouts are decoded from it with the layout formulas of
// formats/marlin_layout.h, so the correctness check before timing compares the kernels
// against cuBLAS on exactly the same weights.
#pragma once

#include <cstdint>

#include <cuda_fp16.h>

namespace bench {

// The four linear layers of Llama-2-7B and -70B as a runtime runs them (K x N; gate and up as one
// gate_up weight of 2 x ffn columns, the SwiGLU pair's layout): bench_kernels times these,
// bench_gptq_gpu quantizes them (gate_up as its two ffn-column halves, one GPTQ each).
struct Layer {
  const char* set;
  const char* name;
  int K, N;
};
constexpr Layer kLayers[] = {
    {"7b", "qkv", 4096, 12288},  {"7b", "o", 4096, 4096},       {"7b", "gate_up", 4096, 22016},
    {"7b", "down", 11008, 4096}, {"70b", "qkv", 8192, 10240},   {"70b", "o", 8192, 8192},
    {"70b", "gate_up", 8192, 57344}, {"70b", "down", 28672, 8192},
};

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return uint32_t(x);
}
__device__ __forceinline__ float uniform(uint64_t seed, uint64_t i, float lo, float hi) {
  return lo + (hi - lo) * float(hash32(seed * 0x9E3779B97F4A7C15ull + i) >> 8) * (1.f / 16777216.f);
}

__global__ void fill_bits(uint32_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = hash32(seed * 0x9E3779B97F4A7C15ull + i);
}

__global__ void fill_uniform(__half* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2half_rn(uniform(seed, i, lo, hi));
}

// zero = -(z + j) * scale, z in 0..15, j in [-0.5, 0.5]; delta = fp16(zero + 8 scale).
__global__ void make_zero_delta(const __half* scale, __half* zero, __half* delta, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float z = float(hash32(seed + 7 * i) % 16) + uniform(seed + 1, i, -0.5f, 0.5f);
    const float s = __half2float(scale[i]);
    const __half zh = __float2half_rn(-z * s);
    zero[i] = zh;
    delta[i] = __float2half_rn(__half2float(zh) + 8.f * s);
  }
}

// Word B[t, m], nibble i -> code of (k, n): b = m / 128, c = m % 128, lane = c / 4, j = c % 4,
// k = 16 t + 2 (lane % 4) + {0,8,0,8,1,9,1,9}[i], n = 64 b + 16 j + lane / 4 + {0,0,8,8,0,0,8,8}[i].
// Writes TinyLoop's packed q [K, N/2] (low nibble = even n) and the fp16 weights
// w_marlin = (q - 8) s and w_hat = q scale + zero (s, scale natural [G, N]).
__global__ void decode_marlin(const uint32_t* B, const __half* scale, const __half* zero, int K, int N,
                              int group_size, uint8_t* q_tl, __half* w_marlin, __half* w_hat) {
  const size_t words = size_t(K / 16) * 2 * N;
  constexpr int kDk[8] = {0, 8, 0, 8, 1, 9, 1, 9};
  constexpr int kDn[8] = {0, 0, 8, 8, 0, 0, 8, 8};
  for (size_t w = blockIdx.x * size_t(blockDim.x) + threadIdx.x; w < words; w += size_t(gridDim.x) * blockDim.x) {
    const int t = int(w / (2 * size_t(N))), m = int(w % (2 * size_t(N)));
    const int b = m / 128, c = m % 128, lane = c / 4, j = c % 4;
    const uint32_t word = B[w];
    for (int i = 0; i < 8; ++i) {
      const int k = 16 * t + 2 * (lane % 4) + kDk[i];
      const int n = 64 * b + 16 * j + lane / 4 + kDn[i];
      const uint32_t q = (word >> (4 * i)) & 15u;
      const size_t gi = size_t(k / group_size) * N + n;
      const float s = __half2float(scale[gi]);
      w_marlin[size_t(k) * N + n] = __float2half_rn((float(q) - 8.f) * s);
      w_hat[size_t(k) * N + n] = __float2half_rn(fmaf(float(q), s, __half2float(zero[gi])));
      // Columns n and n + 1 (one TinyLoop byte) come from different Marlin words, i.e. from
      // different threads: OR the nibble into the aligned 32-bit word atomically.
      const size_t byte = size_t(k) * (N / 2) + n / 2;
      const uint32_t shift = uint32_t(8 * (byte % 4) + 4 * (n % 2));
      atomicOr(reinterpret_cast<unsigned int*>(q_tl + (byte & ~size_t(3))), q << shift);
    }
  }
}

// Marlin's scale permutations (marlin_layout.h): grouped, rows of 64: out[8a + b] = s[a + 8b];
// per column, rows of 32: out[8a + c] = s[2a + {0,1,8,9,16,17,24,25}[c]].
__global__ void permute_scales(const __half* s, __half* out, size_t n, bool per_column) {
  constexpr int kP[8] = {0, 1, 8, 9, 16, 17, 24, 25};
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    if (per_column) {
      const size_t base = i - i % 32, p = i % 32;
      out[i] = s[base + 2 * (p / 8) + kP[p % 8]];
    } else {
      const size_t base = i - i % 64, p = i % 64;
      out[i] = s[base + p / 8 + 8 * (p % 8)];
    }
  }
}

}  // namespace bench
