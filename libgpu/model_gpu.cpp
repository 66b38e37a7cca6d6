#include "libgpu/model_gpu.h"

#include <algorithm>

#include "core/error.h"
#include "core/half.h"
#include "core/nibbles.h"
#include "core/parallel.h"
#include "libconvert/model_forward.h"

#if TL_HAVE_CUDA
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "cuda/model_ops.h"
#include "libgpu/device_model.h"
#include "libgpu/launch_check.h"
#endif

namespace tl::gpu {

uint64_t gpu_model_batch_bytes(const ModelConfig& c, int64_t rows) {
  const uint64_t R = uint64_t(rows), D = uint64_t(c.d_model), V = uint64_t(c.vocab);
  const uint64_t q = uint64_t(c.n_heads) * uint64_t(c.d_head), kv = uint64_t(c.n_kv_heads) * uint64_t(c.d_head);
  uint64_t b = R * 4 * 2 + R * D * 4;                 // tokens, targets; residual stream x (fp32)
  b += R * D * 2 * 2 + R * (q + 2 * kv) * 2;          // h, y; qkv
  b += R * q * 2 * 2 + R * kv * 2 * 2;                // q, att; k, v
  b += R * uint64_t(c.ffn) * 2 * 2;                   // gate, up
  b += R * V * 2 * 2 + R * 4 * 2;                     // logits and the saved reference logits, their lse
  b += R * 4 * 4 + uint64_t(c.max_seq) * uint64_t(c.d_head) * 4;  // row statistics, RoPE tables
  return b;
}

const char* gpu_path_name(GpuPath p) {
  switch (p) {
    case GpuPath::kFp16: return "fp16";
    case GpuPath::kNative: return "native-int4";
    case GpuPath::kMarlin: return "marlin";
  }
  return "?";
}

#if !TL_HAVE_CUDA

std::string gpu_model_unavailable_reason() { return "built without CUDA (no nvcc at configure time)"; }
uint64_t device_free_bytes() { return 0; }

struct GpuModel::Impl {};
GpuModel::GpuModel(const ModelWeights&, bool, const cuda::KernelOptions&) {
  throw Error(gpu_model_unavailable_reason(), "", "gpu model");
}
GpuModel::~GpuModel() = default;
const GpuModelInfo& GpuModel::info() const { static GpuModelInfo i; return i; }
const ModelConfig& GpuModel::config() const { static ModelConfig c; return c; }
bool GpuModel::has_path(GpuPath) const { return false; }
const void* GpuModel::forward(const int32_t*, int, int, GpuPath, ForwardMode) { return nullptr; }
void GpuModel::logits_to_host(std::vector<float>*) const {}
int64_t GpuModel::last_rows() const { return 0; }

#else

namespace {

// A float32 weight of a ModelWeights in stored form: its quantized form, or its values as a
// dense fp32 [K, N] tensor (converted to fp16 on the device like any stored weight).
StoredLinear stored_of(const LinearWeight& l) {
  StoredLinear s;
  s.name = l.name;
  s.K = l.K;
  s.N = l.N;
  s.bias = l.bias;
  if (l.quant) {
    s.quant = l.quant;
  } else {
    s.dense.name = l.name;
    s.dense.dtype = DType::F32;
    s.dense.shape = {l.K, l.N};
    s.dense.data.resize(l.W.size() * 4);
    std::memcpy(s.dense.data.data(), l.W.data(), s.dense.data.size());
  }
  return s;
}

StoredBlock stored_of(const BlockWeights& b) {
  StoredBlock s;
  s.prefix = b.prefix;
  s.attn_norm = b.attn_norm;
  s.mlp_norm = b.mlp_norm;
  s.q_norm = b.q_norm;
  s.k_norm = b.k_norm;
  for (int i = 0; i < kBlockLinears; ++i) s.lin[i] = stored_of(*b.linear(kBlockLinearNames[i]));
  return s;
}

std::vector<half_bits> to_half(const std::vector<float>& v) {
  std::vector<half_bits> h(v.size());
  parallel_chunks(int64_t(v.size()), int64_t(1) << 18, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) h[size_t(i)] = float_to_half(v[size_t(i)]);
  });
  return h;
}

}  // namespace

