#include "libgpu/gptq_device.h"

#include "core/error.h"

#if TL_HAVE_CUDA
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <optional>

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include "cuda/cublas_gemm.h"
#include "cuda/device_buffer.h"
#include "cuda/gptq_ops.h"
#include "cuda/model_ops.h"
#include "formats/memory_budget.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"
#include "libgpu/block_forward.h"
#include "libgpu/gptq_gpu.h"
#include "libgpu/gptq_sequential.h"
#include "libgpu/launch_check.h"
#include "libgpu/model_gpu.h"
#endif

namespace tl::gpu {

#if !TL_HAVE_CUDA

namespace {
class NoGpu final : public GptqDevice {
 public:
  std::string unavailable_reason() const override { return "built without CUDA (no nvcc at configure time)"; }
  std::string name() const override { return "none"; }
  std::string software() const override { return "none"; }
  GptqResult gptq(const float*, int64_t, int64_t, const float*, const GptqOptions&, GptqPhaseTimes*) override {
    throw Error(unavailable_reason());
  }
  SequentialMemory plan(const ModelConfig&, int64_t, int64_t, const std::set<std::string>&) const override {
    throw Error(unavailable_reason());
  }
  void calibrate(const ModelSource&, const std::vector<int32_t>&, int64_t, int64_t, const std::set<std::string>&,
                 const SequentialCalls&, GptqPhaseTimes*) override {
    throw Error(unavailable_reason());
  }
};
}  // namespace

std::unique_ptr<GptqDevice> make_gptq_device() { return std::make_unique<NoGpu>(); }

#else

namespace {


// Parameters of one block (its linears and norms), from the entry shapes the config gives.
uint64_t block_params(const ModelConfig& c) {
  const std::string prefix = block_prefix(c.n_pre == 0, 0);
  uint64_t n = 2 * uint64_t(c.d_model);  // attn_norm, mlp_norm
  for (const char* part : kBlockLinearNames) {
    const std::vector<int64_t> kn = expected_entry_shape(c, prefix + "." + part);
    n += uint64_t(kn[0]) * uint64_t(kn[1]);
  }
  return n;
}

// The largest linear weight GPTQ meets, [K, N].
std::pair<int64_t, int64_t> largest_weight(const ModelConfig& c, const std::set<std::string>& selected) {
  int64_t K = 0, N = 0;
  for (const std::string& name : selected) {
    const std::vector<int64_t> s = expected_entry_shape(c, name);
    if (s.size() == 2 && s[0] * s[1] > K * N) K = s[0], N = s[1];
  }
  return {K, N};
}

class CudaGptqDevice final : public GptqDevice {
 public:
  std::string unavailable_reason() const override { return gpu_model_unavailable_reason(); }

  std::string name() const override {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "device 0";
    return cuda::cuda_device_label(prop);
  }

  std::string software() const override {
    auto cuda_version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    int driver = 0, runtime = 0, blas[3] = {0, 0, 0}, solver[3] = {0, 0, 0};
    const libraryPropertyType parts[3] = {MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL};
    if (cudaDriverGetVersion(&driver) != cudaSuccess || cudaRuntimeGetVersion(&runtime) != cudaSuccess) {
      (void)cudaGetLastError();
      return "unknown";
    }
    for (int i = 0; i < 3; ++i) {
      if (cublasGetProperty(parts[i], &blas[i]) != CUBLAS_STATUS_SUCCESS) return "unknown";
      if (cusolverGetProperty(parts[i], &solver[i]) != CUSOLVER_STATUS_SUCCESS) return "unknown";
    }
    auto dotted = [](const int* v) { return std::to_string(v[0]) + "." + std::to_string(v[1]) + "." + std::to_string(v[2]); };
    return "driver " + cuda_version(driver) + ", runtime " + cuda_version(runtime) + ", cuBLAS " + dotted(blas) +
           ", cuSOLVER " + dotted(solver);
  }

  GptqResult gptq(const float* W, int64_t K, int64_t N, const float* H, const GptqOptions& opt,
                  GptqPhaseTimes* times) override {
    GptqGpuTimes t;
    GptqResult r = engine().quantize_host(W, K, N, H, opt, &t);
    if (times) times->cholesky += t.cholesky, times->sweep += t.sweep;
    return r;
  }

