// The TinyLoop forward on the GPU, for the e2e tier: the same model as libconvert's CPU
// forward (model_forward.h), with every linear layer going through the dispatcher
// tl::cuda::quant_gemm and the other ops in cuda/model_ops.h.
//
// Paths (which form of each linear weight quant_gemm gets):
//   fp16    every linear weight as an fp16 copy of W (W_hat = q * scale + zero for quantized
//           weights, rounded to fp16 once): the reference, cuBLAS fp16 GEMMs
//   native  quantized weights as q / scale / zero with Marlin dispatch off -> int4_gemm
//   marlin  quantized weights with their Marlin section, dispatch on -> marlin_mm_asymmetric
//           (weights without a section, or that fail the gate, fall back to int4_gemm and the
//           dispatcher counts why)
// Dense (unquantized) linear weights run as fp16 copies on every path. Activations feeding a
// GEMM are fp16, the residual stream and all other math fp32 (HF's fp16 Llama keeps the
// residual in fp16; fp32 here keeps the paths' differences about the weights).
//
// Only in a CUDA build (TL_HAVE_CUDA); gpu_model_unavailable_reason() says why otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/kernel_options.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"

namespace tl::gpu {

enum class GpuPath { kFp16, kNative, kMarlin };
const char* gpu_path_name(GpuPath p);  // "fp16", "native-int4", "marlin"

// Empty when a GPU model can be built here (CUDA build, a device of sm_80+), else why not.
std::string gpu_model_unavailable_reason();

struct GpuModelInfo {
  std::string device;          // "NVIDIA H200 (sm_90)"
  int linear_weights = 0;      // every linear weight
  int quantized = 0;           // of which quantized
  int marlin_packed = 0;       // of which carry a Marlin section
  uint64_t weight_bytes = 0;   // device bytes of all weights (every form uploaded)
  uint64_t marlin_bytes = 0;   // device bytes the Marlin sections add (B, s, delta, workspace)
};

// What one forward of `rows` rows adds on the device (activations, logits, row statistics), from
// the shapes before anything is allocated. device_free_bytes: cudaMemGetInfo's free bytes of
// device 0 (0 without CUDA).
uint64_t gpu_model_batch_bytes(const ModelConfig& c, int64_t rows);
uint64_t device_free_bytes();

// A whole model resident on the GPU (device_model.h's blocks, uploaded once), for tests and
// cross-checks of small models. The e2e tier streams instead (stream_forward.h).
class GpuModel {
 public:
  // Uploads `w` to device 0. with_fp16: also make the fp16 copies the fp16 path needs. options:
  // the launchers' options the native and Marlin paths dispatch with, as the runtime runs them
  // (its tool's main reads them: apps/kernel_env.h). Throws tl::Error (no device, out of memory, ...).
  GpuModel(const ModelWeights& w, bool with_fp16, const cuda::KernelOptions& options);
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  const GpuModelInfo& info() const;
  const ModelConfig& config() const;
  bool has_path(GpuPath p) const;  // fp16 needs with_fp16; native / marlin need a quantized weight

  // Runs tokens [n_seq, T] (host) through the model on `path`; the logits stay on the device
  // (fp16 [n_seq * T, vocab], row s * T + t in both modes) until the next forward. Returns the
  // device pointer. kDecode: every linear, the head included, once per position on its n_seq
  // rows (M = n_seq; libgpu/block_forward.h).
  const void* forward(const int32_t* tokens, int n_seq, int T, GpuPath path,
                      ForwardMode mode = ForwardMode::kPrefill);
  // The last forward's logits as fp32 on the host.
  void logits_to_host(std::vector<float>* out) const;
  int64_t last_rows() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tl::gpu
