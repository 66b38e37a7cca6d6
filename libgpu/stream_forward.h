// The streamed forward on the GPU: several models (the reference, FILE, --baseline) walk their
// blocks in lockstep, one block of each on the device at a time, and many residual streams (one
// per model, path and mode) run through each block before the next arrives. What the e2e tier
// runs (libverify/e2e_gpu.cpp drives it); memory is the same for 2 blocks and for 126.
//
//   per step s (block s of the schedule), slot s % 2:
//     reader thread   stage_block(m, slot, block)   pinned copy, async upload and conversions on
//                                                    the copy stream (device_model.h), event
//     main thread     run_step(slot)                every stream through its model's block:
//                                                    waits for the slot's event on the compute
//                                                    stream, so block s + 1 uploads while s runs
//   then            stage_head(m, ...)            the head and final norm of each model (the
//                                                    block slots are freed first)
//                   logits(stream, batch, t0, t1)  a chunk of positions of one batch: final norm,
//                                                    the head (at M = its rows in prefill, once
//                                                    per position at M = batch in decode)
//                   stats(...)                     lse, argmax, target logits, KLD vs kept chunks
//
// Residual streams live on the device (fp32 [windows x T, D] each, a decode stream's rows
// position-major within each batch), or, where plan() says they do not fit, in pinned host
// memory, copied in and out around each batch. Compute runs on the legacy default stream (the
// dispatcher's), uploads on a non-blocking stream, ordered by events.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/kernel_options.h"
#include "formats/model_config.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_source.h"
#include "libgpu/model_gpu.h"

namespace tl::gpu {

// Which forms of its weights a model's device blocks hold.
struct DeviceForms {
  bool fp16 = true;    // fp16 copies of quantized weights (the fp16 path, --per-layer swaps)
  bool native = true;  // q / scale / zero (the native path)
  bool marlin = true;  // Marlin sections, where the stored weight has one (the Marlin path)
};

// What one model of the run holds on the device.
struct StreamModel {
  ModelConfig config;
  DeviceForms forms;
};

// One linear weight as the sizes need it: from a stored weight (device_model.h) or, before any
// read, from a source's entries (model_footprint). The one size rule of the uploads and the plan.
struct LinearFootprint {
  int64_t K = 0, N = 0;
  bool quantized = false;
  int64_t groups = 0;        // quantized: G
  int64_t marlin_n = 0;      // quantized: the Marlin section's columns (0: none)
  uint64_t dense_bytes = 0;  // dense: the bytes staged (fp64 narrowed to fp32)
  bool converts = false;     // dense: needs device staging to convert (not fp16 already [K, N])
};
// Device bytes of the weight with `forms` (a Marlin workspace aside), pinned-arena bytes of its
// upload (every piece at a 256-byte boundary, as PinnedArena places them), and the device staging
// a dense weight converts through.
uint64_t linear_device_bytes(const LinearFootprint& l, DeviceForms forms);
uint64_t linear_staged_bytes(const LinearFootprint& l, DeviceForms forms);
uint64_t linear_conversion_bytes(const LinearFootprint& l);
// Pinned staging places every piece at a 256-byte boundary (PinnedArena, device_model.h).
constexpr uint64_t kStagingAlign = 256;
inline uint64_t staging_aligned(uint64_t n) { return (n + kStagingAlign - 1) / kStagingAlign * kStagingAlign; }
// A dense weight's staged bytes: fp64 is narrowed to fp32 on the host, as the float32 loaders read it.
inline uint64_t dense_staged_bytes(DType t, int64_t numel) {
  return uint64_t(numel) * (t == DType::F64 ? 4 : dtype_size(t));
}

// One residual stream: model `model`'s forward on `path` in `mode` over `windows` windows of T
// tokens, `batch` windows per forward.
struct StreamSpec {
  StreamSpec() = default;
  StreamSpec(int model_, GpuPath path_, ForwardMode mode_, int64_t windows_, int64_t T_, int64_t batch_,
             const int32_t* tokens_)
      : model(model_), path(path_), mode(mode_), windows(windows_), T(T_), batch(batch_), tokens(tokens_) {}
  int model = 0;
  GpuPath path = GpuPath::kFp16;
  ForwardMode mode = ForwardMode::kPrefill;
  int64_t windows = 0, T = 0, batch = 1;
  const int32_t* tokens = nullptr;  // host [windows, T], sequence-major; must outlive the streamer
  // --per-layer: linear swap_linear of the block named swap_prefix is model swap_model's fp16
  // copy of it (the quantized weight swapped into the reference), in every step of that block;
  // swap_prefix "head": the head is (swap_model's fp16 copy of its head).
  int swap_model = -1, swap_linear = -1;
  std::string swap_prefix;
};

// Device and pinned-host bytes of a run, from the shapes before anything is read.
struct StreamPlan {
  uint64_t blocks = 0;        // 2 slots x every model's largest block (every form it holds)
  uint64_t staging = 0;       // device staging of dense weights being converted (2 slots)
  uint64_t residuals = 0;     // every stream's residual
  uint64_t activations = 0;   // one batch's activations (the largest stream's)
  uint64_t head = 0;          // the head phase: every model's head + 3 logits chunks + its rows
  uint64_t scratch = 0;       // launcher scratch, cuBLAS
  uint64_t pinned = 0;        // host: 2 slots x every model's largest staged block
  bool residuals_on_host = false;
  int64_t chunk_positions = 0;  // positions per logits chunk
  uint64_t device() const;      // peak: max(block phase, head phase) + residuals + activations + scratch
};

// Block sizes per model for the plan: the largest block's device and staged bytes (from a
// source's entries, no read) and its head's.
struct ModelFootprint {
  uint64_t block_device = 0, block_staged = 0, block_dense_staging = 0;
  uint64_t head_device = 0, head_staged = 0, head_dense_staging = 0;
};
ModelFootprint model_footprint(const ModelSource& src, const StreamModel& forms);

// The plan for `streams` over `models` given `free` device bytes: residuals on the device when
// everything fits with them there, else on the host. Throws tl::Error when even one block of
// each model, one batch and the head do not fit, with the numbers and the knobs that help.
StreamPlan plan_stream_run(const std::vector<StreamModel>& models, const std::vector<ModelFootprint>& sizes,
                           const std::vector<StreamSpec>& streams, uint64_t free);

// Per-row results of a logits chunk (rows s-major: row s * (t1 - t0) + t - t0).
struct ChunkStats {
  std::vector<float> lse, target;    // log-sum-exp; the logit of the target (0 where none)
  std::vector<int32_t> argmax;
  std::vector<float> kld_a, kld_b;   // KL(kept a || this), KL(kept b || this): where asked
};

// Phase times of a step or of the run, in seconds.
struct StepTimes {
  double upload = 0;   // copies and conversions on the copy stream (GPU time)
  double compute = 0;  // the streams through the block (GPU time)
  std::vector<double> stream_compute;  // of which each stream's
};

class GpuStreamer {
 public:
  GpuStreamer(std::vector<StreamModel> models, std::vector<StreamSpec> streams, const StreamPlan& plan,
              const cuda::KernelOptions& options);
  ~GpuStreamer();
  GpuStreamer(const GpuStreamer&) = delete;
  GpuStreamer& operator=(const GpuStreamer&) = delete;

