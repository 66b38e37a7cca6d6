// Per-device SM counts and the per-(device, stream) scratch; see device_context.h.
#include "cuda/device_context.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include "cuda/cuda_check.h"

namespace tl::cuda::detail {
namespace {

std::mutex g_mutex;  // guards the maps below

std::map<int, int>& sm_cache() {
  static std::map<int, int> m;
  return m;
}

struct ScratchKey {
  int device;
  cudaStream_t stream;
  std::thread::id thread;  // only for cudaStreamPerThread; default id otherwise
  bool operator<(const ScratchKey& o) const {
    return std::tie(device, stream, thread) < std::tie(o.device, o.stream, o.thread);
  }
};
struct ScratchBuf {
  void* ptr = nullptr;
  size_t bytes = 0;
};
std::map<ScratchKey, ScratchBuf>& scratch_map() {
  static std::map<ScratchKey, ScratchBuf> m;
  return m;
}

}  // namespace

int current_device_sms(int* device, int* sms) {
  TL_CUDA_CHECK(cudaGetDevice(device));
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = sm_cache().find(*device);
  if (it == sm_cache().end()) {
    int n = 0;
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, *device));
    it = sm_cache().emplace(*device, n).first;
  }
  *sms = it->second;
  return kOk;
}

namespace {

// The buffer of `key` in `map`, grown to at least `bytes` (doubling from 1 MiB, or from `floor`);
// zeroed on `stream` when (re)allocated if `zero`.
int stream_buffer(std::map<ScratchKey, ScratchBuf>& map, ScratchKey key, cudaStream_t stream, size_t bytes,
                  size_t floor, bool zero, void** ptr) {
  if (stream == cudaStreamPerThread) key.thread = std::this_thread::get_id();
  std::lock_guard<std::mutex> lock(g_mutex);
  ScratchBuf& buf = map[key];
  if (buf.bytes < bytes) {
    size_t grown = buf.bytes ? buf.bytes : floor;
    while (grown < bytes) grown *= 2;
    if (buf.ptr) {
      // Earlier launches on this stream may still read the old buffer.
      TL_CUDA_CHECK(cudaStreamSynchronize(stream));
      TL_CUDA_CHECK(cudaFree(buf.ptr));
      buf = ScratchBuf{};
    }
    if (const cudaError_t e = device_malloc(&buf.ptr, grown)) {
      detail::record_cuda_error("the stream's scratch: " + allocation_failure(grown, e));
      return kCudaError;
    }
    buf.bytes = grown;
    if (zero) TL_CUDA_CHECK(cudaMemsetAsync(buf.ptr, 0, grown, stream));
  }
  *ptr = buf.ptr;
  return kOk;
}

std::map<ScratchKey, ScratchBuf>& flags_map() {
  static std::map<ScratchKey, ScratchBuf> m;
  return m;
}

}  // namespace

int stream_scratch(int device, cudaStream_t stream, size_t bytes, void** ptr) {
  return stream_buffer(scratch_map(), ScratchKey{device, stream, std::thread::id()}, stream, bytes, size_t(1) << 20,
                       false, ptr);
}

int stream_flags(int device, cudaStream_t stream, size_t count, int** ptr) {
  void* p = nullptr;
  const int rc = stream_buffer(flags_map(), ScratchKey{device, stream, std::thread::id()}, stream,
                               count * sizeof(int), 4096, true, &p);
  *ptr = static_cast<int*>(p);
  return rc;
}

int open_kernel(const void* kernel, int device, int smem_bytes, int threads, int want,
                int* resident) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> opened;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(kernel, device);
  auto it = opened.find(key);
  if (it == opened.end()) {
    TL_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    int n = 0;
    TL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem_bytes));
    it = opened.emplace(key, std::max(1, std::min(n, want))).first;
  }
  *resident = it->second;
  return kOk;
}

int max_active_clusters(const void* kernel, int device, int smem_bytes, int threads, int cluster,
                        int* count) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int>, int> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(kernel, device, cluster);
  auto it = known.find(key);
  if (it == known.end()) {
    int major = 0, n = 0;
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major >= 9) {
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = unsigned(cluster);
      attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(unsigned(cluster));
      config.blockDim = dim3(unsigned(threads));
      config.dynamicSmemBytes = size_t(smem_bytes);
      config.attrs = &attr;
      config.numAttrs = 1;
      // A query the driver refuses (e.g. a configuration it cannot place) means no clusters:
      // the caller then uses its cluster-free path.
      if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
      }
    }
    it = known.emplace(key, n).first;
  }
  *count = it->second;
  return kOk;
}

}  // namespace tl::cuda::detail
