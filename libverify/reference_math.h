// fp64 CPU references for the GPU tiers. Every input is an fp16 number (activations, scales,
// zeros, deltas) or a small integer code, so the dequantized weights and all products below are
// exact in fp64 and the references carry only fp64 summation error (~1e-16 relative), far
// below an fp16 step. Besides each reference value they return sigma, the root-sum-square of
// the terms the kernel under test rounds (tolerances.h), used for the ULP floor.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/half.h"
#include "formats/tinyloop_file.h"

namespace tl::verify {

// Rows of an M-row output the references are computed for: all of them when M <= max_rows,
// else the first and last 16 (every residue of a 16-row MMA tile, both boundary tiles) and
// one row for every other position in a 64-row slice of the tiled kernel (spread over the
// slices), then evenly spaced rows: max(max_rows, up to 80) rows, sorted.
std::vector<int64_t> reference_rows(int64_t M, int max_rows);

// Dequantized weights [K, N] in fp64, exact: (q - 8) * scale and q * scale + zero.
std::vector<double> dequant_symmetric(const QuantWeight& w);
std::vector<double> dequant_asymmetric(const QuantWeight& w);

// The contract's delta: float16(float32(zero) + 8 * float32(scale)), [G, N].
std::vector<half_bits> delta_contract(const std::vector<half_bits>& scale,
                                      const std::vector<half_bits>& zero);

// Exact group sums of fp16 activations, [rows.size(), G] for the given rows of A [*, K].
std::vector<double> group_sums(const half_bits* A, int64_t K, int64_t group_size,
                               const std::vector<int64_t>& rows);

struct GemmReference {
  std::vector<double> c;      // [rows, N]: A[rows] * W
  std::vector<double> c_aux;  // [rows, N]: A[rows] * W_noise (only when W_noise is given)
  std::vector<double> sumsq;  // [rows, N]: sum_k (a_k * W_noise[k, n])^2 (W when W_noise is null)
  std::vector<double> sumsq_main;  // [rows, N]: sum_k (a_k * W[k, n])^2 (only with W_noise)
};
// A: fp16 [*, K] row-major; W, W_noise: [K, N].
GemmReference reference_gemm(const half_bits* A, int64_t K, int64_t N,
                             const std::vector<int64_t>& rows, const double* W,
                             const double* W_noise = nullptr);

// Symmetric tier: C = A * ((q - 8) * s); sigma^2 = sum_k (a_k w_k)^2.
struct CaseReference {
  std::vector<int64_t> rows;
  std::vector<double> ref;    // [rows, N]
  std::vector<double> sigma;  // [rows, N]
};
CaseReference symmetric_reference(const half_bits* A, int64_t M, const QuantWeight& w, int max_rows);

// Wrapper tier: C = A * W_hat (exact W_hat = q * scale + zero). A kernel computes it either
// unfused, fp16(fp16(A * W_marlin) + A_sum * delta16), or with delta folded into the dequantized
// weights, A * fp16((q - 8) s + delta16) (ours does the latter), so sigma^2 covers the rounded
// terms of both: sum_k (a_k W_marlin)^2 + sum_k (a_k W_hat)^2 + C_marlin^2 +
// sum_g (A_sum[g] * delta16[g])^2.
CaseReference wrapper_reference(const half_bits* A, int64_t M, const QuantWeight& w,
                                const std::vector<half_bits>& delta16, int max_rows);

// SwiGLU tier: Y = silu(G) * U, G = A * W_hat_gate + bias_gate, U = A * W_hat_up + bias_up (the
// wrapper references of the two weights, fp32 biases exact in fp64). An error e_G, e_U of the two
// sums moves Y by silu'(G) U e_G + silu(G) e_U to first order (the next terms are ~2^-11 smaller),
// so sigma^2 = (silu'(G) U)^2 (sigma_G^2 + G^2) + silu(G)^2 (sigma_U^2 + U^2): each sum's wrapper
// terms plus its own fp16 rounding (the unfused route stores G and U in fp16; the fused one does not).
CaseReference swiglu_reference(const half_bits* A, int64_t M, const QuantWeight& gate, const QuantWeight& up,
                               const std::vector<float>& bias_gate, const std::vector<float>& bias_up,
                               int max_rows);

// Native tier: C = A * W_hat with the exact W_hat = q * scale + zero; sigma^2 = sum_k (a_k w_hat_k)^2.
CaseReference native_reference(const half_bits* A, int64_t M, const QuantWeight& w, int max_rows);

// Correction tier: C_out = C_in + sum_g A_sum[m, g] * delta[g, n] over every row;
// sigma^2 = C_in^2 + sum_g (A_sum delta)^2.
CaseReference correction_reference(const half_bits* A, const half_bits* C_in,
                                   const half_bits* delta, int64_t M, int64_t N, int64_t K,
                                   int64_t group_size);

}  // namespace tl::verify