  // x = the embedding rows of each stream of `model` (embed [vocab, D] as stored; the rows are
  // rounded to fp16 as the runtime's fp16 table holds them).
  void embed(int model, const Tensor& embed);

  // Reader thread: block `b` of `model` into `slot` (0 or 1). One call at a time.
  void stage_block(int model, int slot, const StoredBlock& b);
  // Main thread: every stream through its model's block in `slot`; returns when the work is
  // queued. around(i, false) / around(i, true) are called before and after stream i's launches
  // (the e2e tier counts each path's GEMMs there). last_step_times(): the step's GPU times.
  void run_step(int slot, const std::function<void(int stream, bool done)>& around = {});
  StepTimes last_step_times();  // waits for the last step

  // After the last step: frees the block slots, uploads every model's head and final norm.
  void stage_head(int model, const StoredLinear& head, const std::vector<float>& final_norm);

  // Logits of stream `stream`, batch `batch`, positions [t0, t1) into kept buffer `into` (0, 1 or
  // 2); rows s-major over the batch's windows.
  void logits(int stream, int64_t batch, int64_t t0, int64_t t1, int into);
  // Statistics of kept buffer `buf` (the last logits() into it): targets per row (< 0: none),
  // KLD against kept buffers kld_a / kld_b (-1: not asked).
  ChunkStats stats(int buf, const std::vector<int32_t>& targets, int kld_a, int kld_b);
  // Kept buffer `buf` as fp32 on the host (rows x vocab).
  std::vector<float> logits_host(int buf);

  const GpuModelInfo& info(int model) const;  // the model's weights as its device blocks held them
  uint64_t peak_device_bytes() const;         // the largest sum of this run's own allocations

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tl::gpu
