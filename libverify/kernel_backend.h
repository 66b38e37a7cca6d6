// The kernels under test, behind an interface, so the tiers are plain host C++ on host
// buffers: cuda_backend.cpp (the only file of libverify that touches CUDA, compiled only when
// TL_HAVE_CUDA) implements it with the real kernels of cuda/tl_kernels.h; the tests implement it
// with a CPU emulation of Marlin's arithmetic to exercise the tier logic without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cuda/gemm_plan.h"
#include "core/half.h"
#include "cuda/kernel_options.h"

namespace tl::verify {

struct KernelStatus {
  bool ok = true;
  std::string message;  // what went wrong: launcher rc, CUDA error, contract violation
  static KernelStatus failure(std::string m) { return {false, std::move(m)}; }
};

// How the backend's launcher shares a problem out: cuda/gemm_plan.h (kernel empty: the
// launcher declines); the tiers pick their shapes from it (tier_shapes.h).
using cuda::GemmPlan;


// kSwiglu: the SwiGLU pair of two [K, N] weights (marlin_swiglu_asymmetric): kernel "pair-decode"
// where it runs fused (the decode kernel's grid over the pair's 2 N columns), else "pair-" + the
// kernel each of its two GEMMs runs.
enum class PlanKernel { kMarlinSymmetric, kMarlinAsymmetric, kNative, kSwiglu };

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  virtual std::string device_name() const = 0;  // "NVIDIA H200 (sm_90)"

  // C [M, N] = A [M, K] * W_marlin, B int32 [K/16, 2N], s fp16 [G, N] (Marlin-permuted).
  // Every group_size here is the effective one (== K for per column), as in tl_kernels.h.
  // C is overwritten.
  virtual KernelStatus marlin_gemm(const half_bits* A, const int32_t* B, const half_bits* s,
                                   half_bits* C, int M, int N, int K, int group_size) = 0;
  // a_sum [M, G] = group sums of A (a_group_sum), then C [M, N] += a_sum * delta
  // (correction_accum). C is read and written.
  virtual KernelStatus correction(const half_bits* A, const half_bits* delta, half_bits* C,
                                  float* a_sum, int M, int N, int K, int group_size) = 0;
  // C = A * W_hat through marlin_mm_asymmetric; group_size effective (== K for per-row).
  // n_out (0: N): a padded section of N = marlin_padded_n(n_out) columns, run as the runtime runs
  // it (marlin_mm_asymmetric_padded): C is [M, n_out].
  virtual KernelStatus mm_asymmetric(const half_bits* A, const int32_t* B, const half_bits* s,
                                     const half_bits* delta, half_bits* C, int M, int N, int K,
                                     int group_size, int n_out) = 0;
  // C [M, N] = silu(A W_hat_gate + bias_gate) * (A W_hat_up + bias_up) through
  // marlin_swiglu_asymmetric (the runtime's pair), each weight as mm_asymmetric takes it; biases
  // fp32 [N] or nullptr. C is overwritten.
  virtual KernelStatus swiglu_pair(const half_bits* A, const int32_t* B_gate, const half_bits* s_gate,
                                   const half_bits* delta_gate, const int32_t* B_up, const half_bits* s_up,
                                   const half_bits* delta_up, const float* bias_gate, const float* bias_up,
                                   half_bits* C, int M, int N, int K, int group_size) = 0;
  // C = A * W_hat through the native int4_gemm on TinyLoop's layout: q packed two codes per
  // byte [K, ceil(N/2)] (core/nibbles.h), scale / zero fp16 [G, N]. C is overwritten.
  virtual KernelStatus native_gemm(const half_bits* A, const uint8_t* q_packed, const half_bits* scale,
                                   const half_bits* zero, half_bits* C, int M, int N, int K,
                                   int group_size) = 0;
  // The plan the launcher would use for this problem on this device (kernel empty when it
  // declines the shape).
  virtual GemmPlan plan(PlanKernel kernel, int M, int N, int K, int group_size) = 0;

  // The runtime's prefill floor (cuda/marlin_dequant.cu: the weight dequantized into fp16 tiles
  // and cuBLAS): the M from which the runtime's options send Marlin calls to it, 0 when this
  // backend has none. set_prefill_floor(true): later Marlin calls and plans run with it, as the
  // runtime would; false (the default): without it, the tiled kernel at every M > 16.
  virtual int prefill_floor_min_m() const { return 0; }
  virtual void set_prefill_floor(bool on) { (void)on; }
  // The native path's prefill floor (int4_gemm at M >= options.native_floor_min_m: W_hat rounded
  // to fp16 in column chunks + cuBLAS): the M from which the runtime's options take it, 0 when
  // this backend has none; set_native_floor(true): later native calls and plans run with it.
  virtual int native_floor_min_m() const { return 0; }
  virtual void set_native_floor(bool on) { (void)on; }
  // The Hopper prefill kernel (cuda/marlin_hopper.cu), where this backend has it (an sm_90 GPU,
  // and the runtime's options use it): set_hopper_kernel(true) runs later Marlin calls and
  // plans with M > 16 on it, as the runtime does; false (the default): the tiled kernel / floor.
  virtual bool hopper_kernel() const { return false; }
  virtual void set_hopper_kernel(bool on) { (void)on; }

  // GPU memory admission (a tier's largest case against what the device has free, before the
  // tier's first case): the device bytes one call of `kernel` on this problem takes at most --
  // the buffers the call allocates and the launchers' scratch -- and the device's free bytes.
  // 0 from either: nothing to admit against (a CPU emulation).
  enum class CaseKernel { kMarlin, kCorrection, kMarlinAsymmetric, kSwiglu, kNative };
  virtual uint64_t case_device_bytes(CaseKernel kernel, int64_t M, int64_t N, int64_t K, int64_t group_size) const {
    (void)kernel, (void)M, (void)N, (void)K, (void)group_size;
    return 0;
  }
  virtual uint64_t device_free_bytes() const { return 0; }
};

struct BackendProbe {
  std::unique_ptr<KernelBackend> backend;  // null when the GPU tiers cannot run
  std::string skip_reason;                 // why not: built without CUDA, no device, < sm_80, ...
};
// Opens device 0 with the CUDA kernels (a CUDA build), or says why it cannot (no CUDA build, no
// device, < sm_80, no Marlin build for it: a skip); a device that passes those checks but fails
// to open throws (the run's error, exit 2). `runtime`: the launcher options the runtime runs
// with (its prefill floor and Hopper kernel settings).
BackendProbe open_gpu_backend(const cuda::KernelOptions& runtime);

}  // namespace tl::verify
