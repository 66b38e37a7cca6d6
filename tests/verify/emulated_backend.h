// A CPU stand-in for the CUDA kernels with Marlin's arithmetic, so the GPU tiers' logic (cases,
// references, floors, bounds, failure messages) runs in `make test` on a machine without a GPU:
//   grouped Marlin GEMM: fp16 products (q - 8) * s, fp32 accumulation within split-K slices of
//     512, slice partials stored in fp16 (upstream Marlin's global reduction), fp16 output;
//   per-column: fp32 sum of a * (q - 8), times s in fp32, fp16 output;
//   correction: fp32 group sums, fp32 accumulation over groups, one rounding to fp16;
//   wrapper: the GEMM into fp16 C, then the correction on it;
//   native: W_hat = q * scale + zero in fp32, fp32 accumulation, one rounding; its floor
//     (set_native_floor, M >= native_floor_min): W_hat rounded to fp16 first.
// `bug` plants a kernel fault, to show that each tier can fail.
#pragma once

#include "libverify/kernel_backend.h"

namespace tl::verify::testing {

enum class EmulatedBug {
  kNone,
  kFp16Accumulation,  // GEMM accumulates in fp16 instead of fp32
  kWrongGroup,        // grouped GEMM applies the scales of group g - 1 to the last group
  kUnwrittenTile,     // GEMM leaves the last 64 output columns unwritten (NaN pre-fill)
  kCorrectionOffByOne,  // correction skips the last row of each group in a_sum
  kNativeLastGroup,     // native GEMM applies group G - 2's zero to the last group
  kNativeFloorGroup,    // the native floor only: the last group's weights take group G - 2's scale
  kFloorWrongGroup,     // the Marlin prefill floor only: as kWrongGroup, on its calls alone
};

class EmulatedBackend final : public KernelBackend {
 public:
  explicit EmulatedBackend(EmulatedBug bug = EmulatedBug::kNone) : bug_(bug) {}
  std::string device_name() const override { return "CPU emulation of the Marlin kernels"; }
  KernelStatus marlin_gemm(const half_bits* A, const int32_t* B, const half_bits* s, half_bits* C,
                           int M, int N, int K, int group_size) override;
  KernelStatus correction(const half_bits* A, const half_bits* delta, half_bits* C, float* a_sum,
                          int M, int N, int K, int group_size) override;
  KernelStatus mm_asymmetric(const half_bits* A, const int32_t* B, const half_bits* s,
                             const half_bits* delta, half_bits* C, int M, int N, int K,
                             int group_size, int n_out) override;
  // swiglu: the unfused sequence, two wrappers into fp16, then silu(g + b) * (u + b) in fp32.
  KernelStatus swiglu_pair(const half_bits* A, const int32_t* B_gate, const half_bits* s_gate,
                           const half_bits* delta_gate, const int32_t* B_up, const half_bits* s_up,
                           const half_bits* delta_up, const float* bias_gate, const float* bias_up, half_bits* C,
                           int M, int N, int K, int group_size) override;
  KernelStatus native_gemm(const half_bits* A, const uint8_t* q_packed, const half_bits* scale,
                           const half_bits* zero, half_bits* C, int M, int N, int K, int group_size) override;
  // A plan of the shape of the CUDA launchers' on a modelled GPU of 132 SMs (the H200's), so
  // the shape selection runs here: decode: 8 warps per SM, per_warp = ceil(units / warps);
  // tiled: slices of 64 rows, 128 x 128 tiles, 2 blocks per SM at 16 rows and >= 28 tiles per
  // SM; native: the int4_gemm split-K rule.
  GemmPlan plan(PlanKernel kernel, int M, int N, int K, int group_size) override;
  // The prefill floor's plan as the launchers make it (M >= 256, column chunks of a 64 MiB
  // scratch); its arithmetic is modelled by the same emulation (weights rounded to fp16).
  int prefill_floor_min_m() const override { return floor_min_m; }
  void set_prefill_floor(bool on) override { floor_ = on; }
  int native_floor_min_m() const override { return native_floor_min; }
  void set_native_floor(bool on) override { native_floor_ = on; }
  // The Hopper kernel's plan as cuda/marlin_hopper_plan.h makes it on the modelled GPU (clusters
  // of `split` CTAs: 132 / split fit at once); its arithmetic is the floor's (weights rounded).
  bool hopper_kernel() const override { return has_hopper; }
  void set_hopper_kernel(bool on) override { hopper_ = on && has_hopper; }
  // GPU memory admission on a modelled device (0: none, nothing admitted): its free bytes, and a
  // case's bytes as its fp16 operands and 4-bit weights.
  uint64_t case_device_bytes(CaseKernel, int64_t M, int64_t N, int64_t K, int64_t) const override {
    return modelled_free_bytes ? uint64_t(M * K + K * N / 4 + M * N) * 2 : 0;
  }
  uint64_t device_free_bytes() const override { return modelled_free_bytes; }
  uint64_t modelled_free_bytes = 0;
  int floor_min_m = 256;   // 0: a runtime without the floor
  int native_floor_min = 17;  // kDefaultNativeFloorMinM; 0: a runtime without the native floor
  bool has_hopper = true;  // false: not an sm_90 GPU
  int calls = 0;

 private:
  bool floor_ = false;
  bool native_floor_ = false;
  bool hopper_ = false;
  EmulatedBug bug_;
};

}  // namespace tl::verify::testing
