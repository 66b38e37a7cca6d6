// Planted kernel faults on any backend (the CPU emulation or the real CUDA kernels): a
// decorator that runs the inner backend's kernel and corrupts one place of its result, the
// way a kernel bug confined to one place would. It proves that a tier compares that place --
// the last row of a remainder slice, one output tile, the last k-tile -- on every backend,
// including the H200 (test_faulty_backend.cpp runs it on the GPU when there is one).
#pragma once

#include <string>

#include "libverify/kernel_backend.h"

namespace tl::verify::testing {

enum class KernelFault {
  kRemainderRow,  // the last row of a partial last slice (64 rows for Marlin, 4 for native)
                  // holds the row above it (a store one row off); no-op when M fills its slices
  kOneOutputTile,  // one 16 x 16 output tile (the middle one) 3 % too large
  kLastKTile,      // the kernel ignores the last 16 rows of K (A's last 16 columns read as 0)
};
const char* kernel_fault_name(KernelFault f);

class FaultyBackend final : public KernelBackend {
 public:
  FaultyBackend(KernelBackend& inner, KernelFault fault) : inner_(inner), fault_(fault) {}
  std::string device_name() const override { return inner_.device_name(); }
  KernelStatus marlin_gemm(const half_bits* A, const int32_t* B, const half_bits* s, half_bits* C, int M, int N,
                           int K, int group_size) override;
  KernelStatus correction(const half_bits* A, const half_bits* delta, half_bits* C, float* a_sum, int M, int N,
                          int K, int group_size) override {
    return inner_.correction(A, delta, C, a_sum, M, N, K, group_size);
  }
  KernelStatus mm_asymmetric(const half_bits* A, const int32_t* B, const half_bits* s, const half_bits* delta,
                             half_bits* C, int M, int N, int K, int group_size, int n_out) override;
  KernelStatus swiglu_pair(const half_bits* A, const int32_t* B_gate, const half_bits* s_gate,
                           const half_bits* delta_gate, const int32_t* B_up, const half_bits* s_up,
                           const half_bits* delta_up, const float* bias_gate, const float* bias_up, half_bits* C,
                           int M, int N, int K, int group_size) override;
  KernelStatus native_gemm(const half_bits* A, const uint8_t* q_packed, const half_bits* scale,
                           const half_bits* zero, half_bits* C, int M, int N, int K, int group_size) override;
  GemmPlan plan(PlanKernel kernel, int M, int N, int K, int group_size) override {
    return inner_.plan(kernel, M, N, K, group_size);
  }
  int prefill_floor_min_m() const override { return inner_.prefill_floor_min_m(); }
  void set_prefill_floor(bool on) override { inner_.set_prefill_floor(on); }
  int native_floor_min_m() const override { return inner_.native_floor_min_m(); }
  void set_native_floor(bool on) override { inner_.set_native_floor(on); }
  bool hopper_kernel() const override { return inner_.hopper_kernel(); }
  void set_hopper_kernel(bool on) override { inner_.set_hopper_kernel(on); }

  // Where the fault lands for an M x N output with slices of `slice` rows: rows r0..r1,
  // columns n0..n1 (empty, r0 > r1, when it does not apply to this shape).
  struct Place {
    int r0 = 0, r1 = -1, n0 = 0, n1 = -1;
  };
  Place place(int M, int N, int slice) const;

 private:
  template <typename Run>
  KernelStatus run(const half_bits* A, half_bits* C, int M, int N, int K, int slice, Run&& kernel);
  KernelBackend& inner_;
  KernelFault fault_;
};

}  // namespace tl::verify::testing
