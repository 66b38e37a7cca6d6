// Per-device facts and per-stream scratch memory shared by the launchers (internal header).
#pragma once

#include <atomic>
#include <cstddef>

#include <cuda_runtime_api.h>

namespace tl::cuda::detail {

// A yes/no fact about `device` (e.g. "the Marlin kernel runs here"), asked of query(device) once
// and kept in `cache` (zero-initialized: unknown); lock-free, so a race asks twice and stores the
// same answer. Devices past the cache are asked every time. For checks on every launch.
template <class Query>
bool cached_device_fact(std::atomic<int> (&cache)[64], int device, Query&& query) {
  if (device < 0 || device >= 64) return query(device);
  int v = cache[device].load(std::memory_order_relaxed);
  if (v == 0) {
    v = query(device) ? 2 : 1;
    cache[device].store(v, std::memory_order_relaxed);
  }
  return v == 2;
}

// The current device and its multiprocessor count (cached per device after the first query).
// Returns kOk or kCudaError.
int current_device_sms(int* device, int* sms);

// Scratch memory for one (device, stream): allocated on first use, grown by doubling when a
// call needs more, never freed while the process runs, so steady-state calls do no cudaMalloc.
// Keyed by stream as well as device so that work queued on two streams never shares a buffer
// (a buffer per device alone would race between streams). cudaStreamPerThread is a different
// stream in every host thread, so it is also keyed by the calling thread.
// Growth synchronizes `stream` before freeing the smaller buffer (work queued earlier may still
// read it); this happens a handful of times per process. Do not grow inside graph capture:
// warm the scratch up with one call of the same size first.
// Thread-safe (one mutex). Returns kOk or kCudaError; *ptr is 256-byte aligned.
int stream_scratch(int device, cudaStream_t stream, size_t bytes, void** ptr);
// Flags of one (device, stream) for a kernel's cross-block hand-overs: `count` ints, zero when
// first handed out (and after growth), which every kernel that uses them leaves zero again. Kept
// apart from the scratch, which the next launch on the stream overwrites. Same rules otherwise.
int stream_flags(int device, cudaStream_t stream, size_t count, int** ptr);

// Prepares `kernel` for launches with `smem_bytes` of dynamic shared memory on `device`
// (cudaFuncSetAttribute is per device; done once per (kernel, device)) and returns in *resident
// how many of its blocks of `threads` one SM holds there, capped at `want` (the count it was
// compiled for): fewer where shared memory per SM is smaller (sm_86 / sm_89), so a launcher
// shrinks its grid instead of queueing a second wave. Thread-safe. Returns kOk or kCudaError.
int open_kernel(const void* kernel, int device, int smem_bytes, int threads, int want,
                int* resident);

// How many clusters of `cluster` blocks of `kernel` (opened with open_kernel for the same
// smem_bytes and threads) can run at once on `device` (cudaOccupancyMaxActiveClusters: a
// cluster's blocks share one GPC, so this is not sms / cluster). 0 where clusters do not exist
// (before sm_90), cannot be placed or the query fails. Cached per (kernel, device, cluster). Thread-safe.
// Returns kOk or kCudaError.
int max_active_clusters(const void* kernel, int device, int smem_bytes, int threads, int cluster,
                        int* count);

}  // namespace tl::cuda::detail
