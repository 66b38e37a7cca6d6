#include "libgpu/stream_forward.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include <unistd.h>

#include "core/bytes.h"
#include "core/error.h"
#include "core/group_size.h"
#include "core/half.h"
#include "core/nibbles.h"
#include "core/parallel.h"

#if TL_HAVE_CUDA
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "cuda/model_ops.h"
#include "libgpu/device_model.h"
#include "libgpu/launch_check.h"
#endif

namespace tl::gpu {
namespace {

// Launcher scratch (the floors' column tiles, the split-K partials) and cuBLAS's workspace.
constexpr uint64_t kScratch = uint64_t(1) << 30;
// The kept logits chunks (the reference's, the fp16 path's, the current path's) take at most this.
constexpr uint64_t kChunkBudget = uint64_t(3) << 29;

// A weight of the source as the plan sizes it, from its entry (no read).
LinearFootprint entry_footprint(const ModelSource& src, const SourceEntry* e, int64_t K, int64_t N, bool transposed) {
  LinearFootprint f;
  f.K = K;
  f.N = N;
  f.quantized = e && e->quantized;
  if (f.quantized) {
    f.groups = group_count(K, e->group_size > 0 ? e->group_size : K);
    f.marlin_n = src.with_marlin() ? e->marlin_n : 0;
    return f;
  }
  const DType t = e ? e->dtype : DType::F32;
  f.dense_bytes = dense_staged_bytes(t, K * N);
  f.converts = t != DType::F16 || transposed;
  return f;
}

}  // namespace

uint64_t linear_device_bytes(const LinearFootprint& l, DeviceForms forms) {
  const uint64_t KN = uint64_t(l.K) * uint64_t(l.N);
  if (!l.quantized) return KN * 2;
  uint64_t b = forms.fp16 ? KN * 2 : 0;
  b += uint64_t(l.K) * uint64_t(packed_row_bytes(l.N)) + 2 * uint64_t(l.groups) * uint64_t(l.N) * 2;  // q, scale, zero
  if (forms.marlin && l.marlin_n > 0)
    b += uint64_t(l.K) * uint64_t(l.marlin_n) / 2 + 2 * uint64_t(l.groups) * uint64_t(l.marlin_n) * 2;  // B, s, delta
  return b;
}

uint64_t linear_staged_bytes(const LinearFootprint& l, DeviceForms forms) {
  if (!l.quantized) return staging_aligned(l.dense_bytes);
  const uint64_t gn = uint64_t(l.groups) * uint64_t(l.N) * 2;
  uint64_t b = staging_aligned(uint64_t(l.K) * uint64_t(packed_row_bytes(l.N))) + 2 * staging_aligned(gn);
  if (forms.marlin && l.marlin_n > 0) {
    const uint64_t gnp = uint64_t(l.groups) * uint64_t(l.marlin_n) * 2;
    b += staging_aligned(uint64_t(l.K) * uint64_t(l.marlin_n) / 2) + 2 * staging_aligned(gnp);
  }
  return b;
}

uint64_t linear_conversion_bytes(const LinearFootprint& l) { return l.quantized || !l.converts ? 0 : l.dense_bytes; }

uint64_t StreamPlan::device() const {
  return std::max(blocks + staging, head) + residuals + activations + scratch;
}

ModelFootprint model_footprint(const ModelSource& src, const StreamModel& model) {
  const ModelConfig& c = src.config();
  const DeviceForms f = model.forms;
  const bool transposed = src.kind() == ModelKind::kHfFolder;  // safetensors: PyTorch's [N, K]
  ModelFootprint fp;
  for (int loop = 0; loop < 2; ++loop)
    for (int64_t i = 0; i < (loop ? c.n_loop : c.n_pre); ++i) {
      const std::string p = block_prefix(loop == 1, i);
      // Norms and biases (every one the family may have, each padded to 64 floats), fp32.
      const uint64_t vec_floats = 4 * uint64_t(c.d_model) + 2 * uint64_t(c.ffn) + 2 * uint64_t(c.d_head) +
                                  uint64_t(c.n_heads + 2 * c.n_kv_heads) * uint64_t(c.d_head) + 9 * 64;
      uint64_t dev = vec_floats * 4, staged = staging_aligned(vec_floats * 4), raw = 0;
      for (const char* s : kBlockLinearNames) {
        const std::string n = p + "." + s;
        const std::vector<int64_t> shape = expected_entry_shape(c, n);
        const LinearFootprint l = entry_footprint(src, src.entry(n), shape[0], shape[1], transposed);
        dev += linear_device_bytes(l, f);
        staged += linear_staged_bytes(l, f);
        raw = std::max(raw, linear_conversion_bytes(l));
      }
      // + the Marlin workspaces (a few ints per 128 columns), bounded by 8 bytes a column.
      fp.block_device = std::max(fp.block_device, dev + 4 * uint64_t(c.ffn) * 8);
      fp.block_staged = std::max(fp.block_staged, staged);
      fp.block_dense_staging = std::max(fp.block_dense_staging, raw);
    }
  const SourceEntry* h = src.entry("head");
  // Tied: the embedding, transposed (dense, stored [vocab, D]).
  const LinearFootprint head = entry_footprint(src, h ? h : src.entry("embed"), c.d_model, c.vocab, transposed || !h);
  fp.head_device = linear_device_bytes(head, f);
  fp.head_staged = linear_staged_bytes(head, f);
  fp.head_dense_staging = linear_conversion_bytes(head);
  return fp;
}

StreamPlan plan_stream_run(const std::vector<StreamModel>& models, const std::vector<ModelFootprint>& sizes,
                           const std::vector<StreamSpec>& streams, uint64_t free) {
  StreamPlan p;
  uint64_t head_staging = 0;
  for (size_t m = 0; m < models.size(); ++m) {
    p.blocks += 2 * sizes[m].block_device;
    p.staging += 2 * sizes[m].block_dense_staging;  // each model's slots keep their own
    p.pinned += 2 * sizes[m].block_staged;
    p.head += sizes[m].head_device;
    head_staging = std::max(head_staging, sizes[m].head_dense_staging);
  }
  int64_t max_rows = 0, max_batch = 1, vocab = 0, D = 0;
  const ModelConfig* big = nullptr;
  for (const StreamSpec& s : streams) {
    const ModelConfig& c = models[size_t(s.model)].config;
    p.residuals += uint64_t(s.windows) * uint64_t(s.T) * uint64_t(c.d_model) * 4;
    const int64_t rows = std::min(s.batch, s.windows) * s.T;
    if (rows > max_rows) max_rows = rows, big = &c;
    max_batch = std::max(max_batch, std::min(s.batch, s.windows));
    vocab = std::max(vocab, c.vocab);
    D = std::max(D, c.d_model);
  }
  if (big) {  // h, y; qkv; q, att; k, v; gate, up (fp16): block_buffer_elements
    const int64_t R = max_rows, H = big->n_heads, Hkv = big->n_kv_heads, dh = big->d_head;
    p.activations = uint64_t(2 * R * big->d_model + R * (H + 2 * Hkv) * dh + 2 * R * H * dh + 2 * R * Hkv * dh +
                             2 * R * big->ffn) * 2;
  }
  // Positions per logits chunk: three kept chunks of batch x positions x vocab fp16 values.
  int64_t T = 1;
  for (const StreamSpec& s : streams) T = std::max(T, s.T);
  const uint64_t per_position = 3 * uint64_t(max_batch) * uint64_t(std::max<int64_t>(1, vocab)) * 2;
  p.chunk_positions = std::clamp<int64_t>(int64_t(kChunkBudget / per_position), 1, T);
  const uint64_t chunk_rows = uint64_t(max_batch) * uint64_t(p.chunk_positions);
  p.head += head_staging + 3 * chunk_rows * (uint64_t(vocab) * 2 + 4) + chunk_rows * 24 +
            uint64_t(max_batch) * uint64_t(vocab) * 2;
  p.scratch = kScratch;
  if (free == 0 || p.device() <= free) return p;
  // Residuals in pinned host memory, one batch of them on the device at a time.
  StreamPlan h = p;
  h.residuals_on_host = true;
  h.pinned += p.residuals;
  h.residuals = uint64_t(max_rows) * uint64_t(D) * 4;
  if (h.device() <= free) return h;
  throw Error("the GPU run needs " + format_bytes(h.device()) + " with the residual streams on the host (one block of each of " +
                  std::to_string(models.size()) + " model(s) in each of 2 slots " + format_bytes(h.blocks + h.staging) +
                  ", the head phase " + format_bytes(h.head) + ", activations of " + std::to_string(max_rows) + " rows " +
                  format_bytes(h.activations) + ", scratch " + format_bytes(h.scratch) + "), " + format_bytes(free) +
                  " free: lower --batch / --decode-batch or --ctx (activations), or drop --baseline (a model less)",
              "", "--device cuda");
}

#if !TL_HAVE_CUDA

struct GpuStreamer::Impl {};
GpuStreamer::GpuStreamer(std::vector<StreamModel>, std::vector<StreamSpec>, const StreamPlan&,
                         const cuda::KernelOptions&) {
  throw Error(gpu_model_unavailable_reason(), "", "gpu model");
}
GpuStreamer::~GpuStreamer() = default;
void GpuStreamer::embed(int, const Tensor&) {}
void GpuStreamer::stage_block(int, int, const StoredBlock&) {}
void GpuStreamer::run_step(int, const std::function<void(int, bool)>&) {}
StepTimes GpuStreamer::last_step_times() { return {}; }
void GpuStreamer::stage_head(int, const StoredLinear&, const std::vector<float>&) {}
void GpuStreamer::logits(int, int64_t, int64_t, int64_t, int) {}
ChunkStats GpuStreamer::stats(int, const std::vector<int32_t>&, int, int) { return {}; }
std::vector<float> GpuStreamer::logits_host(int) { return {}; }
const GpuModelInfo& GpuStreamer::info(int) const { static GpuModelInfo i; return i; }
uint64_t GpuStreamer::peak_device_bytes() const { return 0; }

#else

namespace {

struct Event {
  cudaEvent_t e = nullptr;
  explicit Event(bool timing = false) {
    TL_CUDA_THROW(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() {
    if (e) cudaEventDestroy(e);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

float elapsed_ms(const Event& a, const Event& b) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, a.e, b.e) != cudaSuccess) {
    (void)cudaGetLastError();  // not recorded (nothing staged): no time
    return 0;
  }
  return ms;
}

struct Slot {
  DeviceBlock block;
  PinnedArena arena;
  DevBuf raw;
  Event ready, up_start{true}, up_end{true};
  bool staged = false;
};

struct RopeTables {
  cuda::DeviceBuffer<float> cos, sin;
};

struct ModelState {
  StreamModel model;
  Slot slot[2];
  std::map<int64_t, std::unique_ptr<RopeTables>> rope;  // by T
  DeviceLinear head;
  DevBuf final_norm;
  GpuModelInfo info;
  std::set<std::string> counted;  // blocks whose weights info() has counted
};

}  // namespace

struct GpuStreamer::Impl {
  std::vector<std::unique_ptr<ModelState>> models;
  std::vector<StreamSpec> streams;
  StreamPlan plan;
  cuda::KernelOptions options;
  cudaStream_t copy = nullptr;
  Event compute_done[2];
  Event step_start{true}, step_end{true};
  std::vector<std::unique_ptr<Event>> stream_start, stream_end;  // per stream, timing
  int last_slot = -1;
  ForwardWorkspace ws;
  std::vector<DevBuf> x_dev;            // residuals on the device, one per stream
  std::vector<float*> x_host;           // or in pinned host memory
  DevBuf x_work;                        // then one batch on the device
  DevBuf kept[3], kept_lse[3], head_rows, targets, s_lse, s_arg, s_tgt, s_kld_a, s_kld_b;
  int64_t kept_rows[3] = {0, 0, 0};
  int kept_model[3] = {0, 0, 0};
  size_t chunk_rows = 0;            // the logits chunks' rows (allocated with the heads)
  int64_t max_batch = 1, vocab = 1;
  uint64_t peak_used = 0;

