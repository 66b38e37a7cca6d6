// A model's weights on the GPU and the forward over them, the one implementation behind both
// GPU runners: GpuModel (model_gpu.h: a small model resident, for tests and cross-checks) and
// GpuStreamer (stream_forward.h: the e2e tier, block by block). libgpu-internal, CUDA only.
//
// Uploads go from the stored form (model_source.h StoredBlock) through a pinned host arena to
// the device, asynchronously on the caller's stream, and convert there:
//   dense weight   stored bytes (fp32 / fp16 / bf16, [K, N] or PyTorch's [N, K]) -> fp16 [K, N]
//                  (cuda::weight_to_half: the host's float_to_half of the widened value, bit for bit)
//   quantized      q (packed two per byte on the host) / scale / zero as stored, the Marlin section
//                  as stored, and where the fp16 path needs it W_hat = fp16(fmaf(q, scale, zero))
//                  (cuda::dequantize_native: the host's to_half(dequantize()), bit for bit)
// so no float32 copy of a weight is ever made on the host.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "cuda/kernel_options.h"
#include "cuda/device_buffer.h"
#include "cuda/tl_kernels.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_source.h"
#include "libgpu/block_forward.h"
#include "libgpu/model_gpu.h"
#include "libgpu/stream_forward.h"

namespace tl::gpu {

using DevBuf = cuda::DeviceBuffer<uint8_t>;

// Page-locked host memory a block is staged in before its asynchronous upload. put() copies
// at 256-byte aligned offsets; reset() starts the next block (the caller first waits until the
// last block's copies are done).
class PinnedArena {
 public:
  PinnedArena() = default;
  ~PinnedArena();
  PinnedArena(const PinnedArena&) = delete;
  PinnedArena& operator=(const PinnedArena&) = delete;
  void reserve(size_t bytes);  // grows; contents not kept
  void reset() { used_ = 0; }
  uint8_t* take(size_t bytes);  // room for `bytes` (reserve first: throws when full)
  const uint8_t* put(const void* src, size_t bytes);
  size_t used() const { return used_; }
  size_t capacity() const { return cap_; }

 private:
  uint8_t* base_ = nullptr;
  size_t cap_ = 0, used_ = 0;
};

struct DeviceLinear {
  std::string name;
  int K = 0, N = 0;
  bool quantized = false, packed = false, has_fp16 = false;
  DevBuf fp16, q, scale, zero, mB, ms, mdelta, mwork;
  cuda::DeviceQuantWeight w_fp16, w_native, w_marlin;
  const cuda::DeviceQuantWeight& view(GpuPath p) const {
    return p == GpuPath::kFp16 ? w_fp16 : p == GpuPath::kNative ? w_native : w_marlin;
  }
  uint64_t bytes() const;
};

struct DeviceBlock {
  std::string prefix;
  DevBuf params;        // norms and biases, fp32, one allocation
  BlockParams p;        // pointers into params (null where the config has none)
  DeviceLinear lin[kBlockLinears];
  DevBuf pair_work;     // the gate + up pair's Marlin workspace (both packed), else empty
  bool has_pair = false;
  uint64_t bytes() const;
};

// A stored weight's footprint (stream_forward.h's size rule), the arena bytes a StoredLinear /
// StoredBlock takes, and the device bytes a DeviceLinear takes with `forms`, its Marlin workspace
// included.
LinearFootprint footprint_of(const StoredLinear& l);
uint64_t staged_bytes(const StoredLinear& l, DeviceForms forms);
uint64_t staged_bytes(const StoredBlock& b, DeviceForms forms);
uint64_t device_bytes(const StoredLinear& l, DeviceForms forms);

// Uploads on `stream`: everything is staged in `arena` first (which must have room:
// staged_bytes), then copied asynchronously; `raw` is device staging for dense weights that
// need converting (grown as needed). `out` keeps its allocations across calls (a slot of the
// streamed forward is refilled block after block); a call never frees memory that an earlier
// launch on another stream may still read unless it grows.
void upload_linear(const StoredLinear& l, DeviceForms forms, PinnedArena& arena, DevBuf& raw, DeviceLinear& out,
                   cudaStream_t stream);
void upload_block(const ModelConfig& c, const StoredBlock& b, DeviceForms forms, PinnedArena& arena, DevBuf& raw,
                  DeviceBlock& out, cudaStream_t stream);

// The GEMM of one linear on `path` (the dispatcher, as a runtime runs it), on the legacy stream.
void linear_gemm(const DeviceLinear& l, GpuPath path, const __half* X, __half* Y, int M,
                 const cuda::KernelOptions& runtime_options);

// Activations of one batch and the block forward over them (block_forward.h), on the legacy
// stream. One workspace serves every model of a run that shares the shapes.
class ForwardWorkspace {
 public:
  // Room for `rows` rows of model `c` (activations: h, qkv, q, k, v, att, y, gate, up).
  void reserve(const ModelConfig& c, int64_t rows);
  // x [n_seq * T, D] (fp32, rows in the mode's order) <- the block. Linear i comes from `b`, except
  // linear swap_i, which comes from `swap` (its fp16 copy: --per-layer). cos / sin: rope tables
  // of the model for T positions.
  void run_block(const ModelConfig& c, const DeviceBlock& b, GpuPath path, float* x, int n_seq, int T,
                 ForwardMode mode, const float* cos_tab, const float* sin_tab, const cuda::KernelOptions& options,
                 const DeviceLinear* swap = nullptr, int swap_i = -1);
  __half* h() const { return h_.as<__half>(); }
  uint64_t bytes() const;

 private:
  DevBuf h_, qkv_, q_, k_, v_, att_, y_, gate_, up_;
};

}  // namespace tl::gpu