  SequentialMemory plan(const ModelConfig& c, int64_t n_seq, int64_t seq_len,
                        const std::set<std::string>& selected) const override {
    const uint64_t rows = uint64_t(n_seq) * uint64_t(seq_len), D = uint64_t(c.d_model);
    const uint64_t crow = uint64_t(std::min(n_seq, chunk_windows(seq_len)) * seq_len);
    const BlockBufferSizes b = block_buffer_elements(c, int64_t(crow));
    const uint64_t chunk = crow * D * 4 + 2 * uint64_t(2 * b.h + b.qkv + 2 * b.q + 2 * b.kv + 2 * b.gate);
    const uint64_t blocks = std::max<uint64_t>(1, uint64_t(c.n_loop));  // resident at once
    const uint64_t weights16 = blocks * block_params(c) * 2;
    const uint64_t weights32 = blocks * block_params(c) * 4;  // the selected weights' fp32 copies for GPTQ
    const uint64_t F = uint64_t(c.ffn), A = uint64_t(c.n_heads * c.d_head);
    // One accumulator per slot (qkv and gate / up: K = D; o: K = A; down: K = F), and the copy
    // quantize_one makes of the one mlp_gate shares with mlp_up (K = D, reused block to block).
    const uint64_t hess = blocks * 4 * (2 * D * D + A * A + F * F) + 4 * D * D;
    const auto [K, N] = largest_weight(c, selected);
    // GPTQ's buffers for the weight that needs the most (a block's linears run resident: their
    // fp32 copies are weights32; the head is uploaded into GPTQ's own W), and the fp32 staging of
    // the largest unselected block linear (uploaded only to become fp16).
    uint64_t gptq = 0, staging = 0;
    for (const std::string& name : selected) {
      const std::vector<int64_t> s = expected_entry_shape(c, name);
      if (s.size() == 2) gptq = std::max(gptq, GpuGptq::device_bytes(s[0], s[1], name != "head"));
    }
    for (int64_t i = 0; i < c.n_pre + c.n_loop; ++i)
      for (const char* part : kBlockLinearNames) {
        const std::string name = block_prefix(i >= c.n_pre, i < c.n_pre ? i : i - c.n_pre) + "." + part;
        const std::vector<int64_t> s = expected_entry_shape(c, name);
        if (!selected.count(name) && s.size() == 2) staging = std::max(staging, uint64_t(s[0]) * uint64_t(s[1]) * 4);
      }
    const uint64_t work = chunk + weights16 + weights32 + hess + gptq + staging + (256ull << 20);
    const uint64_t acts = rows * D * 4;
    SequentialMemory m;
    size_t free = 0, total = 0;
    TL_CUDA_THROW(cudaMemGetInfo(&free, &total));
    m.device_free = free;
    m.activations_on_host = work + acts > uint64_t(free) * 9 / 10;
    m.device_bytes = work + (m.activations_on_host ? 0 : acts);
    if (m.device_bytes > uint64_t(free))
      throw Error("GPU calibration needs " + format_bytes(m.device_bytes) + " on " + name() + " beyond the activations, " +
                  format_bytes(free) + " free (one block's work: chunk buffers " + format_bytes(chunk) + ", fp16 weights " +
                  format_bytes(weights16) + ", their fp32 copies for GPTQ " + format_bytes(weights32) + ", Hessians " + format_bytes(hess) + ", GPTQ " +
                  format_bytes(gptq) + ")");
    const uint64_t block32 = blocks * block_params(c) * 4;
    const uint64_t embed = uint64_t(c.vocab) * D * 4;
    const uint64_t head = selected.count("head") ? uint64_t(c.vocab) * D * 4 : 0;
    m.host_bytes = 2 * block32 + embed + head + crow * D * 4 + uint64_t(K) * uint64_t(N) * 3 +
                   (m.activations_on_host ? acts : 0);
    m.formula = "2 x one block in float32 (" + format_bytes(2 * block32) + ") + the embedding in float32 (" +
                format_bytes(embed) + ")" + (head ? " + the head in float32 (" + format_bytes(head) + ")" : "") +
                " + a chunk of staging + one weight's codes" +
                (m.activations_on_host ? " + the activations, which do not fit the GPU (" + format_bytes(acts) + ")" : "");
    return m;
  }

  void calibrate(const ModelSource& src, const std::vector<int32_t>& tokens, int64_t seq_len, int64_t n_seq,
                 const std::set<std::string>& selected, const SequentialCalls& calls, GptqPhaseTimes* times) override;

 private:
  GpuGptq& engine() {
    if (!gptq_) gptq_ = std::make_unique<GpuGptq>();
    return *gptq_;
  }
  std::unique_ptr<GpuGptq> gptq_;
};

void CudaGptqDevice::calibrate(const ModelSource& src, const std::vector<int32_t>& tokens, int64_t seq_len,
                               int64_t n_seq, const std::set<std::string>& selected, const SequentialCalls& calls,
                               GptqPhaseTimes* times) {
  const std::string why = unavailable_reason();
  if (!why.empty()) throw Error(why);
  const ModelConfig& c = src.config();
  if (seq_len <= 0 || n_seq <= 0 || int64_t(tokens.size()) < n_seq * seq_len)
    throw Error("calibration needs " + std::to_string(n_seq) + " windows of " + std::to_string(seq_len) + " tokens");
  if (seq_len > 65535) throw Error("calibration windows longer than 65535 tokens are not supported on the GPU");
  for (int64_t r = 0; r < n_seq * seq_len; ++r)
    if (tokens[size_t(r)] < 0 || tokens[size_t(r)] >= c.vocab)
      throw Error("token id " + std::to_string(tokens[size_t(r)]) + " outside [0, " + std::to_string(c.vocab) + ")", "",
                  "token " + std::to_string(r));
  for (const std::string& name : selected)
    if (expected_entry_shape(c, name).size() != 2 || name == "embed")
      throw Error("selected weight is not a linear weight of the model's forward pass", "", name);
  const SequentialMemory m = plan(c, n_seq, seq_len, selected);
  GptqPhaseTimes local;
  run_sequential_calibration(engine(), src, selected, calls, times ? *times : local, tokens, seq_len, n_seq,
                             m.activations_on_host || calls.activations_on_host);
}

}  // namespace

std::unique_ptr<GptqDevice> make_gptq_device() { return std::make_unique<CudaGptqDevice>(); }

#endif

}  // namespace tl::gpu