  ~Impl() {
    for (float* p : x_host)
      if (p) cudaFreeHost(p);
    if (copy) cudaStreamDestroy(copy);
  }

  int64_t batches(const StreamSpec& s) const { return (s.windows + s.batch - 1) / s.batch; }
  int64_t batch_windows(const StreamSpec& s, int64_t b) const { return std::min(s.batch, s.windows - b * s.batch); }
  const RopeTables& rope(const StreamSpec& s) const { return *models[size_t(s.model)]->rope.at(s.T); }

  // Batch b of stream i in its residual: the first float and the count.
  std::pair<size_t, size_t> batch_span(size_t i, int64_t b) const {
    const StreamSpec& s = streams[i];
    const int64_t D = models[size_t(s.model)]->model.config.d_model;
    return {size_t(b * s.batch * s.T * D), size_t(batch_windows(s, b) * s.T * D)};
  }
  // The residual rows of batch b of stream i on the device (copied in first when on the host).
  float* batch_x(size_t i, int64_t b, bool copy_in) {
    const auto [off, n] = batch_span(i, b);
    if (!plan.residuals_on_host) return x_dev[i].as<float>() + off;
    if (copy_in)
      TL_CUDA_THROW(cudaMemcpyAsync(x_work.get(), x_host[i] + off, n * 4, cudaMemcpyHostToDevice, nullptr));
    return x_work.as<float>();
  }
  void batch_x_back(size_t i, int64_t b) {
    if (!plan.residuals_on_host) return;
    const auto [off, n] = batch_span(i, b);
    TL_CUDA_THROW(cudaMemcpyAsync(x_host[i] + off, x_work.get(), n * 4, cudaMemcpyDeviceToHost, nullptr));
  }
  // One weight into the model's info, from its stored form (what a resident model would hold).
  void count(ModelState& ms, const StoredLinear& l) {
    ms.info.linear_weights++;
    ms.info.weight_bytes += device_bytes(l, ms.model.forms);
    if (!l.quant) return;
    ms.info.quantized++;
    if (!ms.model.forms.marlin || !l.quant->marlin) return;
    const MarlinSection& s = *l.quant->marlin;
    ms.info.marlin_packed++;
    ms.info.marlin_bytes += s.B.size() * 4 + (s.s.size() + s.delta.size()) * 2 +
                            cuda::marlin_workspace_ints(int(s.columns(l.N))) * 4;
  }
  void note_used() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) peak_used = std::max<uint64_t>(peak_used, total_b - free_b);
  }
};

