// Named tolerances of tl-verify, each with the reason for its value. The long derivation is
// in docs/verify.md ("Bounds"); the short one is next to each constant.
//
// Error model. Every GPU result is an fp16 number; the reference is exact (fp64 on exactly
// representable inputs). The kernels round in three places:
//   (1) the output store to fp16: <= 0.5 fp16 step of the result;
//   (2) the fp16 product of a dequantized weight, (q - 8) * s (Marlin's grouped path multiplies
//       fp16 codes by fp16 scales before the tensor-core MMA): relative error <= u16 = 2^-11
//       per product, uniformly distributed, so the sum over K has a standard deviation
//       <= u16 / sqrt(3) * sigma, sigma = sqrt(sum_k (a_k w_k)^2);
//   (3) fp32 accumulation over K (and fp16 partial sums if the kernel reduces split-K slices
//       through an fp16 buffer, as upstream Marlin does): fp32 adds cost ~ sqrt(K) * u32 * sigma,
//       negligible (< 0.01 fp16 step at K = 8192); each fp16 partial-sum store <= 0.5 step.
// Elements whose exact value is far below sigma (cancellation) have an absolute error of order
// u16 * sigma that is any number of fp16 steps *of the result*. We therefore count ULPs at the
// scale max(|ref|, c * sigma) ("floored ULP", ulp_stats.h): exactly the DESIGN.md ULP wherever
// |ref| >= c * sigma, and the error in steps of the noise floor below it. The raw (unfloored)
// maximum is reported too.
#pragma once

#include <cstdint>

