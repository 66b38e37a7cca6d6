// Host code that owns device memory -- libverify's kernel backend and GPU model, the CUDA tests,
// the benchmarks -- uses this one buffer class and this one error idiom: a failing CUDA call
// throws CudaError (a tl::Error: a tool reports it as one line, exit 2) naming the call, the
// file and line and the CUDA error; an allocation names the bytes asked for and what was free
// (cuda_errors.h: every allocation goes through device_malloc and its fault hook). The launchers themselves never throw: they return an rc
// (cuda_check.h). Host-only header; needs the CUDA runtime, no device compiler.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "core/error.h"
#include "cuda/cuda_errors.h"

namespace tl::cuda {

class CudaError : public tl::Error {
 public:
  using tl::Error::Error;
};

inline void throw_if_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  throw CudaError(detail::cuda_call_failure(e, call, file, line));
}

// Why device 0 cannot be used, or "" when it can: the one wording of every "no GPU" message
// (the GPU tiers' skip, the e2e tier's --device cuda, gptq-quantize --device cuda). A missing or
// too old driver reads as what it is on a GPU-less machine, not as a version mismatch.
inline std::string cuda_device_unavailable_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    cudaGetLastError();
    return "no CUDA GPU on this machine (no NVIDIA driver loaded)";
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
  }
  if (count == 0) return "no CUDA device";
  return "";
}

// "NVIDIA H200 (sm_90)": the one spelling of a device in reports, provenance and log lines.
inline std::string cuda_device_label(const cudaDeviceProp& p) {
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ")";
}

}  // namespace tl::cuda

// Evaluates a CUDA runtime call; throws tl::cuda::CudaError when it fails.
#define TL_CUDA_THROW(call) ::tl::cuda::throw_if_cuda_error((call), #call, __FILE__, __LINE__)

namespace tl::cuda {

// An owning device allocation of `size()` elements of T (at least one element is allocated, so
// get() is never null). Copies are synchronous; every call checks its CUDA status.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) { o.ptr_ = nullptr, o.count_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = o.ptr_, count_ = o.count_;
      o.ptr_ = nullptr, o.count_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // A new allocation of `count` elements (the contents are not kept).
  void resize(size_t count) {
    release();
    const size_t bytes = (count > 0 ? count : 1) * sizeof(T);
    void* p = nullptr;
    if (const cudaError_t e = device_malloc(&p, bytes)) throw CudaError(allocation_failure(bytes, e));
    ptr_ = static_cast<T*>(p);
    count_ = count;
  }
  // Grows to at least `count` elements (contents not kept); never shrinks.
  void reserve(size_t count) {
    if (!ptr_ || count > count_) resize(count);
  }

  T* get() const { return ptr_; }
  __half* half() const { return reinterpret_cast<__half*>(ptr_); }
  template <class U>
  U* as() const { return reinterpret_cast<U*>(ptr_); }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  void upload(const T* host) {
    if (count_) TL_CUDA_THROW(cudaMemcpy(ptr_, host, bytes(), cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<T>& host) {
    if (host.size() != count_)
      throw CudaError("upload of " + std::to_string(host.size()) + " elements into a buffer of " + std::to_string(count_));
    upload(host.data());
  }
  void download(T* host) const {
    if (count_) TL_CUDA_THROW(cudaMemcpy(host, ptr_, bytes(), cudaMemcpyDeviceToHost));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    download(host.data());
    return host;
  }
  // Synchronous like the copies: cudaMemset is asynchronous on the legacy stream, which a
  // kernel on a non-blocking stream (libverify's backend) does not wait for.
  void fill_bytes(int byte) {
    if (!count_) return;
    TL_CUDA_THROW(cudaMemset(ptr_, byte, bytes()));
    TL_CUDA_THROW(cudaStreamSynchronize(nullptr));
  }
  // 0xFF bytes: fp16 0xFFFF and fp32 0xFFFFFFFF are NaN, so an unwritten output cannot pass.
  void poison() { fill_bytes(0xff); }
  void zero() { fill_bytes(0); }

 private:
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace tl::cuda
