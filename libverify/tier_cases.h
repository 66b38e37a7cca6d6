// One case of one tier: run (or decode), compare with the reference, judge against the bounds.
// The drivers in tier_runners.cpp choose the cases (synthetic shapes or the file's weights).
#pragma once

#include <cstdint>
#include <vector>

#include "formats/tinyloop_file.h"
#include "libverify/kernel_backend.h"
#include "libverify/verify_report.h"

namespace tl::verify {

// Pack tier, one weight with a Marlin section: groupsize rule, layout tag, shapes of B/s/delta,
// decoded codes == q, unpermuted s == scale, delta == float16(zero + 8 * scale), bit for bit.
CaseResult check_pack(const QuantWeight& w);

// Symmetric tier: backend.marlin_gemm on w.marlin (B, s, groupsize) vs fp64 A * ((q - 8) * scale)
// from the weight's own q/scale. A: fp16 [M, K].
CaseResult run_symmetric_case(KernelBackend& backend, const QuantWeight& w,
                              const std::vector<half_bits>& A, int64_t M, const TierBounds& bounds);

// Wrapper tier: backend.mm_asymmetric on w.marlin (B, s, delta) vs fp64 A * W_hat.
CaseResult run_wrapper_case(KernelBackend& backend, const QuantWeight& w,
                            const std::vector<half_bits>& A, int64_t M, const TierBounds& bounds);

// SwiGLU tier: backend.swiglu_pair on the two weights' Marlin sections (same K, N, group size)
// and fp32 biases ([N] each, or empty) vs fp64 silu(A W_hat_gate + b) * (A W_hat_up + b).
CaseResult run_swiglu_case(KernelBackend& backend, const QuantWeight& gate, const QuantWeight& up,
                           const std::vector<float>& bias_gate, const std::vector<float>& bias_up,
                           const std::vector<half_bits>& A, int64_t M, const TierBounds& bounds);

// Native tier: backend.native_gemm on the weight's own q (packed two per byte), scale, zero
// vs fp64 A * W_hat.
CaseResult run_native_case(KernelBackend& backend, const QuantWeight& w, const std::vector<half_bits>& A,
                           int64_t M, const TierBounds& bounds);

// Correction tier: C_out = C_in + a_group_sum(A) * delta through the backend vs fp64.
CaseResult run_correction_case(KernelBackend& backend, const std::vector<half_bits>& A,
                               const std::vector<half_bits>& C_in, const std::vector<half_bits>& delta,
                               int64_t M, int64_t N, int64_t K, int64_t group_size,
                               const TierBounds& bounds);

}  // namespace tl::verify