namespace tl::verify {

constexpr double kHalfUnitRoundoff = 1.0 / 2048.0;        // u16 = 2^-11
constexpr double kFloatUnitRoundoff = 1.0 / 16777216.0;   // u32 = 2^-24

// ---- symmetric (Marlin GEMM vs fp64 on (q - 8) * s) ----
// max ULP: 0.5 (output rounding) + 0.5 (distance measured to the fp16 nearest the reference)
// + the weight-product noise, std < 1/sqrt(3) step at the floored scale, whose maximum over
// the ~5e6 elements of a run stays below 5.5 std = 3.2 steps; up to 8 fp16 split-K partial
// stores add a uniform +-0.5 step each (std 0.8 together). Expected max ~ 4 to 6.5; bound 8.
constexpr double kSymmetricMaxUlp = 8;
// rel Frobenius: weight products ~ u16/sqrt(3) = 2.8e-4, output rounding ~ 2e-4, in
// quadrature ~ 3.5e-4 (upstream's golden data: 2e-4 from the weights alone); bound 2e-3
// (~6x). A planted layout fault moves at least 1/512 of the weights and gives >= 3e-2.
constexpr double kSymmetricMaxRel = 2e-3;
// Floor at c * sigma with c = 1: below |ref| = sigma the result is cancellation-dominated and
// the weight-product noise (std u16/sqrt(3) * sigma) is itself >= 0.3 fp16 steps of |ref|.
constexpr double kGemmFloorFactor = 1.0;

// ---- correction (a_group_sum + correction_accum vs CPU) ----
// All inner math is fp32 on exact fp16 inputs, so the only visible error is the final
// rounding: the result is the fp16 nearest a value within ~1e-6 relative of the reference,
// i.e. 0 or 1 step from the fp16 nearest the reference. Bound 2 (the contract).
constexpr double kCorrectionMaxUlp = 2;
constexpr double kCorrectionMaxRel = 1e-3;  // output rounding alone ~ 2e-4
// fp32 noise is ~ sqrt(G) * 2^-24 * sigma; at c = 1/16 that is < 2^-9 steps even for G = 64,
// so elements are measured at (almost) their own fp16 spacing; only deep cancellation is floored.
constexpr double kCorrectionFloorFactor = 1.0 / 16;
// a_sum (fp32) vs the exact group sum: the textbook recursive-summation bound
// |err| <= (n - 1) * u32 * sum |a| holds for any summation order a kernel may use.
constexpr double kASumBoundFactor = 1.0;

// ---- wrapper (marlin_mm_asymmetric vs A * W_hat in fp64) ----
// The symmetric error, with the rounded terms of either implementation in sigma: unfused, one
// more fp16 rounding (the Marlin output before the correction adds A_sum * delta, 0.5 step at
// the scale of |C_marlin|); fused (ours: delta folded into the dequantized weights with one
// fp16 fma), products rounded at the scale of |a * W_hat|; and delta's own fp16 storage
// rounding (u16 * |A_sum * delta| per group).
constexpr double kWrapperMaxUlp = 8;
constexpr double kWrapperMaxRel = 2e-3;

// ---- swiglu (the SwiGLU pair vs fp64 silu(A W_hat_gate + b) * (A W_hat_up + b)) ----
// Y = silu(G) U is a smooth function of the two sums, so an error of each moves Y by the sum's
// error times its partial derivative (first order; the second-order terms are ~2^-11 smaller).
// The reference's sigma (reference_math.h swiglu_reference) is exactly that propagation of the
// wrapper's sigma of each sum, plus |G| and |U| for the unfused route's fp16 stores of them: at the
// floored scale the error is the wrapper's (<= 8 steps, same derivation), the fp16 stores add
// <= 0.5 step each, the fused route's fp32 silu and product (expf: a few u32) nothing visible, and
// the output rounding is the same 0.5 step. The wrapper's bounds; the floor at c = 1 as theirs.
constexpr double kSwigluMaxUlp = kWrapperMaxUlp;
constexpr double kSwigluMaxRel = kWrapperMaxRel;

// ---- native (int4_gemm vs fp64 A * W_hat) ----
// The kernel dequantizes in fp32 (q * scale exact, + zero: one rounding of 2^-24 relative) and
// accumulates in fp32 (~sqrt(K) u32 sigma, < 0.01 fp16 step at K = 8192), so the only visible
// error is the final rounding: the fp16 nearest a value within ~1e-6 of the reference, 0 or 1
// step from the fp16 nearest the reference. Bound 2 steps, as for the correction pair's fp32 math.
constexpr double kNativeMaxUlp = 2;
constexpr double kNativeMaxRel = 1e-3;  // output rounding alone ~ 2e-4
// sigma = sqrt(sum_k (a_k w_hat_k)^2): the fp32 noise is ~ sqrt(K) u32 sigma, so at c = 1/16
// elements are measured at their own fp16 spacing except under deep cancellation.
constexpr double kNativeFloorFactor = 1.0 / 16;

// The native path's prefill floor (int4_gemm at M >= native_floor_min_m) rounds each W_hat to
// fp16 once and accumulates in fp32 (cuBLAS): error source (2) with the rounding at |a * w_hat|,
// as the Marlin floor's, so the Marlin GEMM bounds apply (the symmetric tier's 8 steps, 2e-3,
// floor at c = 1), without their split-K partial stores.
constexpr double kNativeFloorPathMaxUlp = kSymmetricMaxUlp;
constexpr double kNativeFloorPathMaxRel = kSymmetricMaxRel;

// ---- one kernel against fp64 (the GPU unit tests, tests/cuda) ----
// Where a kernel provably rounds less than a tier bounds, its unit test holds it to the tighter
// bound on the same metric. Exact weights (per-column symmetric, int4_gemm's fp32
// dequantization, the correction pair's fp32 math) leave only the final rounding of an almost
// exact sum: at most 1 step from the fp16 nearest the reference.
constexpr double kExactWeightsMaxUlp = 1.0;
// Relative Frobenius error of one kernel's fp16 output: the output rounding alone gives
// ~2^-11 / sqrt(3) ~ 2.8e-4 relative RMS, weight rounding about as much again; 1e-3 is ~3x the
// expected ~3.5e-4 (the tiers' 2e-3 also covers the fp16 split-K partials of upstream-style
// kernels).
constexpr double kKernelMaxRelFro = 1e-3;

// ---- reference cost ----
// The fp64 reference of an M x K x N case costs M*K*N multiply-adds on the CPU. For M above
// this many rows we check a fixed sample: the first and last 16 rows (every row residue of a
// 16-row MMA tile, both boundary tiles) plus evenly spaced rows between. NaN/Inf are checked
// on every output element.
constexpr int kReferenceRowsMax = 64;

// ---- e2e (the model's perplexity through each kernel path) ----
// Rationale in docs/model.md, "e2e bounds".
// The Marlin and native paths compute the same X * W_hat and differ only by fp16 rounding of
// the weight products and of the outputs (~2^-11 relative per GEMM), which moves PPL by far less
// than 0.1 %; 1 % is the contract and catches any real kernel fault (a wrong group or
// scale moves PPL by tens of %).
constexpr double kE2eMaxDriftPct = 1.0;
// Mean KL(fp16 || path) in nats per token: logit perturbations of relative size eps ~ 1e-3 give
// KL ~ eps^2 * var(logits) / 2 ~ 1e-5 for logits with sd ~ 3; 2e-3 is a >100x margin that a
// single misrouted group in any layer still exceeds.
constexpr double kE2eMaxMeanKld = 2e-3;
// CPU forward (fp32) vs GPU fp16 path on window 0: relative Frobenius error of the logits. fp16
// activations at every GEMM input (2^-12 relative RMS each, ~7 roundings per block, random
// accumulation over <= 16 blocks) give ~ 2^-12 * sqrt(112) ~ 3e-3; bound 2e-2.
constexpr double kE2eCpuCheckMaxRel = 2e-2;
// Decode vs prefill on one path: |PPL_decode / PPL_prefill - 1| in %. The same weights and the
// same function, evaluated with GEMMs of another M: on the GPU other kernels (decode vs tiled /
// Hopper / floor) whose fp16 outputs round their fp32 sums differently (~2^-11 relative per GEMM
// output, the CPU check's 5e-4 .. 1e-3 relative on the logits being fp32 vs fp16, a larger
// difference), on the CPU the same fp32 products in other blocks. Such perturbations move each
// token's NLL by ~1e-3 at most with random sign, so the mean NLL by far less; 0.1 % (1e-3 on
// ln PPL) keeps a > 10x margin, while a decode kernel that misreads one group or tile moves PPL
// by percents (the drift bound's faults).
constexpr double kE2eDecodeMaxPplPct = 0.1;
// The decode batch: windows in lockstep, M of every decode-mode GEMM; the decode kernel's M.
constexpr int64_t kE2eMaxDecodeBatch = 16;

}  // namespace tl::verify
