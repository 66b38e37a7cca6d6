#include "libgpu/device_model.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/nibbles.h"
#include "cuda/model_ops.h"
#include "libgpu/launch_check.h"

namespace tl::gpu {
namespace {

cuda::WeightElem weight_elem(DType t, const std::string& name) {
  switch (t) {
    case DType::F32:
    case DType::F64: return cuda::WeightElem::kF32;  // fp64 is narrowed on the host (staged_dense)
    case DType::F16: return cuda::WeightElem::kF16;
    case DType::BF16: return cuda::WeightElem::kBF16;
    default: throw Error(std::string("expected a float weight, got ") + dtype_name(t), "", name);
  }
}

// The dense weight's bytes in the arena (fp64 narrowed to fp32, as the float32 loaders read it).
const uint8_t* stage_dense(const Tensor& t, PinnedArena& arena) {
  if (t.dtype != DType::F64) return arena.put(t.data.data(), t.data.size());
  float* f = reinterpret_cast<float*>(arena.take(size_t(t.numel()) * 4));
  for (int64_t i = 0; i < t.numel(); ++i) f[i] = float(t.as<double>()[i]);
  return reinterpret_cast<const uint8_t*>(f);
}

void copy_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes) TL_CUDA_THROW(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

}  // namespace

PinnedArena::~PinnedArena() {
  if (base_) cudaFreeHost(base_);
}

void PinnedArena::reserve(size_t bytes) {
  if (bytes <= cap_) return;
  if (base_) TL_CUDA_THROW(cudaFreeHost(base_));
  base_ = nullptr;
  cap_ = used_ = 0;
  void* p = nullptr;
  TL_CUDA_THROW(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  base_ = static_cast<uint8_t*>(p);
  cap_ = bytes;
}

uint8_t* PinnedArena::take(size_t bytes) {
  const size_t at = size_t(staging_aligned(used_));  // every copy source 256-byte aligned
  if (at + bytes > cap_)
    throw Error("pinned staging of " + std::to_string(cap_) + " bytes is full (" + std::to_string(at + bytes) +
                " needed): the admission's block size is wrong", "", "gpu upload");
  used_ = at + bytes;
  return base_ + at;
}

const uint8_t* PinnedArena::put(const void* src, size_t bytes) {
  uint8_t* p = take(bytes);
  if (bytes) std::memcpy(p, src, bytes);
  return p;
}

uint64_t DeviceLinear::bytes() const {
  uint64_t b = 0;
  for (const DevBuf* d : {&fp16, &q, &scale, &zero, &mB, &ms, &mdelta, &mwork}) b += d->size() ? d->bytes() : 0;
  return b;
}

uint64_t DeviceBlock::bytes() const {
  uint64_t b = params.size() ? params.bytes() : 0;
  for (const DeviceLinear& l : lin) b += l.bytes();
  return b + (pair_work.size() ? pair_work.bytes() : 0);
}

LinearFootprint footprint_of(const StoredLinear& l) {
  LinearFootprint f;
  f.K = l.K;
  f.N = l.N;
  f.quantized = bool(l.quant);
  if (f.quantized) {
    f.groups = l.quant->groups();
    f.marlin_n = l.quant->marlin ? l.quant->marlin->columns(l.N) : 0;
  } else {
    f.dense_bytes = dense_staged_bytes(l.dense.dtype, l.dense.numel());
    f.converts = l.dense.dtype != DType::F16 || l.transposed;
  }
  return f;
}

uint64_t staged_bytes(const StoredLinear& l, DeviceForms forms) { return linear_staged_bytes(footprint_of(l), forms); }

namespace {
// Norms and biases go up as one fp32 buffer, each vector at a 64-float boundary.
std::vector<const std::vector<float>*> block_vectors(const StoredBlock& b) {
  std::vector<const std::vector<float>*> v = {&b.attn_norm, &b.mlp_norm};
  for (const StoredLinear& l : b.lin) v.push_back(&l.bias);
  v.push_back(&b.q_norm);
  v.push_back(&b.k_norm);
  return v;
}
size_t padded_floats(size_t n) { return (n + 63) / 64 * 64; }
}  // namespace

uint64_t staged_bytes(const StoredBlock& b, DeviceForms forms) {
  size_t floats = 0;
  for (const auto* v : block_vectors(b)) floats += padded_floats(v->size());
  uint64_t n = staging_aligned(floats * 4);
  for (const StoredLinear& l : b.lin) n += staged_bytes(l, forms);
  return n;
}

uint64_t device_bytes(const StoredLinear& l, DeviceForms forms) {
  const LinearFootprint f = footprint_of(l);
  const bool section = f.quantized && forms.marlin && f.marlin_n > 0;
  return linear_device_bytes(f, forms) + (section ? cuda::marlin_workspace_ints(int(f.marlin_n)) * sizeof(int) : 0);
}

void upload_linear(const StoredLinear& l, DeviceForms forms, PinnedArena& arena, DevBuf& raw, DeviceLinear& out,
                   cudaStream_t stream) {
  out.name = l.name;
  out.K = int(l.K);
  out.N = int(l.N);
  out.quantized = bool(l.quant);
  out.packed = out.has_fp16 = false;
  out.w_fp16 = out.w_native = out.w_marlin = cuda::DeviceQuantWeight{};
  const size_t KN = size_t(l.K) * size_t(l.N);
  auto fp16_view = [&] {
    out.has_fp16 = true;
    out.w_fp16.name = out.name.c_str();
    out.w_fp16.K = out.K;
    out.w_fp16.N = out.N;
    out.w_fp16.group_size = out.K;
    out.w_fp16.fp16_weight = out.fp16.as<__half>();
  };
  if (!l.quant) {  // dense: fp16 on every path
    const Tensor& t = l.dense;
    const cuda::WeightElem elem = weight_elem(t.dtype, l.name);
    out.fp16.reserve(KN * 2);
    const uint8_t* host = stage_dense(t, arena);
    if (elem == cuda::WeightElem::kF16 && !l.transposed) {
      copy_async(out.fp16.get(), host, KN * 2, stream);
    } else {
      const size_t bytes = size_t(dense_staged_bytes(t.dtype, t.numel()));
      raw.reserve(bytes);
      copy_async(raw.get(), host, bytes, stream);
      check_launch(cuda::weight_to_half(raw.get(), elem, l.transposed, l.K, l.N, out.fp16.as<__half>(), stream),
                   "weight_to_half " + l.name);
    }
    fp16_view();
    out.w_native = out.w_marlin = out.w_fp16;
    return;
  }
  const QuantWeight& w = *l.quant;
  const size_t qbytes = size_t(w.K * packed_row_bytes(w.N)), gn = w.scale.size() * 2;
  out.q.reserve(qbytes);
  out.scale.reserve(gn);
  out.zero.reserve(gn);
  uint8_t* packed = arena.take(qbytes);
  pack_nibbles_into(w.q.data(), w.K, w.N, packed);
  copy_async(out.q.get(), packed, qbytes, stream);
  copy_async(out.scale.get(), arena.put(w.scale.data(), gn), gn, stream);
  copy_async(out.zero.get(), arena.put(w.zero.data(), gn), gn, stream);
  cuda::DeviceQuantWeight v;
  v.name = out.name.c_str();
  v.bits = w.bits;
  v.K = out.K;
  v.N = out.N;
  v.group_size = int(w.group_size);
  v.q = out.q.as<uint8_t>();
  v.scale = out.scale.as<__half>();
  v.zero = out.zero.as<__half>();
  out.w_native = v;
  if (forms.fp16) {
    out.fp16.reserve(KN * 2);
    check_launch(cuda::dequantize_native(v.q, v.scale, v.zero, out.fp16.as<__half>(), v.K, v.N, v.group_size, stream),
                 "dequantize_native " + l.name);
    fp16_view();
  }
  if (forms.marlin && w.marlin) {
    const MarlinSection& m = *w.marlin;
    out.mB.reserve(m.B.size() * 4);
    out.ms.reserve(m.s.size() * 2);
    out.mdelta.reserve(m.delta.size() * 2);
    copy_async(out.mB.get(), arena.put(m.B.data(), m.B.size() * 4), m.B.size() * 4, stream);
    copy_async(out.ms.get(), arena.put(m.s.data(), m.s.size() * 2), m.s.size() * 2, stream);
    copy_async(out.mdelta.get(), arena.put(m.delta.data(), m.delta.size() * 2), m.delta.size() * 2, stream);
    const int np = int(m.columns(w.N));  // a padded head: the section's 128-column multiple
    const size_t ws = cuda::marlin_workspace_ints(np) * sizeof(int);
    out.mwork.reserve(ws);
    TL_CUDA_THROW(cudaMemsetAsync(out.mwork.get(), 0, ws, stream));
    v.marlin_B = out.mB.as<int32_t>();
    v.marlin_s = out.ms.as<__half>();
    v.marlin_delta = out.mdelta.as<__half>();
    v.marlin_workspace = out.mwork.as<int>();
    v.marlin_N = np;
    out.packed = true;
  }
  out.w_marlin = v;
}

void upload_block(const ModelConfig& c, const StoredBlock& b, DeviceForms forms, PinnedArena& arena, DevBuf& raw,
                  DeviceBlock& out, cudaStream_t stream) {
  out.prefix = b.prefix;
  const std::vector<const std::vector<float>*> vecs = block_vectors(b);
  std::vector<size_t> at;
  size_t floats = 0;
  for (const auto* v : vecs) {
    at.push_back(floats);
    floats += padded_floats(v->size());
  }
  float* host = reinterpret_cast<float*>(arena.take(floats * 4));
  for (size_t i = 0; i < vecs.size(); ++i) std::copy(vecs[i]->begin(), vecs[i]->end(), host + at[i]);
  out.params.reserve(floats * 4);
  copy_async(out.params.get(), host, floats * 4, stream);
  const float* dev = out.params.as<float>();
  auto ptr = [&](size_t i) { return vecs[i]->empty() ? nullptr : dev + at[i]; };
  out.p = BlockParams{};
  out.p.attn_norm = ptr(0);
  out.p.mlp_norm = ptr(1);
  for (int i = 0; i < kBlockLinears; ++i) out.p.bias[i] = ptr(size_t(2 + i));
  out.p.q_norm = ptr(7);
  out.p.k_norm = ptr(8);
  out.p.window = int(block_window(c, b.prefix));
  for (int i = 0; i < kBlockLinears; ++i) upload_linear(b.lin[i], forms, arena, raw, out.lin[i], stream);
  out.has_pair = out.lin[2].packed && out.lin[3].packed;  // the Marlin path runs them as one SwiGLU pair
  if (out.has_pair) {
    const size_t ws = cuda::marlin_workspace_ints(2 * out.lin[2].N) * sizeof(int);
    out.pair_work.reserve(ws);
    TL_CUDA_THROW(cudaMemsetAsync(out.pair_work.get(), 0, ws, stream));
  }
}

void linear_gemm(const DeviceLinear& l, GpuPath path, const __half* X, __half* Y, int M,
                 const cuda::KernelOptions& runtime_options) {
  // The weight's view picks the kernel; Marlin only for the Marlin path (the view of a weight
  // that has no Marlin section is its native one). The Marlin path dispatches as a runtime does
  // (runtime_options: the decode kernel, the Hopper kernel, the floor by M), so the forward's
  // drift is that of the kernels a user gets.
  cuda::KernelOptions options = runtime_options;
  options.use_marlin = path == GpuPath::kMarlin;
  int rc = cuda::kOk;
  cuda::quant_gemm(l.view(path), X, Y, M, nullptr, options, &rc);
  check_launch(rc, "quant_gemm " + l.name + " (M=" + std::to_string(M) + " K=" + std::to_string(l.K) +
                       " N=" + std::to_string(l.N) + ", path " + gpu_path_name(path) + ")");
}

void ForwardWorkspace::reserve(const ModelConfig& c, int64_t rows) {
  const BlockBufferSizes n = block_buffer_elements(c, rows);
  for (DevBuf* b : {&h_, &y_}) b->reserve(size_t(n.h) * 2);
  qkv_.reserve(size_t(n.qkv) * 2);
  for (DevBuf* b : {&q_, &att_}) b->reserve(size_t(n.q) * 2);
  for (DevBuf* b : {&k_, &v_}) b->reserve(size_t(n.kv) * 2);
  for (DevBuf* b : {&gate_, &up_}) b->reserve(size_t(n.gate) * 2);
}

uint64_t ForwardWorkspace::bytes() const {
  uint64_t b = 0;
  for (const DevBuf* d : {&h_, &qkv_, &q_, &k_, &v_, &att_, &y_, &gate_, &up_}) b += d->size() ? d->bytes() : 0;
  return b;
}

void ForwardWorkspace::run_block(const ModelConfig& c, const DeviceBlock& b, GpuPath path, float* x, int n_seq, int T,
                                 ForwardMode mode, const float* cos_tab, const float* sin_tab,
                                 const cuda::KernelOptions& options, const DeviceLinear* swap, int swap_i) {
  BlockBuffers bb;
  bb.x = x;
  bb.h = h_.as<__half>();
  bb.qkv = qkv_.as<__half>();
  bb.q = q_.as<__half>();
  bb.k = k_.as<__half>();
  bb.v = v_.as<__half>();
  bb.att = att_.as<__half>();
  bb.y = y_.as<__half>();
  bb.gate = gate_.as<__half>();
  bb.up = up_.as<__half>();
  bb.cos_tab = cos_tab;
  bb.sin_tab = sin_tab;
  auto lin = [&](int i) -> const DeviceLinear& { return swap && i == swap_i ? *swap : b.lin[i]; };
  // The Marlin path runs the MLP's gate and up as the runtime does: one quant_swiglu call (the
  // fused pair at decode sizes, where both weights are packed).
  BlockSwiglu swiglu;
  if (path == GpuPath::kMarlin && !(swap && (swap_i == 2 || swap_i == 3)))
    swiglu = [&](const __half* X, __half* Y, __half* up_scratch, const float* bias_gate, const float* bias_up, int M) {
      cuda::KernelOptions o = options;
      o.use_marlin = true;
      int rc = cuda::kOk;
      cuda::quant_swiglu(b.lin[2].w_marlin, b.lin[3].w_marlin, bias_gate, bias_up, X, Y, up_scratch,
                         b.has_pair ? b.pair_work.as<int>() : nullptr, M, nullptr, o, &rc);
      check_launch(rc, "quant_swiglu " + b.lin[2].name + " + " + b.lin[3].name + " (M=" + std::to_string(M) +
                           " K=" + std::to_string(b.lin[2].K) + " F=" + std::to_string(b.lin[2].N) + ")");
    };
  const GpuPath swap_path = GpuPath::kFp16;  // a swapped weight runs as its fp16 copy
  block_forward(c, b.p, bb, n_seq, T,
                [&](int i, const __half* X, __half* Y, int M) {
                  linear_gemm(lin(i), swap && i == swap_i ? swap_path : path, X, Y, M, options);
                },
                mode, swiglu);
}

}  // namespace tl::gpu
