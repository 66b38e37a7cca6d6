// Public header of the TinyLoop CUDA kernels (libtl_cuda). Knows no file format.
//
// Conventions: row-major, A [M, K] fp16 activations, C [M, N] fp16 outputs, weights W [K, N]
// (K = in_features, the reduction axis). Launchers are asynchronous on `stream` and return an
// rc: 0 ok, 1 problem shape unsupported, 2 no kernel configuration, 3 a CUDA error: the launcher
// prints nothing and never exits; last_cuda_error() (cuda_errors.h) names the failing call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "cuda/gemm_plan.h"
#include "cuda/kernel_options.h"
#include "core/marlin_crossovers.h"
#include "cuda/cuda_errors.h"

namespace tl::cuda {

enum Rc : int { kOk = 0, kShapeUnsupported = 1, kNoConfig = 2, kCudaError = 3 };
// A launcher's rc in words, the one spelling every caller's message uses.
inline const char* rc_text(int rc) {
  switch (rc) {
    case kOk: return "ok";
    case kShapeUnsupported: return "problem shape unsupported";
    case kNoConfig: return "no kernel configuration";
    case kCudaError: return "CUDA error";
    default: return "unknown rc";
  }
}
// rc_text, and for kCudaError the failing call this thread recorded: the one message of a
// launcher's failure ("CUDA error: launch sweep_block_kernel failed at cuda/gptq_ops.cu:313: ...").
inline std::string rc_message(int rc) {
  if (rc != kCudaError) return rc_text(rc);
  const std::string what = last_cuda_error();
  return what.empty() ? rc_text(rc) : std::string(rc_text(rc)) + ": " + what;
}

// Installs a crossover table in *options if it was measured on the current device (its device
// label is cuda_device_label's of this GPU); else leaves *options as it is and returns why not
// (empty: installed). A table measured on another GPU would route by another GPU's timings.
std::string use_crossovers(KernelOptions* options, std::shared_ptr<const MarlinCrossovers> table);

// True on sm_80, sm_86, sm_89 and sm_90 (the architectures the Marlin kernel is built for).
bool marlin_available(int device);
// True where the Hopper prefill kernel runs: an sm_90 GPU (its sm_90a code runs on no other)
// whose driver encodes tensor maps.
bool hopper_kernel_available(int device);

// Native path on TinyLoop's own layout: W_hat[k, n] = q[k, n] * scale[g, n] + zero[g, n],
// q packed two per byte [K, ceil(N/2)] (low nibble = even n), scale/zero fp16 [G, N],
// g = k / group_size. fp32 accumulation. Any M, N, K >= 1 and 0 < group_size <= K (G = ceil(K /
// group_size): a last group of K % group_size rows where it does not divide). Small M splits
// K over blocks with fp32 partials in the per-(device, stream) scratch (see marlin_int4_tc_gemm).
// The CUDA-core kernel dequantizes in fp32 (W_hat exact); at M >= options.native_floor_min_m
// (> 0) the prefill floor runs instead: W_hat rounded to fp16 once (fmaf, then round to nearest:
// the fp16 copy a caller would make of W_hat, bit for bit) in column chunks of the stream's
// scratch, each multiplied by cuBLAS.
int int4_gemm(const __half* A, const uint8_t* q, const __half* scale, const __half* zero,
              __half* C, int M, int N, int K, int group_size, cudaStream_t stream,
              const KernelOptions& options = {});

// W [K, N] fp16 = fp16(fmaf(q, scale, zero)) for every element: the native layout above
// dequantized whole, with the floor's rounding (the fp16 copy of W_hat a caller would make on the
// host, bit for bit). The e2e tier's fp16 path builds its weights from the stored codes this way.
int dequantize_native(const uint8_t* q, const __half* scale, const __half* zero, __half* W, int K, int N,
                      int group_size, cudaStream_t stream);

// Symmetric Marlin-format tensor-core GEMM: C = A * W_marlin, W_marlin[k, n] = (q - 8) * s,
// B int32 [K/16, 2N] and s fp16 [G, N] exactly as marlin-pack writes them. group_size is the
// effective group size like every launcher here (== K: one group per column; the Marlin
// contract of core/group_size.h: 128 or K). Any M >= 1 (M <= 16: the decode kernel, one
// launch; more rows: the tiled kernel, in slices of 64); N % 128 == 0, K % 128 == 0; A, B, s,
// C 16-byte aligned (else rc 1); another group size, or a GPU whose shared memory fits no tile
// configuration: rc 2.
// `workspace`: marlin_workspace_ints(N) ints, zeroed once at allocation (the kernel leaves it
// zeroed); one workspace must not be used by two launches running concurrently. The kernel
// also uses a scratch buffer per (device, stream) for fp32 partial tiles, allocated on the
// first call and grown by doubling (no allocation in steady state; warm up before capturing a
// CUDA graph). C is written, not accumulated.
int marlin_int4_tc_gemm(const __half* A, const int32_t* B, __half* C, const __half* s,
                        int* workspace, int M, int N, int K, int group_size, cudaStream_t stream,
                        const KernelOptions& options = {});
size_t marlin_workspace_ints(int N);

// GemmPlan (cuda/gemm_plan.h): how a launcher shares a problem out on the GPU at hand.
// rc as the launcher's (kShapeUnsupported, kNoConfig, kCudaError) when it would not run.
int marlin_plan(int M, int N, int K, int group_size, bool asym, const KernelOptions& options, GemmPlan* plan);
// int4_gemm_plan: kernel "native" (the CUDA-core kernel) or "native-dequant" (the floor, slices =
// its column chunks).
int int4_gemm_plan(int M, int N, int K, int group_size, GemmPlan* plan, const KernelOptions& options = {});
// The kernel int4_gemm runs for M, the one rule its plan and the dispatcher's counters share:
// "int4" (the CUDA-core kernel) or "dequant" (the floor).
inline const char* int4_kernel_for(int M, const KernelOptions& options) {
  return options.native_floor_min_m > 0 && M >= options.native_floor_min_m ? "dequant" : "int4";
}

// Correction pair: a_sum[m, g] = sum_{k in g} A[m, k] (fp32), and
// C[m, n] += sum_g a_sum[m, g] * delta[g, n] (fp32 math, one rounding to fp16); G = K /
// group_size, the effective group size like every launcher's (K % group_size == 0).
int a_group_sum(const __half* A, float* a_sum, int M, int K, int group_size, cudaStream_t stream);
int correction_accum(__half* C, const float* a_sum, const __half* delta, int M, int N, int K, int group_size,
                     cudaStream_t stream);

// C = A * W_hat for asymmetric weights through the Marlin kernel: W_hat = W_marlin + delta
// per group, delta fp16 [G, N] in natural order (zero + 8 * scale). One launch: delta is folded
// into the dequantized fragments ((q - 8) * s + delta, one fp16 fma), which equals the GEMM
// followed by the correction pair, without their two launches (see cuda/marlin_asym.cu).
// group_size: the effective group size (== K for per-row). Same limits and rc as
// marlin_int4_tc_gemm, so a caller can fall back on rc != 0.
int marlin_mm_asymmetric(const __half* A, const int32_t* B, const __half* s, const __half* delta,
                         __half* C, int* workspace, int M, int N, int K, int group_size,
                         cudaStream_t stream, const KernelOptions& options = {});

// One asymmetric Marlin weight's device operands, as marlin-pack writes them (B, s, delta).
struct MarlinOperands {
  const int32_t* B = nullptr;
  const __half* s = nullptr;
  const __half* delta = nullptr;
};

// The SwiGLU pair: C [M, F] = silu(A W_gate + bias_gate) * (A W_up + bias_up) for two asymmetric
// Marlin weights [K, F] of one group size (W_hat = W_marlin + delta, as marlin_mm_asymmetric);
// biases fp32 [F] or nullptr. Where the decode kernel serves M (M <= 16, options.decode_kernel)
// it is one launch that writes only C: both sums in fp32, silu and the product in fp32, one
// rounding (cuda/marlin_swiglu.cu). Otherwise the two GEMMs (marlin_mm_asymmetric into C and
// up_scratch [M, F]) and swiglu_bias_rows. workspace: marlin_workspace_ints(2 F) ints, zeroed
// once (left zeroed), not shared with a concurrent launch. rc as marlin_mm_asymmetric's (so a
// caller can fall back), and kShapeUnsupported where the unfused sequence runs without up_scratch.
int marlin_swiglu_asymmetric(const __half* A, const MarlinOperands& gate, const MarlinOperands& up,
                             const float* bias_gate, const float* bias_up, __half* C, __half* up_scratch,
                             int* workspace, int M, int F, int K, int group_size, cudaStream_t stream,
                             const KernelOptions& options = {});
// How marlin_swiglu_asymmetric runs M rows: "fused" (one launch), "unfused" (two GEMMs and the
// elementwise pass) or "unsupported" (the Marlin gate refuses [K, F]); the dispatch counters'
// and the tiers' one rule. (The fused launch falls back to the unfused sequence only where the
// GPU's shared memory fits no decode configuration.)
const char* marlin_swiglu_route(int M, int F, int K, int group_size, const KernelOptions& options);
// Its plan (cuda/gemm_plan.h): kernel "pair-decode" with the decode grid over the pair's 2 F
// columns where it runs fused, else "pair-" + the plan of each of its two GEMMs.
int marlin_swiglu_plan(int M, int F, int K, int group_size, const KernelOptions& options, GemmPlan* plan);

// A padded section (marlin-pack pads a weight whose N is not a multiple of 128 to
// N_packed = marlin_padded_n(N) zero columns, docs/format.md): C [M, N_out] = A * W_hat[:, :N_out],
// only the weight's own N_out columns written (row stride N_out, any N_out). M <= 16 runs on the
// decode kernel, whose stores stop at N_out; larger M on the dequantize + cuBLAS floor, which
// multiplies only those columns (the tiled and Hopper kernels store whole tiles). N_out ==
// N_packed is marlin_mm_asymmetric. Same rc as marlin_mm_asymmetric.
int marlin_mm_asymmetric_padded(const __half* A, const int32_t* B, const __half* s, const __half* delta, __half* C,
                                int* workspace, int M, int N_packed, int N_out, int K, int group_size,
                                cudaStream_t stream, const KernelOptions& options = {});

// ---- dispatcher ----

// One linear weight as the runtime holds it on the device.
struct DeviceQuantWeight {
  const char* name = "";
  int bits = 4;
  int K = 0, N = 0, group_size = 0;  // effective group size (== K for per-row)
  bool exact_int4 = false;           // flagged: must run the native CUDA-core kernel (fp32 W_hat, never a floor)
  const uint8_t* q = nullptr;        // native layout (always present)
  const __half* scale = nullptr;
  const __half* zero = nullptr;
  const int32_t* marlin_B = nullptr; // Marlin pack, if any
  const __half* marlin_s = nullptr;
  const __half* marlin_delta = nullptr;
  int* marlin_workspace = nullptr;   // marlin_workspace_ints(marlin_N)
  int marlin_N = 0;                  // the pack's columns: 0 or N, or marlin_padded_n(N) (padded)
  const __half* fp16_weight = nullptr;  // [K, N] "fp16 body cache", if the caller made one
};

enum class GemmPath { kFp16Copy, kMarlin, kNativeInt4 };
const char* gemm_path_name(GemmPath p);

// Y [M, N] = X [M, K] * W. Picks the path (see dispatch.cu and docs/kernels.md) from the
// weight's views and `options` (use_marlin), runs it, returns the path taken. Throws nothing;
// a CUDA error is recorded (last_cuda_error) and sets *rc (if given) to kCudaError.
GemmPath quant_gemm(const DeviceQuantWeight& w, const __half* X, __half* Y, int M,
                    cudaStream_t stream, const KernelOptions& options, int* rc = nullptr);

// The MLP's gate and up projections and its SwiGLU: Y [M, F] = silu(X W_gate + bias_gate) *
// (X W_up + bias_up), biases fp32 [F] or nullptr. Where both weights take the Marlin path (each
// passes marlin's checks of quant_gemm, same K, F and group size, pair_workspace given:
// marlin_workspace_ints(2 F) ints, zeroed) marlin_swiglu_asymmetric runs them (one fused launch
// at decode sizes); otherwise each weight goes through quant_gemm (into Y and up_scratch [M, F])
// and swiglu_bias_rows runs after. Counted as two weights in dispatches / marlin_kernels, and
// once in DispatchStats::swiglu by how the pair ran. Returns the gate's path; rc as quant_gemm's.
GemmPath quant_swiglu(const DeviceQuantWeight& gate, const DeviceQuantWeight& up, const float* bias_gate,
                      const float* bias_up, const __half* X, __half* Y, __half* up_scratch, int* pair_workspace,
                      int M, cudaStream_t stream, const KernelOptions& options, int* rc = nullptr);

struct DispatchStats {
  long long dispatches[3] = {0, 0, 0};        // per GemmPath
  std::map<std::string, long long> fallbacks; // reason -> count (Marlin wanted but not taken)
  std::map<std::string, long long> marlin_kernels;  // Marlin calls by kernel: decode / tiled / hopper / dequant
  std::map<std::string, long long> native_kernels;  // native calls by kernel: int4 / dequant
  // quant_swiglu calls by how the pair ran: "fused" (one launch), "unfused" (two Marlin GEMMs +
  // the elementwise pass), "separate (<why not Marlin>)"
  std::map<std::string, long long> swiglu;
  std::string first_dispatch_line;            // "[marlin] first dispatch ok: BT=... N=... K=... gs=..."
};
DispatchStats dispatch_stats();
void reset_dispatch_stats();

}  // namespace tl::cuda
