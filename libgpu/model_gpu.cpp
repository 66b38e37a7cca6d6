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

#include "cuda/device_buffer.h"
#include "cuda/kernels_ref.h"
#include "cuda/model_ops.h"
#include "cuda/tl_kernels.h"
#include "libgpu/block_forward.h"
#include "libgpu/launch_check.h"
#endif

namespace tl::gpu {

uint64_t gpu_model_weight_bytes(const ModelWeights& w, bool with_fp16) {
  const ModelConfig& c = w.config;
  uint64_t b = uint64_t(c.vocab) * uint64_t(c.d_model) * 2 + uint64_t(c.d_model) * 4;  // embed, final norm
  for (const std::string& n : w.linear_names()) {
    const LinearWeight& l = *w.find_linear(n);
    const uint64_t K = uint64_t(l.K), N = uint64_t(l.N);
    if (!l.quant || with_fp16) b += K * N * 2;
    if (!l.quant) continue;
    const uint64_t G = uint64_t(l.quant->groups());
    b += K * ((N + 1) / 2) + 2 * G * N * 2;  // q, scale, zero
    if (l.quant->marlin) b += K * N / 2 + 2 * G * N * 2 + N * 4;  // B, s, delta, workspace
  }
  for (const auto* blocks : {&w.pre, &w.loop})
    for (const BlockWeights& bw : *blocks) {
      b += uint64_t(bw.attn_norm.size() + bw.mlp_norm.size() + bw.q_norm.size() + bw.k_norm.size()) * 4;
      for (const char* s : kBlockLinearNames) b += uint64_t(bw.linear(s)->bias.size()) * 4;
    }
  return b;
}

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
void GpuModel::row_stats(const int32_t*, std::vector<float>*, std::vector<int32_t>*, std::vector<float>*,
                         std::vector<float>*, const GpuReference*, std::vector<float>*) const {}
void GpuModel::save_reference() {}
void GpuModel::save_reference(GpuReference&) const {}
bool GpuModel::has_reference() const { return false; }
void GpuModel::set_linear_fp16(const std::string&, const std::vector<float>&) {}
struct GpuReference::Impl {};
GpuReference::GpuReference() = default;
GpuReference::~GpuReference() = default;

#else

namespace {


// Device memory: the one buffer class of cuda/device_buffer.h, as bytes, grown on demand.
using DevBuf = cuda::DeviceBuffer<uint8_t>;
void upload(DevBuf& b, const void* src, size_t bytes) {
  b.reserve(bytes);
  TL_CUDA_THROW(cudaMemcpy(b.get(), src, bytes, cudaMemcpyHostToDevice));
}

std::vector<half_bits> to_half(const std::vector<float>& v) {
  std::vector<half_bits> h(v.size());
  parallel_chunks(int64_t(v.size()), int64_t(1) << 18, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) h[size_t(i)] = float_to_half(v[size_t(i)]);
  });
  return h;
}

struct GpuLinear {
  std::string name;
  int K = 0, N = 0;
  bool quantized = false, packed = false, has_fp16 = false;
  DevBuf fp16, q, scale, zero, mB, ms, mdelta, mwork;
  cuda::DeviceQuantWeight w_fp16, w_native, w_marlin;
};

struct GpuBlock {
  BlockParamBuffers params;  // norms, biases, q/k norms, window
  GpuLinear lin[5];          // kBlockLinearNames order: qkv, out, gate, up, down
  DevBuf pair_work;          // the gate + up pair's Marlin workspace (both packed), else empty
};

}  // namespace

struct GpuModel::Impl {
  ModelConfig c;
  GpuModelInfo info;
  bool with_fp16 = false;
  DevBuf embed, final_norm;
  std::vector<std::unique_ptr<GpuBlock>> pre, loop;
  GpuLinear head;
  // The launchers' options as the runtime runs them (passed in by the tool).
  cuda::KernelOptions runtime_options;
  // Activations for the current batch.
  int64_t rows = 0;
  int T = 0;
  DevBuf tokens, x, h, qkv, q, k, v, att, y, gate, up, logits, head_rows, cos_tab, sin_tab;
  DevBuf ref_logits, ref_lse, targets, s_lse, s_arg, s_tgt, s_kld;
  bool has_ref = false;
  int64_t ref_rows = 0;