struct GpuModel::Impl {
  ModelConfig c;
  GpuModelInfo info;
  DeviceForms forms;
  cuda::KernelOptions runtime_options;  // the launchers' options as the runtime runs them
  DevBuf embed, final_norm;
  std::vector<std::unique_ptr<DeviceBlock>> pre, loop;
  DeviceLinear head;
  ForwardWorkspace ws;
  int64_t rows = 0;
  int T = 0;
  DevBuf tokens, x, logits, head_rows;
  cuda::DeviceBuffer<float> cos_tab, sin_tab;

  void count(const DeviceLinear& l) {
    info.linear_weights++;
    info.weight_bytes += l.bytes();
    if (!l.quantized) return;
    info.quantized++;
    if (!l.packed) return;
    info.marlin_packed++;
    info.marlin_bytes += l.mB.bytes() + l.ms.bytes() + l.mdelta.bytes() + l.mwork.bytes();
  }
};

uint64_t device_free_bytes() {
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(0) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return uint64_t(free_b);
}

std::string gpu_model_unavailable_reason() {
  const std::string why = tl::cuda::cuda_device_unavailable_reason();
  if (!why.empty()) return why;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "cannot query device 0";
  if (prop.major < 8)
    return std::string("device 0 (") + prop.name + ") is sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
           ", below sm_80";
  return "";
}

GpuModel::GpuModel(const ModelWeights& w, bool with_fp16, const cuda::KernelOptions& options)
    : impl_(std::make_unique<Impl>()) {
  const std::string why = gpu_model_unavailable_reason();
  if (!why.empty()) throw Error(why, "", "gpu model");
  w.validate();
  Impl& m = *impl_;
  m.c = w.config;
  m.forms.fp16 = with_fp16;
  m.runtime_options = options;
  cudaDeviceProp prop{};
  TL_CUDA_THROW(cudaGetDeviceProperties(&prop, 0));
  m.info.device = cuda::cuda_device_label(prop);
  const std::vector<half_bits> e16 = to_half(w.embed);
  m.embed.resize(e16.size() * 2);
  m.embed.upload(reinterpret_cast<const uint8_t*>(e16.data()));
  m.final_norm.resize(w.final_norm.size() * 4);
  m.final_norm.upload(reinterpret_cast<const uint8_t*>(w.final_norm.data()));
  m.info.weight_bytes += m.embed.bytes() + m.final_norm.bytes();
  // Block by block through one pinned arena, each upload finished before the arena is refilled.
  PinnedArena arena;
  DevBuf raw;
  for (const auto& [blocks, out] : {std::make_pair(&w.pre, &m.pre), std::make_pair(&w.loop, &m.loop)})
    for (const BlockWeights& b : *blocks) {
      const StoredBlock sb = stored_of(b);
      arena.reset();
      arena.reserve(staged_bytes(sb, m.forms));
      out->push_back(std::make_unique<DeviceBlock>());
      upload_block(m.c, sb, m.forms, arena, raw, *out->back(), nullptr);
      TL_CUDA_THROW(cudaStreamSynchronize(nullptr));
      for (const DeviceLinear& l : out->back()->lin) m.count(l);
      m.info.weight_bytes += out->back()->params.bytes() + (out->back()->has_pair ? out->back()->pair_work.bytes() : 0);
    }
  const StoredLinear head = stored_of(w.head);
  arena.reset();
  arena.reserve(staged_bytes(head, m.forms));
  upload_linear(head, m.forms, arena, raw, m.head, nullptr);
  TL_CUDA_THROW(cudaStreamSynchronize(nullptr));
  m.count(m.head);
}

GpuModel::~GpuModel() = default;

const GpuModelInfo& GpuModel::info() const { return impl_->info; }
const ModelConfig& GpuModel::config() const { return impl_->c; }
int64_t GpuModel::last_rows() const { return impl_->rows; }

bool GpuModel::has_path(GpuPath p) const {
  if (p == GpuPath::kFp16) return impl_->forms.fp16 || impl_->info.quantized == 0;
  return impl_->info.quantized > 0;
}

