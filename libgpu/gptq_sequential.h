// One sequential calibration on the GPU, the body of gptq_device.h's calibrate() once its
// checks and memory plan are done: the model streamed block by block (one resident block, or the
// loop's blocks), each block's forward over the calibration chunks accumulating its linears'
// Hessians, GPTQ of each selected linear, W_hat written back before the next block's forward
// (gptq_device.h describes the schedule). Internal to libgpu (gptq_device.cpp and
// gptq_sequential.cpp); built with CUDA only.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "libconvert/gptq_backend.h"
#include "libconvert/model_source.h"
#include "libgpu/gptq_device.h"
#include "libgpu/gptq_gpu.h"

namespace tl::gpu {

// Whole windows per calibration chunk (kChunkRows rows, at least one window).
inline int64_t chunk_windows(int64_t seq_len) { return std::max<int64_t>(1, kChunkRows / seq_len); }

// The caller's HDF5 lock (SequentialCalls::hdf5_mutex) held for a scope, or nothing when null.
inline std::unique_lock<std::mutex> hdf5_lock(std::mutex* mu) {
  return mu ? std::unique_lock<std::mutex>(*mu) : std::unique_lock<std::mutex>();
}

void run_sequential_calibration(GpuGptq& gptq, const ModelSource& src, const std::set<std::string>& selected,
                                const SequentialCalls& calls, GptqPhaseTimes& times, const std::vector<int32_t>& tokens,
                                int64_t seq_len, int64_t n_seq, bool activations_on_host);

}  // namespace tl::gpu