  GpuLinear* find(const std::string& name) {
    if (head.name == name) return &head;
    for (auto* blocks : {&pre, &loop})
      for (auto& b : *blocks)
        for (GpuLinear& l : b->lin)
          if (l.name == name) return &l;
    return nullptr;
  }

  void upload_linear(const LinearWeight& lw, GpuLinear& g) {
    g.name = lw.name;
    g.K = int(lw.K);
    g.N = int(lw.N);
    g.quantized = bool(lw.quant);
    const bool need_fp16 = !g.quantized || with_fp16;
    if (need_fp16) {
      upload(g.fp16, to_half(lw.W).data(), lw.W.size() * 2);
      g.has_fp16 = true;
      info.weight_bytes += g.fp16.bytes();
      g.w_fp16.name = g.name.c_str();
      g.w_fp16.K = g.K;
      g.w_fp16.N = g.N;
      g.w_fp16.group_size = g.K;
      g.w_fp16.fp16_weight = g.fp16.as<__half>();
    }
    if (!g.quantized) {
      g.w_native = g.w_marlin = g.w_fp16;  // dense weights run as fp16 copies on every path
      return;
    }
    const QuantWeight& qw = *lw.quant;
    const std::vector<uint8_t> packed = pack_nibbles(qw.q.data(), qw.K, qw.N);
    upload(g.q, packed.data(), packed.size());
    upload(g.scale, qw.scale.data(), qw.scale.size() * 2);
    upload(g.zero, qw.zero.data(), qw.zero.size() * 2);
    info.weight_bytes += g.q.bytes() + g.scale.bytes() + g.zero.bytes();
    cuda::DeviceQuantWeight w;
    w.name = g.name.c_str();
    w.bits = qw.bits;
    w.K = g.K;
    w.N = g.N;
    w.group_size = int(qw.group_size);
    w.q = g.q.as<uint8_t>();
    w.scale = g.scale.as<__half>();
    w.zero = g.zero.as<__half>();
    g.w_native = w;
    if (qw.marlin) {
      const MarlinSection& m = *qw.marlin;
      upload(g.mB, m.B.data(), m.B.size() * 4);
      upload(g.ms, m.s.data(), m.s.size() * 2);
      upload(g.mdelta, m.delta.data(), m.delta.size() * 2);
      const int np = int(m.columns(g.N));  // a padded head: the section's 128-column multiple
      const size_t ws = cuda::marlin_workspace_ints(np) * sizeof(int);
      g.mwork.reserve(ws);
      TL_CUDA_THROW(cudaMemset(g.mwork.as<int>(), 0, ws));
      w.marlin_B = g.mB.as<int32_t>();
      w.marlin_s = g.ms.as<__half>();
      w.marlin_delta = g.mdelta.as<__half>();
      w.marlin_workspace = g.mwork.as<int>();
      w.marlin_N = np;
      g.packed = true;
      info.marlin_packed++;
      info.marlin_bytes += g.mB.bytes() + g.ms.bytes() + g.mdelta.bytes() + g.mwork.bytes();
      info.weight_bytes += g.mB.bytes() + g.ms.bytes() + g.mdelta.bytes() + g.mwork.bytes();
    }
    g.w_marlin = w;
    info.quantized++;
  }

