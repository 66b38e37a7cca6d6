// CPU references (fp64) of the libtl_cuda kernels: what each GPU launcher must compute, written
// as plainly as possible. Header-only, no CUDA: used by tests/cuda and by libverify's tiers.
// All row-major; fp16 values are raw bits (tl::half_bits); results are fp64, not rounded, so a
// caller can measure the GPU's rounding in ULPs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/half.h"
#include "core/nibbles.h"

namespace tl::cuda {

// TinyLoop's two-codes-per-byte layout (what int4_gemm reads) is core/nibbles.h.

// out[m - m0, n] = sum_k A[m, k] * W[k, n] for rows m in [m0, m1), with
//   W[k, n] = (q - 8) * scale[g, n]              when zero == nullptr (Marlin, symmetric),
//   W[k, n] = q * scale[g, n] + zero[g, n]        otherwise (TinyLoop W_hat, == int4_gemm),
//   W[k, n] = (q - 8) * scale[g, n] + delta[g, n] when zero is delta and delta_form is true
//                                                 (marlin_mm_asymmetric),
// g = k / group_size, codes q [K, N] unpacked (0..15), scale/zero natural (unpermuted) [G, N].
// sumsq (optional, same shape as out): sum_k (A[m, k] * W[k, n])^2, the square of the error
// model's sigma (libverify/tolerances.h).
inline void quant_gemm_ref(const half_bits* A, const uint8_t* q, const half_bits* scale,
                           const half_bits* zero, bool delta_form, int64_t N, int64_t K,
                           int64_t group_size, int64_t m0, int64_t m1, double* out,
                           double* sumsq = nullptr) {
  const int64_t rows = m1 - m0;
  for (int64_t i = 0; i < rows * N; ++i) out[i] = 0.0;
  if (sumsq)
    for (int64_t i = 0; i < rows * N; ++i) sumsq[i] = 0.0;
  std::vector<double> w(static_cast<size_t>(N));
  for (int64_t k = 0; k < K; ++k) {
    const int64_t g = k / group_size;
    for (int64_t n = 0; n < N; ++n) {
      const double s = half_to_float(scale[g * N + n]);
      const double code = q[k * N + n];
      if (!zero)
        w[size_t(n)] = (code - 8.0) * s;
      else if (delta_form)
        w[size_t(n)] = (code - 8.0) * s + double(half_to_float(zero[g * N + n]));
      else
        w[size_t(n)] = code * s + double(half_to_float(zero[g * N + n]));
    }
    for (int64_t r = 0; r < rows; ++r) {
      const double av = half_to_float(A[(m0 + r) * K + k]);
      double* o = out + r * N;
      for (int64_t n = 0; n < N; ++n) o[n] += av * w[size_t(n)];
      if (sumsq)
        for (int64_t n = 0; n < N; ++n) sumsq[r * N + n] += (av * w[size_t(n)]) * (av * w[size_t(n)]);
    }
  }
}

// a_sum[m, g] = sum_{k in group g} A[m, k].
inline void a_group_sum_ref(const half_bits* A, int64_t M, int64_t K, int64_t group_size,
                            double* a_sum) {
  const int64_t G = K / group_size;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < G; ++g) {
      double s = 0.0;
      for (int64_t k = g * group_size; k < (g + 1) * group_size; ++k)
        s += half_to_float(A[m * K + k]);
      a_sum[m * G + g] = s;
    }
}

// out[m, n] = C[m, n] + sum_g a_sum[m, g] * delta[g, n] (C as it was before correction_accum).
inline void correction_accum_ref(const half_bits* C, const float* a_sum, const half_bits* delta,
                                 int64_t M, int64_t N, int64_t G, double* out) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double v = half_to_float(C[m * N + n]);
      for (int64_t g = 0; g < G; ++g)
        v += double(a_sum[m * G + g]) * double(half_to_float(delta[g * N + n]));
      out[m * N + n] = v;
    }
}

}  // namespace tl::cuda