const void* GpuModel::forward(const int32_t* tokens, int n_seq, int T, GpuPath p, ForwardMode mode) {
  Impl& m = *impl_;
  if (!has_path(p)) throw Error(std::string("this model has no ") + gpu_path_name(p) + " path", "", "gpu model");
  if (n_seq <= 0 || T <= 0) throw Error("expected n_seq > 0 and T > 0", "", "gpu forward");
  const int64_t R = int64_t(n_seq) * T;
  for (int64_t r = 0; r < R; ++r)
    if (tokens[r] < 0 || tokens[r] >= m.c.vocab)
      throw Error("token id " + std::to_string(tokens[r]) + " outside [0, " + std::to_string(m.c.vocab) + ")", "",
                  "token " + std::to_string(r));
  m.ws.reserve(m.c, R);
  m.tokens.reserve(size_t(R) * 4);
  m.x.reserve(size_t(R * m.c.d_model) * 4);
  m.logits.reserve(size_t(R * m.c.vocab) * 2);
  if (T != m.T) {
    upload_rope_tables(m.c, T, m.cos_tab, m.sin_tab);
    m.T = T;
  }
  m.rows = R;
  const bool decode = mode == ForwardMode::kDecode;
  std::vector<int32_t> order;  // decode: the rows position-major, row t * n_seq + s
  if (decode) {
    order.resize(size_t(R));
    for (int s = 0; s < n_seq; ++s)
      for (int t = 0; t < T; ++t) order[size_t(t) * n_seq + s] = tokens[size_t(s) * T + t];
  }
  TL_CUDA_THROW(cudaMemcpy(m.tokens.as<int32_t>(), decode ? order.data() : tokens, size_t(R) * 4,
                           cudaMemcpyHostToDevice));
  check_launch(cuda::embed_gather(m.embed.as<__half>(), m.tokens.as<int32_t>(), m.x.as<float>(), int(R),
                                  int(m.c.d_model), nullptr), "embed_gather");
  float* x = m.x.as<float>();
  for (const BlockStep& s : block_schedule(m.c)) {
    const DeviceBlock& b = *(s.loop ? m.loop : m.pre)[size_t(s.index)];
    m.ws.run_block(m.c, b, p, x, n_seq, T, mode, m.cos_tab.get(), m.sin_tab.get(), m.runtime_options);
  }
  check_launch(cuda::rms_norm_rows(x, m.final_norm.as<float>(), m.ws.h(), int(R), int(m.c.d_model),
                                   float(m.c.norm_eps), nullptr), "rms_norm final");
  if (!decode) {
    linear_gemm(m.head, p, m.ws.h(), m.logits.as<__half>(), int(R), m.runtime_options);
  } else {
    // The head per position too (M = n_seq), each position's logits copied to rows s * T + t.
    const size_t V = size_t(m.c.vocab), D = size_t(m.c.d_model);
    m.head_rows.reserve(size_t(n_seq) * V * 2);
    for (int t = 0; t < T; ++t) {
      linear_gemm(m.head, p, m.ws.h() + size_t(t) * n_seq * D, m.head_rows.as<__half>(), n_seq, m.runtime_options);
      TL_CUDA_THROW(cudaMemcpy2DAsync(m.logits.as<__half>() + size_t(t) * V, size_t(T) * V * 2, m.head_rows.as<void>(),
                                      V * 2, V * 2, size_t(n_seq), cudaMemcpyDeviceToDevice, nullptr));
    }
  }
  TL_CUDA_THROW(cudaDeviceSynchronize());
  return m.logits.as<void>();
}

void GpuModel::logits_to_host(std::vector<float>* out) const {
  const Impl& m = *impl_;
  const size_t n = size_t(m.rows * m.c.vocab);
  std::vector<half_bits> h(n);
  TL_CUDA_THROW(cudaMemcpy(h.data(), m.logits.as<void>(), n * 2, cudaMemcpyDeviceToHost));
  out->resize(n);
  for (size_t i = 0; i < n; ++i) (*out)[i] = half_to_float(h[i]);
}

#endif  // TL_HAVE_CUDA

}  // namespace tl::gpu