  void upload_block(const BlockWeights& b, GpuBlock& g) {
    g.params = BlockParamBuffers(c, b);
    info.weight_bytes += g.params.bytes();
    for (int i = 0; i < 5; ++i) {
      upload_linear(*b.linear(kBlockLinearNames[i]), g.lin[i]);
      info.linear_weights++;
    }
    if (g.lin[2].packed && g.lin[3].packed) {  // the Marlin path runs them as one SwiGLU pair
      const size_t ws = cuda::marlin_workspace_ints(2 * g.lin[2].N) * sizeof(int);
      g.pair_work.reserve(ws);
      TL_CUDA_THROW(cudaMemset(g.pair_work.as<int>(), 0, ws));
      info.marlin_bytes += g.pair_work.bytes();
      info.weight_bytes += g.pair_work.bytes();
    }
  }

  void gemm(const GpuLinear& l, GpuPath p, const __half* X, __half* Y, int M) {
    const cuda::DeviceQuantWeight& w =
        p == GpuPath::kFp16 ? l.w_fp16 : p == GpuPath::kNative ? l.w_native : l.w_marlin;
    // The weight's view picks the kernel; Marlin only for the Marlin path (the view of a
    // weight that has no Marlin section is its native one). The Marlin path dispatches as a
    // runtime does (runtime_options: the decode kernel, the Hopper kernel, the floor by
    // M), so the forward's drift is that of the kernels a user gets.
    cuda::KernelOptions options = runtime_options;
    options.use_marlin = p == GpuPath::kMarlin;
    int rc = cuda::kOk;
    cuda::quant_gemm(w, X, Y, M, nullptr, options, &rc);
    check_launch(rc, "quant_gemm " + l.name + " (M=" + std::to_string(M) + " K=" + std::to_string(l.K) +
                     " N=" + std::to_string(l.N) + ", path " + gpu_path_name(p) + ")");
  }

  void reserve(int64_t R, int seq_len) {
    const BlockBufferSizes n = block_buffer_elements(c, R);
    tokens.reserve(size_t(R) * 4);
    targets.reserve(size_t(R) * 4);
    x.reserve(size_t(R * c.d_model) * 4);
    for (DevBuf* b : {&h, &y}) b->reserve(size_t(n.h) * 2);
    qkv.reserve(size_t(n.qkv) * 2);
    for (DevBuf* b : {&q, &att}) b->reserve(size_t(n.q) * 2);
    for (DevBuf* b : {&k, &v}) b->reserve(size_t(n.kv) * 2);
    for (DevBuf* b : {&gate, &up}) b->reserve(size_t(n.gate) * 2);
    logits.reserve(size_t(R * c.vocab) * 2);
    for (DevBuf* b : {&s_lse, &s_tgt, &s_kld}) b->reserve(size_t(R) * 4);
    s_arg.reserve(size_t(R) * 4);
    if (seq_len != T) {
      std::vector<float> cs, sn;
      rope_tables(seq_len, rope_inv_freqs(c), &cs, &sn);
      upload(cos_tab, cs.data(), cs.size() * 4);
      upload(sin_tab, sn.data(), sn.size() * 4);
      T = seq_len;
    }
  }

