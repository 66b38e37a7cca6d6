// GPTQ of one linear weight on the GPU: the same algorithm, options and result as the CPU port
// (libconvert/gptq.h, whose step list this follows), with
//   - the dead-input fix, act-order permutation and damping on the device (the diagonal is read
//     back to sort it and to take its mean in double, in the CPU's order);
//   - the inverse-Hessian factor as the CPU computes it: the Cholesky factor of the reversed
//     matrix (cuSOLVER potrf) and its triangular inverse (trtri), retried with growing damping
//     like the CPU (upstream's potrf -> potri -> potrf stays selectable: set_factor); a Hessian
//     of more than 2^31 - 1 elements (K > 46340) takes the 64-bit potrf and a triangular inverse
//     split in blocks that trtri takes;
//   - the blocked lazy sweep: one kernel per block of rows (cuda/gptq_ops.h: 4 lanes per
//     output column, the in-block error feedback in shared memory) and one fp32 cuBLAS SGEMM
//     per block for the lazy update of the rows below (no TF32: CUBLAS_DEFAULT_MATH);
//   - RTN's comparison loss as 0.5 * sum((H + damp I) E .* E), one SGEMM.
// Codes can differ from the CPU's only where a value sits on a near-tie of round(): the
// summation orders of the factor and the GEMMs differ (tests/cuda/test_gptq_gpu.cpp).
//
// One GpuGptq per thread; buffers grow to the largest weight seen and are reused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <cuda_fp16.h>

#include "libconvert/gptq.h"

namespace tl::gpu {

struct GptqGpuTimes {
  double cholesky = 0;  // dead inputs, permutation, damping, the factor (with retries)
  double sweep = 0;     // parameters, the blocked sweep, RTN's loss, results to the host
};

class GpuGptq {
 public:
  GpuGptq();  // device 0; throws tl::Error when no usable device
  ~GpuGptq();
  GpuGptq(const GpuGptq&) = delete;
  GpuGptq& operator=(const GpuGptq&) = delete;

  // W: host [K, N] row-major float32 (original row order). H_dev: device [K, K] float32,
  // add_batch's H (symmetric); it is modified (dead diagonals set to 1). w_hat_dev: optional
  // device fp16 [K, N] that receives fp16(q * scale16 + zero16), the weights as stored.
  GptqResult quantize(const float* W, int64_t K, int64_t N, float* H_dev, const GptqOptions& opt,
                      __half* w_hat_dev = nullptr, GptqGpuTimes* times = nullptr);
  // The same with W already on the device ([K, N] fp32, read only): no upload.
  GptqResult quantize_resident(const float* W_dev, int64_t K, int64_t N, float* H_dev, const GptqOptions& opt,
                               __half* w_hat_dev = nullptr, GptqGpuTimes* times = nullptr);
  // The same with H on the host (the --calib path): uploaded first.
  GptqResult quantize_host(const float* W, int64_t K, int64_t N, const float* H, const GptqOptions& opt,
                           GptqGpuTimes* times = nullptr);

  // How the inverse-Hessian factor is computed (both give U with (H + damp I)^-1 = U^T U):
  // kReversed, the CPU's (potrf of the reversed matrix, trtri: K^3 / 3 flops each, the default),
  // or kPotri, upstream's (potrf -> potri -> potrf: four such steps). bench_gptq_gpu times both.
  enum class Factor { kReversed, kPotri };
  void set_factor(Factor f);

  // cuSOLVER's trtri takes a matrix of at most this many elements (n * lda) whole; past it the
  // factor takes the 64-bit potrf and splits the inverse (gptq_gpu.cpp, lower_inverse). Tests
  // lower the limit to run that path on small matrices.
  static constexpr int64_t kMaxWholeElements = (int64_t(1) << 31) - 1;
  void set_max_whole_elements(int64_t elements);
  // The factor's triangular inverse, for its tests: the lower triangle L of the n x n
  // column-major device matrix A (leading dimension lda) replaced by L^-1, the strict upper
  // triangle untouched; false when a diagonal entry is zero.
  bool invert_lower(float* A_dev, int64_t n, int64_t lda);

  // Device bytes quantize() needs for a [K, N] weight (besides the caller's H and w_hat);
  // resident: quantize_resident(), whose W is the caller's.
  static uint64_t device_bytes(int64_t K, int64_t N, bool resident = false);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tl::gpu