GpuStreamer::GpuStreamer(std::vector<StreamModel> models, std::vector<StreamSpec> streams, const StreamPlan& plan,
                         const cuda::KernelOptions& options)
    : impl_(std::make_unique<Impl>()) {
  const std::string why = gpu_model_unavailable_reason();
  if (!why.empty()) throw Error(why, "", "gpu model");
  Impl& m = *impl_;
  m.streams = std::move(streams);
  m.plan = plan;
  m.options = options;
  TL_CUDA_THROW(cudaStreamCreateWithFlags(&m.copy, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  TL_CUDA_THROW(cudaGetDeviceProperties(&prop, 0));
  int64_t max_rows = 0, max_batch = 1, vocab = 1;
  for (StreamModel& sm : models) {
    auto st = std::make_unique<ModelState>();
    st->model = sm;
    st->info.device = cuda::cuda_device_label(prop);
    m.models.push_back(std::move(st));
  }
  for (const StreamSpec& s : m.streams) {
    if (s.model < 0 || size_t(s.model) >= m.models.size() || s.windows < 1 || s.T < 1 || s.batch < 1 || !s.tokens)
      throw Error("a stream without windows, tokens or a model", "", "gpu streamer");
    ModelState& ms = *m.models[size_t(s.model)];
    if (!ms.rope.count(s.T)) {
      auto r = std::make_unique<RopeTables>();
      upload_rope_tables(ms.model.config, int(s.T), r->cos, r->sin);
      ms.rope[s.T] = std::move(r);
    }
    max_rows = std::max(max_rows, std::min(s.batch, s.windows) * s.T);
    max_batch = std::max(max_batch, std::min(s.batch, s.windows));
    vocab = std::max(vocab, ms.model.config.vocab);
  }
  const ModelConfig& c0 = m.models.front()->model.config;
  m.ws.reserve(c0, max_rows);
  for (const StreamSpec& s : m.streams) {
    const uint64_t bytes = uint64_t(s.windows * s.T * m.models[size_t(s.model)]->model.config.d_model) * 4;
    if (plan.residuals_on_host) {
      void* p = nullptr;
      TL_CUDA_THROW(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
      m.x_host.push_back(static_cast<float*>(p));
    } else {
      m.x_dev.emplace_back(bytes);
    }
  }
  if (plan.residuals_on_host) m.x_work.resize(size_t(max_rows * c0.d_model) * 4);
  m.chunk_rows = size_t(max_batch * std::max<int64_t>(1, plan.chunk_positions));
  m.max_batch = max_batch;
  m.vocab = vocab;
  m.note_used();
}

GpuStreamer::~GpuStreamer() = default;

void GpuStreamer::embed(int model, const Tensor& embed) {
  Impl& m = *impl_;
  const int64_t D = m.models[size_t(model)]->model.config.d_model;
  // Each batch's rows once per mode (its streams share them), then into every stream of the model.
  std::vector<bool> done(m.streams.size(), false);
  std::vector<int32_t> order;
  for (size_t i = 0; i < m.streams.size(); ++i) {
    const StreamSpec& s = m.streams[i];
    if (s.model != model || done[i]) continue;
    std::vector<size_t> same;  // this model's streams over the same windows in the same mode
    for (size_t j = i; j < m.streams.size(); ++j) {
      const StreamSpec& o = m.streams[j];
      if (o.model == model && !done[j] && o.mode == s.mode && o.tokens == s.tokens && o.windows == s.windows &&
          o.T == s.T && o.batch == s.batch)
        same.push_back(j), done[j] = true;
    }
    for (int64_t b = 0; b < m.batches(s); ++b) {
      const int64_t nb = m.batch_windows(s, b), w0 = b * s.batch;
      order.resize(size_t(nb * s.T));  // the batch's tokens in the mode's row order (decode: position-major)
      for (int64_t r = 0; r < nb * s.T; ++r)
        order[size_t(s.mode == ForwardMode::kDecode ? (r % s.T) * nb + r / s.T : r)] = s.tokens[w0 * s.T + r];
      // The fp16 table the runtime holds, as float rows: one rounding of each stored value.
      std::vector<float> rows = embedding_rows(embed, order.data(), nb * s.T);
      parallel_chunks(int64_t(rows.size()), int64_t(1) << 20, [&](int64_t i0, int64_t i1) {
        for (int64_t k = i0; k < i1; ++k) rows[size_t(k)] = round_to_half(rows[size_t(k)]);
      });
      const size_t off = size_t(w0 * s.T * D);
      for (size_t j : same) {
        if (m.plan.residuals_on_host)
          std::memcpy(m.x_host[j] + off, rows.data(), rows.size() * 4);
        else
          TL_CUDA_THROW(cudaMemcpy(m.x_dev[j].as<float>() + off, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
      }
    }
  }
}

void GpuStreamer::stage_block(int model, int slot, const StoredBlock& b) {
  Impl& m = *impl_;
  ModelState& ms = *m.models[size_t(model)];
  Slot& s = ms.slot[slot];
  TL_CUDA_THROW(cudaEventSynchronize(s.ready.e));  // the arena's last copies are done
  TL_CUDA_THROW(cudaStreamWaitEvent(m.copy, m.compute_done[slot].e, 0));  // the slot's last block is no longer read
  TL_CUDA_THROW(cudaEventRecord(s.up_start.e, m.copy));
  s.arena.reset();
  s.arena.reserve(staged_bytes(b, ms.model.forms));
  upload_block(ms.model.config, b, ms.model.forms, s.arena, s.raw, s.block, m.copy);
  TL_CUDA_THROW(cudaEventRecord(s.up_end.e, m.copy));
  TL_CUDA_THROW(cudaEventRecord(s.ready.e, m.copy));
  s.staged = true;
  if (ms.counted.insert(b.prefix).second)
    for (const StoredLinear& l : b.lin) m.count(ms, l);
}

void GpuStreamer::run_step(int slot, const std::function<void(int, bool)>& around) {
  Impl& m = *impl_;
  while (m.stream_start.size() < m.streams.size()) {
    m.stream_start.push_back(std::make_unique<Event>(true));
    m.stream_end.push_back(std::make_unique<Event>(true));
  }
  for (auto& ms : m.models)
    if (ms->slot[slot].staged) TL_CUDA_THROW(cudaStreamWaitEvent(nullptr, ms->slot[slot].ready.e, 0));
  TL_CUDA_THROW(cudaEventRecord(m.step_start.e, nullptr));
  for (size_t i = 0; i < m.streams.size(); ++i) {
    const StreamSpec& s = m.streams[i];
    const ModelState& ms = *m.models[size_t(s.model)];
    if (!ms.slot[slot].staged) throw Error("no block staged for the step", "", "gpu streamer");
    const DeviceBlock& b = ms.slot[slot].block;
    const DeviceLinear* swap = nullptr;
    if (s.swap_model >= 0 && b.prefix == s.swap_prefix)
      swap = &m.models[size_t(s.swap_model)]->slot[slot].block.lin[s.swap_linear];
    const RopeTables& r = m.rope(s);
    if (around) around(int(i), false);
    TL_CUDA_THROW(cudaEventRecord(m.stream_start[i]->e, nullptr));
    for (int64_t bi = 0; bi < m.batches(s); ++bi) {
      float* x = m.batch_x(i, bi, true);
      m.ws.run_block(ms.model.config, b, s.path, x, int(m.batch_windows(s, bi)), int(s.T), s.mode, r.cos.get(),
                     r.sin.get(), m.options, swap, s.swap_linear);
      m.batch_x_back(i, bi);
    }
    TL_CUDA_THROW(cudaEventRecord(m.stream_end[i]->e, nullptr));
    if (around) around(int(i), true);
  }
  TL_CUDA_THROW(cudaEventRecord(m.compute_done[slot].e, nullptr));
  TL_CUDA_THROW(cudaEventRecord(m.step_end.e, nullptr));
  m.last_slot = slot;
}

StepTimes GpuStreamer::last_step_times() {
  Impl& m = *impl_;
  StepTimes t;
  if (m.last_slot < 0) return t;
  TL_CUDA_THROW(cudaEventSynchronize(m.step_end.e));
  t.compute = elapsed_ms(m.step_start, m.step_end) * 1e-3;
  for (size_t i = 0; i < m.stream_start.size(); ++i)
    t.stream_compute.push_back(elapsed_ms(*m.stream_start[i], *m.stream_end[i]) * 1e-3);
  for (auto& ms : m.models) {
    const Slot& s = ms->slot[m.last_slot];
    if (s.staged) t.upload += elapsed_ms(s.up_start, s.up_end) * 1e-3;
  }
  m.note_used();
  return t;
}

void GpuStreamer::stage_head(int model, const StoredLinear& head, const std::vector<float>& final_norm) {
  Impl& m = *impl_;
  TL_CUDA_THROW(cudaDeviceSynchronize());
  for (auto& ms : m.models)  // the blocks are done: their slots make room for the heads
    for (Slot& s : ms->slot) {
      s.block = DeviceBlock{};
      s.raw = DevBuf{};
      s.staged = false;
    }
  // The head phase's buffers, in the room the blocks left (the plan counts them there).
  if (m.kept[0].size() == 0) {
    for (int i = 0; i < 3; ++i) {
      m.kept[i].resize(m.chunk_rows * size_t(m.vocab) * 2);
      m.kept_lse[i].resize(m.chunk_rows * 4);
    }
    m.head_rows.resize(size_t(m.max_batch * m.vocab) * 2);
    for (DevBuf* b : {&m.targets, &m.s_lse, &m.s_arg, &m.s_tgt, &m.s_kld_a, &m.s_kld_b}) b->resize(m.chunk_rows * 4);
  }
  ModelState& ms = *m.models[size_t(model)];
  PinnedArena arena;
  DevBuf raw;
  arena.reserve(staged_bytes(head, ms.model.forms) + 256);
  upload_linear(head, ms.model.forms, arena, raw, ms.head, m.copy);
  ms.final_norm.resize(final_norm.size() * 4);
  TL_CUDA_THROW(cudaMemcpyAsync(ms.final_norm.get(), final_norm.data(), final_norm.size() * 4, cudaMemcpyHostToDevice,
                                m.copy));
  TL_CUDA_THROW(cudaStreamSynchronize(m.copy));
  m.count(ms, head);
  m.note_used();
}

void GpuStreamer::logits(int stream, int64_t batch, int64_t t0, int64_t t1, int into) {
  Impl& m = *impl_;
  const StreamSpec& s = m.streams[size_t(stream)];
  const ModelState& ms = *m.models[size_t(s.model)];
  const ModelConfig& c = ms.model.config;
  const int64_t D = c.d_model, V = c.vocab, nb = m.batch_windows(s, batch), L = t1 - t0, rows = nb * L;
  if (t0 < 0 || t1 > s.T || L < 1 || rows > int64_t(m.kept_lse[into].size() / 4))
    throw Error("logits chunk outside the plan", "", "gpu streamer");
  // The chunk's rows of the batch's residual: on the device, or copied in (only those rows) from
  // the host into the work buffer at the same offsets.
  const float* x = m.batch_x(size_t(stream), batch, false);
  if (m.plan.residuals_on_host) {
    const float* host = m.x_host[size_t(stream)] + m.batch_span(size_t(stream), batch).first;
    float* dev = m.x_work.as<float>();
    if (s.mode == ForwardMode::kPrefill)
      TL_CUDA_THROW(cudaMemcpy2DAsync(dev + t0 * D, size_t(s.T * D) * 4, host + t0 * D, size_t(s.T * D) * 4,
                                      size_t(L * D) * 4, size_t(nb), cudaMemcpyHostToDevice, nullptr));
    else
      TL_CUDA_THROW(cudaMemcpyAsync(dev + t0 * nb * D, host + t0 * nb * D, size_t(L * nb * D) * 4,
                                    cudaMemcpyHostToDevice, nullptr));
  }
  // --per-layer's head swap: the quantized model's head (its fp16 copy) on this stream's residual.
  const bool swap_head = s.swap_model >= 0 && s.swap_prefix == "head";
  const DeviceLinear& head = swap_head ? m.models[size_t(s.swap_model)]->head : ms.head;
  const GpuPath path = swap_head ? GpuPath::kFp16 : s.path;
  __half* h = m.ws.h();
  __half* out = m.kept[into].as<__half>();
  const float eps = float(c.norm_eps);
  if (s.mode == ForwardMode::kPrefill) {
    for (int64_t sq = 0; sq < nb; ++sq)
      check_launch(cuda::rms_norm_rows(x + (sq * s.T + t0) * D, ms.final_norm.as<float>(), h + sq * L * D, int(L),
                                       int(D), eps, nullptr), "rms_norm final");
    linear_gemm(head, path, h, out, int(rows), m.options);
  } else {
    // Position-major rows: positions t0..t1 are contiguous; the head once per position (M = the
    // batch), each position's logits to rows s * L + t - t0.
    check_launch(cuda::rms_norm_rows(x + t0 * nb * D, ms.final_norm.as<float>(), h, int(L * nb), int(D), eps, nullptr),
                 "rms_norm final");
    for (int64_t t = t0; t < t1; ++t) {
      linear_gemm(head, path, h + (t - t0) * nb * D, m.head_rows.as<__half>(), int(nb), m.options);
      TL_CUDA_THROW(cudaMemcpy2DAsync(out + (t - t0) * V, size_t(L * V) * 2, m.head_rows.get(), size_t(V) * 2,
                                      size_t(V) * 2, size_t(nb), cudaMemcpyDeviceToDevice, nullptr));
    }
  }
  check_launch(cuda::logits_row_stats(out, nullptr, int(rows), int(V), m.kept_lse[into].as<float>(), nullptr, nullptr,
                                      nullptr), "logits lse");
  m.kept_rows[into] = rows;
  m.kept_model[into] = s.model;
}

ChunkStats GpuStreamer::stats(int buf, const std::vector<int32_t>& targets, int kld_a, int kld_b) {
  Impl& m = *impl_;
  const int64_t rows = m.kept_rows[buf];
  const int V = int(m.models[size_t(m.kept_model[buf])]->model.config.vocab);
  if (int64_t(targets.size()) != rows) throw Error("targets of another chunk", "", "gpu streamer");
  TL_CUDA_THROW(cudaMemcpy(m.targets.get(), targets.data(), size_t(rows) * 4, cudaMemcpyHostToDevice));
  check_launch(cuda::logits_row_stats(m.kept[buf].as<__half>(), m.targets.as<int32_t>(), int(rows), V,
                                      m.s_lse.as<float>(), m.s_arg.as<int32_t>(), m.s_tgt.as<float>(), nullptr),
               "row stats");
  ChunkStats st;
  auto down = [&](const DevBuf& b, auto* out) {
    out->resize(size_t(rows));
    TL_CUDA_THROW(cudaMemcpy(out->data(), b.get(), size_t(rows) * 4, cudaMemcpyDeviceToHost));
  };
  down(m.s_lse, &st.lse);
  down(m.s_arg, &st.argmax);
  down(m.s_tgt, &st.target);
  for (const auto& [ref, dst, out] : {std::make_tuple(kld_a, &m.s_kld_a, &st.kld_a), std::make_tuple(kld_b, &m.s_kld_b, &st.kld_b)}) {
    if (ref < 0) continue;
    if (m.kept_rows[ref] != rows) throw Error("KLD against a chunk of another size", "", "gpu streamer");
    check_launch(cuda::kld_rows(m.kept[ref].as<__half>(), m.kept_lse[ref].as<float>(), m.kept[buf].as<__half>(),
                                m.kept_lse[buf].as<float>(), int(rows), V, dst->as<float>(), nullptr),
                 "kld_rows");
    down(*dst, out);
  }
  return st;
}

std::vector<float> GpuStreamer::logits_host(int buf) {
  Impl& m = *impl_;
  const size_t n = size_t(m.kept_rows[buf]) * size_t(m.models[size_t(m.kept_model[buf])]->model.config.vocab);
  std::vector<half_bits> h(n);
  TL_CUDA_THROW(cudaMemcpy(h.data(), m.kept[buf].get(), n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = half_to_float(h[i]);
  return out;
}

const GpuModelInfo& GpuStreamer::info(int model) const { return impl_->models[size_t(model)]->info; }
uint64_t GpuStreamer::peak_device_bytes() const { return impl_->peak_used; }

#endif  // TL_HAVE_CUDA

}  // namespace tl::gpu