  void run_block(const GpuBlock& b, GpuPath p, int n_seq, ForwardMode mode) {
    BlockBuffers bb;
    bb.x = x.as<float>();
    bb.h = h.as<__half>();
    bb.qkv = qkv.as<__half>();
    bb.q = q.as<__half>();
    bb.k = k.as<__half>();
    bb.v = v.as<__half>();
    bb.att = att.as<__half>();
    bb.y = y.as<__half>();
    bb.gate = gate.as<__half>();
    bb.up = up.as<__half>();
    bb.cos_tab = cos_tab.as<float>();
    bb.sin_tab = sin_tab.as<float>();
    // The Marlin path runs the MLP's gate and up as the runtime does: one quant_swiglu call (the
    // fused pair at decode sizes, where both weights are packed).
    BlockSwiglu swiglu;
    if (p == GpuPath::kMarlin)
      swiglu = [&](const __half* X, __half* Y, __half* up_scratch, const float* bias_gate, const float* bias_up,
                   int M) {
        cuda::KernelOptions options = runtime_options;
        options.use_marlin = true;
        int rc = cuda::kOk;
        cuda::quant_swiglu(b.lin[2].w_marlin, b.lin[3].w_marlin, bias_gate, bias_up, X, Y, up_scratch,
                           b.pair_work.bytes() ? b.pair_work.as<int>() : nullptr, M, nullptr, options, &rc);
        check_launch(rc, "quant_swiglu " + b.lin[2].name + " + " + b.lin[3].name + " (M=" + std::to_string(M) +
                             " K=" + std::to_string(b.lin[2].K) + " F=" + std::to_string(b.lin[2].N) + ")");
      };
    block_forward(c, b.params.params(), bb, n_seq, T,
                  [&](int i, const __half* X, __half* Y, int M) { gemm(b.lin[i], p, X, Y, M); }, mode, swiglu);
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
  m.with_fp16 = with_fp16;
  m.runtime_options = options;
  cudaDeviceProp prop{};
  TL_CUDA_THROW(cudaGetDeviceProperties(&prop, 0));
  m.info.device = cuda::cuda_device_label(prop);
  upload(m.embed, to_half(w.embed).data(), w.embed.size() * 2);
  upload(m.final_norm, w.final_norm.data(), w.final_norm.size() * 4);
  for (const BlockWeights& b : w.pre) {
    m.pre.push_back(std::make_unique<GpuBlock>());
    m.upload_block(b, *m.pre.back());
  }
  for (const BlockWeights& b : w.loop) {
    m.loop.push_back(std::make_unique<GpuBlock>());
    m.upload_block(b, *m.loop.back());
  }
  m.upload_linear(w.head, m.head);
  m.info.linear_weights++;
  m.info.weight_bytes += m.embed.bytes() + m.final_norm.bytes();
}

GpuModel::~GpuModel() = default;

const GpuModelInfo& GpuModel::info() const { return impl_->info; }
const ModelConfig& GpuModel::config() const { return impl_->c; }
int64_t GpuModel::last_rows() const { return impl_->rows; }

bool GpuModel::has_path(GpuPath p) const {
  if (p == GpuPath::kFp16) return impl_->with_fp16 || impl_->info.quantized == 0;
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
  m.reserve(R, T);
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
  for (const auto& b : m.pre) m.run_block(*b, p, n_seq, mode);
  for (int64_t it = 0; it < m.c.loops; ++it)
    for (const auto& b : m.loop) m.run_block(*b, p, n_seq, mode);
  check_launch(cuda::rms_norm_rows(m.x.as<float>(), m.final_norm.as<float>(), m.h.as<__half>(), int(R),
                               int(m.c.d_model), float(m.c.norm_eps), nullptr), "rms_norm final");
  if (!decode) {
    m.gemm(m.head, p, m.h.as<__half>(), m.logits.as<__half>(), int(R));
  } else {
    // The head per position too (M = n_seq), each position's logits copied to rows s * T + t.
    const size_t V = size_t(m.c.vocab), D = size_t(m.c.d_model);
    m.head_rows.reserve(size_t(n_seq) * V * 2);
    for (int t = 0; t < T; ++t) {
      m.gemm(m.head, p, m.h.as<__half>() + size_t(t) * n_seq * D, m.head_rows.as<__half>(), n_seq);
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

struct GpuReference::Impl {
  DevBuf logits, lse;
  int64_t rows = 0, vocab = 0;
};
GpuReference::GpuReference() : impl(std::make_unique<Impl>()) {}
GpuReference::~GpuReference() = default;

void GpuModel::save_reference(GpuReference& into) const {
  const Impl& m = *impl_;
  GpuReference::Impl& r = *into.impl;
  const size_t n = size_t(m.rows * m.c.vocab) * 2;
  r.logits.reserve(n);
  r.lse.reserve(size_t(m.rows) * 4);
  TL_CUDA_THROW(cudaMemcpy(r.logits.as<void>(), m.logits.as<void>(), n, cudaMemcpyDeviceToDevice));
  check_launch(cuda::logits_row_stats(r.logits.as<__half>(), nullptr, int(m.rows), int(m.c.vocab), r.lse.as<float>(),
                                  nullptr, nullptr, nullptr), "reference row stats");
  r.rows = m.rows;
  r.vocab = m.c.vocab;
}

void GpuModel::set_linear_fp16(const std::string& name, const std::vector<float>& W) {
  Impl& m = *impl_;
  GpuLinear* g = m.find(name);
  if (!g) throw Error("no such linear weight in the GPU model", "", name);
  if (!g->has_fp16 || W.size() != size_t(g->K) * size_t(g->N))
    throw Error("expected " + std::to_string(g->K) + " x " + std::to_string(g->N) + " weights with an fp16 copy", "", name);
  const std::vector<half_bits> h = to_half(W);
  TL_CUDA_THROW(cudaMemcpy(g->fp16.as<void>(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
}

void GpuModel::save_reference() {
  Impl& m = *impl_;
  const size_t n = size_t(m.rows * m.c.vocab) * 2;
  m.ref_logits.reserve(n);
  m.ref_lse.reserve(size_t(m.rows) * 4);
  TL_CUDA_THROW(cudaMemcpy(m.ref_logits.as<void>(), m.logits.as<void>(), n, cudaMemcpyDeviceToDevice));
  check_launch(cuda::logits_row_stats(m.ref_logits.as<__half>(), nullptr, int(m.rows), int(m.c.vocab), m.ref_lse.as<float>(),
                                  nullptr, nullptr, nullptr), "reference row stats");
  m.has_ref = true;
  m.ref_rows = m.rows;
}

bool GpuModel::has_reference() const { return impl_->has_ref; }

void GpuModel::row_stats(const int32_t* targets, std::vector<float>* lse, std::vector<int32_t>* argmax,
                         std::vector<float>* target_logit, std::vector<float>* kld, const GpuReference* other,
                         std::vector<float>* kld_other) const {
  Impl& m = *impl_;
  const int R = int(m.rows), V = int(m.c.vocab);
  if (targets) TL_CUDA_THROW(cudaMemcpy(m.targets.as<int32_t>(), targets, size_t(R) * 4, cudaMemcpyHostToDevice));
  check_launch(cuda::logits_row_stats(m.logits.as<__half>(), targets ? m.targets.as<int32_t>() : nullptr, R, V,
                                  m.s_lse.as<float>(), m.s_arg.as<int32_t>(), m.s_tgt.as<float>(), nullptr), "row stats");
  auto down = [&](const DevBuf& b, auto* out) {
    out->resize(size_t(R));
    TL_CUDA_THROW(cudaMemcpy(out->data(), b.as<void>(), size_t(R) * 4, cudaMemcpyDeviceToHost));
  };
  if (lse) down(m.s_lse, lse);
  if (argmax) down(m.s_arg, argmax);
  if (target_logit) down(m.s_tgt, target_logit);
  if (kld) {
    if (!m.has_ref || m.ref_rows != m.rows) throw Error("no reference logits of this batch saved", "", "kld");
    check_launch(cuda::kld_rows(m.ref_logits.as<__half>(), m.ref_lse.as<float>(), m.logits.as<__half>(), m.s_lse.as<float>(),
                            R, V, m.s_kld.as<float>(), nullptr), "kld_rows");
    down(m.s_kld, kld);
  }
  if (kld_other) {
    const GpuReference::Impl* o = other ? other->impl.get() : nullptr;
    if (!o || o->rows != m.rows || o->vocab != m.c.vocab)
      throw Error("no reference logits of this batch and vocabulary", "", "kld");
    check_launch(cuda::kld_rows(o->logits.as<__half>(), o->lse.as<float>(), m.logits.as<__half>(), m.s_lse.as<float>(), R, V,
                            m.s_kld.as<float>(), nullptr), "kld_rows (reference)");
    down(m.s_kld, kld_other);
  }
}

#endif  // TL_HAVE_CUDA

}  // namespace tl::gpu
