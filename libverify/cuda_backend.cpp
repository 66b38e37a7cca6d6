// KernelBackend on the real CUDA kernels (cuda/tl_kernels.h). The only file of libverify that
// includes CUDA headers; a build without CUDA compiles just the probe that says so.
//
// Each call allocates its device buffers, uploads, launches on a private stream, synchronizes
// and downloads: the verifier runs a few dozen cases, so simplicity beats reuse. Outputs that a
// kernel overwrites are pre-filled with NaN (bytes 0x7e -> half 0x7e7e) so an output tile the
// kernel forgets to write fails the tier instead of passing on stale zeros.
#include "libverify/kernel_backend.h"

#if TL_HAVE_CUDA

#include <cstdio>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/group_size.h"
#include "core/nibbles.h"
#include "cuda/device_buffer.h"
#include "cuda/tl_kernels.h"

namespace tl::verify {
namespace {

using tl::cuda::CudaError;
using tl::cuda::DeviceBuffer;

using tl::cuda::rc_message;
using tl::cuda::rc_text;

// A kernel broke its contract on a case: the tier's failure, not the tool's (cuda_backend's guarded).
class KernelFinding : public tl::Error {
 public:
  using tl::Error::Error;
};

class CudaBackend final : public KernelBackend {
 public:
  CudaBackend(int device, std::string name, const tl::cuda::KernelOptions& runtime)
      : device_(device), name_(std::move(name)) {
    TL_CUDA_THROW(cudaSetDevice(device_));
    TL_CUDA_THROW(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    floor_min_m_ = runtime.dequant_min_m;  // the runtime's crossovers
    native_floor_min_m_ = runtime.native_floor_min_m;
    hopper_ = runtime.hopper_kernel && tl::cuda::hopper_kernel_available(device_);
  }
  ~CudaBackend() override { if (stream_) cudaStreamDestroy(stream_); }
  std::string device_name() const override { return name_; }

  // What each call below allocates (its DeviceBuffers, in the same order), plus the launchers'
  // scratch: the per-stream buffer grows by doubling from 1 MiB past the dequantize floor's
  // 64 MiB tiles (<= 128 MiB), the split-K partials and flags live there too, and cuBLAS keeps a
  // workspace of its own (<= 32 MiB on sm_90): 192 MiB covers them.
  uint64_t case_device_bytes(CaseKernel kernel, int64_t M, int64_t N, int64_t K, int64_t g) const override {
    constexpr uint64_t kLauncherScratch = uint64_t(192) << 20;
    const uint64_t G = uint64_t(group_count(K, g)), a = uint64_t(M * K) * 2, c = uint64_t(M * N) * 2,
                   gn = G * uint64_t(N) * 2, b = uint64_t(K / 16) * 2 * uint64_t(N) * 4,
                   ws = uint64_t(tl::cuda::marlin_workspace_ints(int(N))) * 4;
    uint64_t bytes = 0;
    switch (kernel) {
      case CaseKernel::kMarlin: bytes = a + gn + c + b + ws; break;
      case CaseKernel::kCorrection: bytes = a + gn + c + uint64_t(M) * G * 4; break;
      case CaseKernel::kMarlinAsymmetric: bytes = a + 2 * gn + c + 128 + b + ws; break;
      case CaseKernel::kSwiglu: bytes = a + 2 * c + 2 * (2 * gn + b) + 2 * uint64_t(N) * 4 + 2 * ws; break;
      case CaseKernel::kNative: bytes = a + 2 * gn + c + uint64_t(K) * uint64_t(packed_row_bytes(N)); break;
    }
    return bytes + kLauncherScratch;
  }
  uint64_t device_free_bytes() const override {
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(device_) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return free_b;
  }

  KernelStatus marlin_gemm(const half_bits* A, const int32_t* B, const half_bits* s, half_bits* C,
                           int M, int N, int K, int group_size) override {
    return guarded("marlin_int4_tc_gemm", M, N, K, group_size, [&] {
      const int G = int(group_count(K, group_size));
      DeviceBuffer<uint16_t> dA(size_t(M) * K), ds(size_t(G) * N), dC(size_t(M) * N);
      DeviceBuffer<int32_t> dB(size_t(K / 16) * 2 * N);
      DeviceBuffer<int> ws(tl::cuda::marlin_workspace_ints(N));
      dA.upload(A); ds.upload(s); dB.upload(B);
      dC.fill_bytes(0x7e);
      ws.fill_bytes(0);
      const int rc = tl::cuda::marlin_int4_tc_gemm(half(dA), dB.get(), half(dC), half(ds), ws.get(),
                                                   M, N, K, group_size, stream_, options_);
      finish("marlin_int4_tc_gemm", rc, M, N, K, group_size);
      check_workspace_zero(ws, N);
      dC.download(C);
    });
  }

  KernelStatus correction(const half_bits* A, const half_bits* delta, half_bits* C, float* a_sum,
                          int M, int N, int K, int group_size) override {
    return guarded("a_group_sum + correction_accum", M, N, K, group_size, [&] {
      const int G = int(group_count(K, group_size));
      DeviceBuffer<uint16_t> dA(size_t(M) * K), dd(size_t(G) * N), dC(size_t(M) * N);
      DeviceBuffer<float> dsum(size_t(M) * G);
      dA.upload(A); dd.upload(delta); dC.upload(C);
      dsum.fill_bytes(0xff);  // NaN floats: an unwritten group sum poisons C visibly
      finish("a_group_sum", tl::cuda::a_group_sum(half(dA), dsum.get(), M, K, group_size, stream_),
             M, 0, K, group_size);
      finish("correction_accum",
             tl::cuda::correction_accum(half(dC), dsum.get(), half(dd), M, N, K, group_size, stream_),
             M, N, K, group_size);
      dsum.download(a_sum);
      dC.download(C);
    });
  }

  KernelStatus mm_asymmetric(const half_bits* A, const int32_t* B, const half_bits* s,
                             const half_bits* delta, half_bits* C, int M, int N, int K,
                             int group_size, int n_out) override {
    return guarded(n_out > 0 ? "marlin_mm_asymmetric_padded" : "marlin_mm_asymmetric", M, N, K, group_size, [&] {
      const int G = int(group_count(K, group_size));
      const int cols = n_out > 0 ? n_out : N;
      DeviceBuffer<uint16_t> dA(size_t(M) * K), ds(size_t(G) * N), dd(size_t(G) * N),
          dC(size_t(M) * cols + 64);  // + 64: a store past the padded section's n_out columns shows
      DeviceBuffer<int32_t> dB(size_t(K / 16) * 2 * N);
      DeviceBuffer<int> ws(tl::cuda::marlin_workspace_ints(N));
      dA.upload(A); ds.upload(s); dd.upload(delta); dB.upload(B);
      dC.fill_bytes(0x7e);
      ws.fill_bytes(0);
      const int rc = n_out > 0 ? tl::cuda::marlin_mm_asymmetric_padded(half(dA), dB.get(), half(ds), half(dd), half(dC),
                                                                        ws.get(), M, N, n_out, K, group_size, stream_,
                                                                        options_)
                               : tl::cuda::marlin_mm_asymmetric(half(dA), dB.get(), half(ds), half(dd), half(dC),
                                                                ws.get(), M, N, K, group_size, stream_, options_);
      finish(n_out > 0 ? "marlin_mm_asymmetric_padded" : "marlin_mm_asymmetric", rc, M, N, K, group_size);
      check_workspace_zero(ws, N);
      std::vector<half_bits> out(dC.size());
      dC.download(out.data());
      for (size_t i = size_t(M) * cols; i < out.size(); ++i)
        if (out[i] != 0x7e7e) throw KernelFinding("the kernel wrote past C [M, " + std::to_string(cols) + "]");
      std::copy(out.begin(), out.begin() + size_t(M) * cols, C);
    });
  }

  KernelStatus swiglu_pair(const half_bits* A, const int32_t* B_gate, const half_bits* s_gate,
                           const half_bits* delta_gate, const int32_t* B_up, const half_bits* s_up,
                           const half_bits* delta_up, const float* bias_gate, const float* bias_up, half_bits* C,
                           int M, int N, int K, int group_size) override {
    return guarded("marlin_swiglu_asymmetric", M, N, K, group_size, [&] {
      const int G = int(group_count(K, group_size));
      DeviceBuffer<uint16_t> dA(size_t(M) * K), dC(size_t(M) * N), scratch(size_t(M) * N);
      DeviceBuffer<uint16_t> ds[2] = {DeviceBuffer<uint16_t>(size_t(G) * N), DeviceBuffer<uint16_t>(size_t(G) * N)};
      DeviceBuffer<uint16_t> dd[2] = {DeviceBuffer<uint16_t>(size_t(G) * N), DeviceBuffer<uint16_t>(size_t(G) * N)};
      DeviceBuffer<int32_t> dB[2] = {DeviceBuffer<int32_t>(size_t(K / 16) * 2 * N),
                                     DeviceBuffer<int32_t>(size_t(K / 16) * 2 * N)};
      DeviceBuffer<float> db[2] = {DeviceBuffer<float>(bias_gate ? size_t(N) : 0),
                                   DeviceBuffer<float>(bias_up ? size_t(N) : 0)};
      DeviceBuffer<int> ws(tl::cuda::marlin_workspace_ints(2 * N));
      dA.upload(A);
      ds[0].upload(s_gate); dd[0].upload(delta_gate); dB[0].upload(B_gate);
      ds[1].upload(s_up); dd[1].upload(delta_up); dB[1].upload(B_up);
      if (bias_gate) db[0].upload(bias_gate);
      if (bias_up) db[1].upload(bias_up);
      dC.fill_bytes(0x7e);
      scratch.fill_bytes(0x7e);
      ws.fill_bytes(0);
      const int rc = tl::cuda::marlin_swiglu_asymmetric(
          half(dA), {dB[0].get(), half(ds[0]), half(dd[0])}, {dB[1].get(), half(ds[1]), half(dd[1])},
          bias_gate ? db[0].get() : nullptr, bias_up ? db[1].get() : nullptr, half(dC), half(scratch), ws.get(), M, N, K,
          group_size, stream_, options_);
      finish("marlin_swiglu_asymmetric", rc, M, N, K, group_size);
      check_workspace_zero(ws, 2 * N);
      dC.download(C);
    });
  }

  KernelStatus native_gemm(const half_bits* A, const uint8_t* q_packed, const half_bits* scale,
                           const half_bits* zero, half_bits* C, int M, int N, int K, int group_size) override {
    return guarded("int4_gemm", M, N, K, group_size, [&] {
      const int G = int(group_count(K, group_size));
      DeviceBuffer<uint16_t> dA(size_t(M) * K), ds(size_t(G) * N), dz(size_t(G) * N), dC(size_t(M) * N);
      DeviceBuffer<uint8_t> dq(size_t(K) * size_t(packed_row_bytes(N)));
      dA.upload(A); ds.upload(scale); dz.upload(zero); dq.upload(q_packed);
      dC.fill_bytes(0x7e);
      const int rc = tl::cuda::int4_gemm(half(dA), dq.get(), half(ds), half(dz), half(dC), M, N, K, group_size,
                                         stream_, options_);
      finish("int4_gemm", rc, M, N, K, group_size);
      dC.download(C);
    });
  }

  GemmPlan plan(PlanKernel kernel, int M, int N, int K, int group_size) override {
    TL_CUDA_THROW(cudaSetDevice(device_));
    GemmPlan p;
    const int rc = kernel == PlanKernel::kNative ? tl::cuda::int4_gemm_plan(M, N, K, group_size, &p, options_)
                   : kernel == PlanKernel::kSwiglu
                       ? tl::cuda::marlin_swiglu_plan(M, N, K, group_size, options_, &p)
                       : tl::cuda::marlin_plan(M, N, K, group_size, kernel == PlanKernel::kMarlinAsymmetric,
                                               options_, &p);
    // Any rc but kOk is an empty plan (the tiers choose other shapes). kCudaError included: a
    // kernel's set-up can fail where a GPU cannot hold its configuration, which is a declined
    // shape; a lost device fails the next case anyway.
    if (rc != tl::cuda::kOk) {
      cudaGetLastError();
      return {};
    }
    return p;
  }

  int prefill_floor_min_m() const override { return floor_min_m_; }
  void set_prefill_floor(bool on) override { options_.dequant_min_m = on ? floor_min_m_ : 0; }
  int native_floor_min_m() const override { return native_floor_min_m_; }
  void set_native_floor(bool on) override { options_.native_floor_min_m = on ? native_floor_min_m_ : 0; }
  bool hopper_kernel() const override { return hopper_; }
  void set_hopper_kernel(bool on) override { options_.hopper_kernel = on && hopper_; }

 private:
  static __half* half(const DeviceBuffer<uint16_t>& b) { return reinterpret_cast<__half*>(b.get()); }

  // A kernel's case. What the kernel got wrong (a refused shape, a workspace left dirty, a store
  // past C: KernelFinding) is the case's failure; a CUDA failure (an allocation, a launch, a
  // fault: CudaError) ends the run, exit 2, in one line naming the kernel, the shape and the call.
  template <class Body>
  KernelStatus guarded(const char* kernel, int M, int N, int K, int g, Body&& body) {
    try {
      TL_CUDA_THROW(cudaSetDevice(device_));
      body();
      return {};
    } catch (const KernelFinding& e) {
      return KernelStatus::failure(e.what());
    } catch (const CudaError& e) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s m=%d n=%d k=%d group=%d", kernel, M, N, K, g);
      throw CudaError(e.what(), "", buf);
    }
  }

  // rc of a launcher, then the launch error, then the execution error (synchronize).
  void finish(const char* kernel, int rc, int M, int N, int K, int g) {
    if (rc == tl::cuda::kCudaError) throw CudaError(rc_message(rc));  // guarded() names the call's kernel and shape
    if (rc != tl::cuda::kOk) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s returned rc=%d (%s) for m=%d n=%d k=%d group=%d", kernel,
                    rc, rc_text(rc), M, N, K, g);
      throw KernelFinding(buf);
    }
    TL_CUDA_THROW(cudaGetLastError());
    TL_CUDA_THROW(cudaStreamSynchronize(stream_));
  }

  // The kernel contract: the workspace is zeroed once at allocation and left zeroed.
  void check_workspace_zero(const DeviceBuffer<int>& ws, int N) {
    std::vector<int> h(tl::cuda::marlin_workspace_ints(N));
    ws.download(h.data());
    size_t bad = 0;
    for (int v : h) bad += v != 0;
    if (bad) throw KernelFinding("workspace not left zeroed: " + std::to_string(bad) + " of " +
                               std::to_string(h.size()) + " ints nonzero after the call");
  }

  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  // The launchers' defaults; dequant_min_m: set_prefill_floor, native_floor_min_m: set_native_floor.
  tl::cuda::KernelOptions options_;
  int floor_min_m_ = 0, native_floor_min_m_ = 0;
  bool hopper_ = false;
};

}  // namespace

BackendProbe open_gpu_backend(const tl::cuda::KernelOptions& runtime) {
  const std::string why = tl::cuda::cuda_device_unavailable_reason();
  if (!why.empty()) return {nullptr, why};
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    cudaGetLastError();
    return {nullptr, "cannot query CUDA device 0"};
  }
  const std::string name = tl::cuda::cuda_device_label(p);
  if (p.major < 8) return {nullptr, "GPU below sm_80: " + name};
  if (!tl::cuda::marlin_available(0))
    return {nullptr, "the Marlin kernel is not built for " + name + " (configure with TL_CUDA_ARCHS)"};
  // The device is there and usable by every check above: failing to open it (its stream) is
  // an error of the run (exit 2), not a skip that a CI gate would read as "no GPU here".
  return {std::make_unique<CudaBackend>(0, name, runtime), ""};
}

}  // namespace tl::verify

#else  // !TL_HAVE_CUDA

namespace tl::verify {
BackendProbe open_gpu_backend(const tl::cuda::KernelOptions&) {
  return {nullptr, "built without CUDA (no nvcc when the project was configured)"};
}
}  // namespace tl::verify

#endif
