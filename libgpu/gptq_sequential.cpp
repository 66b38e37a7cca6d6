// See gptq_sequential.h.
#include "libgpu/gptq_sequential.h"

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

#include "core/error.h"
#include "cuda/cublas_gemm.h"
#include "cuda/device_buffer.h"
#include "cuda/gptq_ops.h"
#include "cuda/model_ops.h"
#include "formats/memory_budget.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"
#include "libgpu/block_forward.h"
#include "libgpu/launch_check.h"
#include "libgpu/model_gpu.h"

namespace tl::gpu {
namespace {

using cuda::DeviceBuffer;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The calibration activations x [rows, D] fp32: on the device, or in pinned host memory when
// they do not fit beside the block's work (then every chunk is staged through the device).
class Activations {
 public:
  Activations(int64_t rows, int64_t D, bool on_host) : D_(D), on_host_(on_host) {
    const size_t bytes = size_t(rows) * size_t(D) * sizeof(float);
    if (!on_host) {
      dev_.resize(size_t(rows) * size_t(D));
    } else if (const cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&host_), bytes, cudaHostAllocDefault)) {
      host_ = nullptr;
      (void)cudaGetLastError();
      throw cuda::CudaError("cudaHostAlloc of " + format_bytes(bytes) + " (" + std::to_string(bytes) +
                            " bytes) of pinned host memory for the activations failed: " + cudaGetErrorString(e) +
                            " (" + cudaGetErrorName(e) + ")");
    }
  }
  ~Activations() {
    if (host_) cudaFreeHost(host_);
  }
  Activations(const Activations&) = delete;
  Activations& operator=(const Activations&) = delete;

  // Rows [r0, r0 + n) as a device pointer to work on in place: the store itself, or `stage`
  // filled from the host copy (put() writes it back).
  float* get(int64_t r0, int64_t n, float* stage) {
    if (!on_host_) return dev_.get() + r0 * D_;
    TL_CUDA_THROW(cudaMemcpy(stage, host_ + r0 * D_, bytes(n), cudaMemcpyHostToDevice));
    return stage;
  }
  void put(int64_t r0, int64_t n, const float* dev) {
    if (on_host_) TL_CUDA_THROW(cudaMemcpy(host_ + r0 * D_, dev, bytes(n), cudaMemcpyDeviceToHost));
  }
  // A copy of rows [r0, r0 + n) into the device buffer `dst` (the store is left unchanged).
  void copy_to(int64_t r0, int64_t n, float* dst) {
    if (on_host_) TL_CUDA_THROW(cudaMemcpy(dst, host_ + r0 * D_, bytes(n), cudaMemcpyHostToDevice));
    else TL_CUDA_THROW(cudaMemcpy(dst, dev_.get() + r0 * D_, bytes(n), cudaMemcpyDeviceToDevice));
  }
  void put_host(int64_t r0, int64_t n, const float* src) {
    if (on_host_) std::memcpy(host_ + r0 * D_, src, bytes(n));
    else TL_CUDA_THROW(cudaMemcpy(dev_.get() + r0 * D_, src, bytes(n), cudaMemcpyHostToDevice));
  }

 private:
  size_t bytes(int64_t n) const { return size_t(n) * size_t(D_) * sizeof(float); }
  int64_t D_;
  bool on_host_;
  DeviceBuffer<float> dev_;
  float* host_ = nullptr;
};

// One linear weight of a resident block: its fp16 copy (the forward's), and where its input's
// Hessian accumulates (-1: not selected).
struct DevLinear {
  std::string name;
  int K = 0, N = 0;
  DeviceBuffer<__half> w;
  DeviceBuffer<float> w32;  // a selected weight's fp32 values for GPTQ (uploaded once; freed after it)
  int slot = -1;            // Hessian slot
  bool owns_slot = false;   // false for mlp_up sharing mlp_gate's input
};

struct DevBlock {
  BlockWeights host;        // the block as read: its linears' fp32 values are freed once uploaded
  BlockParamBuffers params; // norms, biases, q/k norms, window
  DevLinear lin[5];
};

// One chunk's activations; sized for kChunkRows rows rounded to whole windows.
struct ChunkBuffers {
  DeviceBuffer<float> x, cos_tab, sin_tab;
  DeviceBuffer<__half> h, qkv, q, k, v, att, y, gate, up;
  void reserve(const ModelConfig& c, int64_t rows, int T) {
    const BlockBufferSizes n = block_buffer_elements(c, rows);
    x.reserve(size_t(rows * c.d_model));
    for (auto* b : {&h, &y}) b->reserve(size_t(n.h));
    qkv.reserve(size_t(n.qkv));
    for (auto* b : {&q, &att}) b->reserve(size_t(n.q));
    for (auto* b : {&k, &v}) b->reserve(size_t(n.kv));
    for (auto* b : {&gate, &up}) b->reserve(size_t(n.gate));
    upload_rope_tables(c, T, cos_tab, sin_tab);
  }
  BlockBuffers view(float* xp) const {
    BlockBuffers b;
    b.x = xp;
    b.h = h.get();
    b.qkv = qkv.get();
    b.q = q.get();
    b.k = k.get();
    b.v = v.get();
    b.att = att.get();
    b.y = y.get();
    b.gate = gate.get();
    b.up = up.get();
    b.cos_tab = cos_tab.get();
    b.sin_tab = sin_tab.get();
    return b;
  }
};

// The state of one calibrate() run.
class Run {
 public:
  Run(GpuGptq& gptq, const ModelSource& src, const std::set<std::string>& selected, const SequentialCalls& calls,
      GptqPhaseTimes& t)
      : gptq_(gptq), src_(src), c_(src.config()), selected_(selected), calls_(calls), t_(t) {
    check_blas(cublasCreate(&blas_), "cublasCreate");
  }
  ~Run() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cublasDestroy(blas_);
  }

  void go(const std::vector<int32_t>& tokens, int64_t seq_len, int64_t n_seq, bool acts_on_host) {
    T_ = int(seq_len);
    n_seq_ = n_seq;
    const int64_t rows = n_seq * seq_len, D = c_.d_model;
    wpc_ = std::min(n_seq, chunk_windows(seq_len));
    chunk_.reserve(c_, wpc_ * seq_len, T_);
    acts_ = std::make_unique<Activations>(rows, D, acts_on_host);
    const auto t0 = Clock::now();
    auto t_step = t0;
    auto say = [&](const std::string& what) {
      if (!calls_.events.log) return;
      char b[80];
      std::snprintf(b, sizeof b, " (%.1fs; %.1fs in all)", since(t_step), since(t0));
      t_step = Clock::now();
      calls_.events.log(what + b);
    };
    const double pass = block_forward_flops(c_, rows);
    if (calls_.events.planned) calls_.events.planned(calibration_forward_flops(c_, rows, selected_));
    auto forward_done = [&](double flops) {
      if (calls_.events.forward_done) calls_.events.forward_done(flops);
    };

    {  // x = embed[tokens], chunk by chunk through a host staging buffer
      auto tl = Clock::now();
      const std::vector<float> embed = read([&] { return src_.read_embedding().to_float(); });
      t_.load += since(tl);
      std::vector<float> stage(static_cast<size_t>(wpc_ * seq_len * D));
      for (int64_t r0 = 0; r0 < rows; r0 += wpc_ * seq_len) {
        const int64_t n = std::min(wpc_ * seq_len, rows - r0);
        for (int64_t r = 0; r < n; ++r)
          std::memcpy(&stage[size_t(r * D)], &embed[size_t(tokens[size_t(r0 + r)]) * size_t(D)], size_t(D) * 4);
        acts_->put_host(r0, n, stage.data());
      }
    }
    say("calibration: " + std::to_string(n_seq) + " windows x " + std::to_string(seq_len) + " tokens embedded on " +
        std::string(acts_on_host ? "the host (pinned; they do not fit the GPU)" : "the GPU"));

    // Distinct blocks: read ahead one block on another thread where the input allows it.
    std::future<BlockWeights> next;
    auto fetch = [&](int64_t i) {
      if (src_.hdf5()) {  // HDF5 is read on this thread (the output is HDF5 too)
        std::promise<BlockWeights> p;
        p.set_value(read([&] { return to_block_weights(src_.read_block(block_prefix(false, i))); }));
        return p.get_future();
      }
      return std::async(std::launch::async, [this, i] { return to_block_weights(src_.read_block(block_prefix(false, i))); });
    };
    if (c_.n_pre > 0) next = fetch(0);
    for (int64_t i = 0; i < c_.n_pre; ++i) {
      auto tl = Clock::now();
      BlockWeights bw = next.get();
      t_.load += since(tl);
      if (i + 1 < c_.n_pre) next = fetch(i + 1);
      DevBlock blk;
      upload(std::move(bw), blk);
      const std::string prefix = blk.host.prefix;
      if (!block_selected(prefix, selected_)) {
        forward_pass({&blk}, 1, /*in_place=*/true, false);
        forward_done(pass);
        say(prefix + ": forward (nothing selected)");
        continue;
      }
      if (calls_.resumed.count(prefix)) {  // the journal's stage: W_hat as GPTQ left it, pass 2 only
        put_resumed_weights({&blk});
        forward_pass({&blk}, 1, /*in_place=*/true, false);
        forward_done(2 * pass);
        say(prefix + ": W_hat from the journal");
        continue;
      }
      assign_slots({&blk});
      accumulate_begin(int(n_seq));
      forward_pass({&blk}, 1, /*in_place=*/false, true);
      forward_done(pass);
      quantize({&blk});
      stage_done(prefix);
      forward_pass({&blk}, 1, /*in_place=*/true, false);
      forward_done(pass);
      say(prefix + " calibrated and quantized");
    }

    // The shared loop blocks (TinyLoop): Hessians over every iteration, one quantization.
    std::vector<std::unique_ptr<DevBlock>> loop;
    std::vector<DevBlock*> lp;
    bool loop_selected = false;
    for (int64_t j = 0; j < c_.n_loop; ++j) loop_selected = loop_selected || block_selected(block_prefix(true, j), selected_);
    const bool head = selected_.count("head") > 0;
    if (loop_selected || head) {
      for (int64_t j = 0; j < c_.n_loop; ++j) {
        auto tl = Clock::now();
        BlockWeights bw = read([&] { return to_block_weights(src_.read_block(block_prefix(true, j))); });
        t_.load += since(tl);
        loop.push_back(std::make_unique<DevBlock>());
        upload(std::move(bw), *loop.back());
        lp.push_back(loop.back().get());
      }
    }
    if (loop_selected && calls_.resumed.count("loop")) {
      put_resumed_weights(lp);
      forward_done(pass * double(c_.loops) * double(c_.n_loop));
      say("loop blocks: W_hat from the journal");
    } else if (loop_selected) {
      assign_slots(lp);
      accumulate_begin(int(n_seq * c_.loops));
      forward_pass(lp, int(c_.loops), /*in_place=*/false, true);
      forward_done(pass * double(c_.loops) * double(c_.n_loop));
      quantize(lp);
      stage_done("loop");
      say("loop blocks calibrated over " + std::to_string(c_.loops) + " iterations and quantized");
    }
    if (head && calls_.resumed.count("head")) {
      forward_done(pass * double(c_.loops) * double(c_.n_loop));
    } else if (head) {
      auto tl = Clock::now();
      const std::vector<float> final_norm = read([&] { return src_.read_vector("final_norm"); });
      LinearWeight hw = read([&] { return to_linear_weight(src_.read_head()); });
      t_.load += since(tl);
      DeviceBuffer<float> fn(final_norm);
      slot_dim_.assign(1, int(hw.K));  // one slot: the head's input
      accumulate_begin(int(n_seq));
      head_pass(lp, fn.get(), int(hw.K));
      forward_done(pass * double(c_.loops) * double(c_.n_loop));
      symmetrize();
      quantize_one(hw, 0, nullptr);
      stage_done("head");
      say("head calibrated and quantized");
    }
  }

 private:
  // One read of the model: under calls_.hdf5_mutex when the model is HDF5 and the caller writes
  // its output on another thread (the safetensors reads are plain memory maps).
  template <class Fn>
  auto read(Fn&& fn) -> decltype(fn()) {
    const auto lock = hdf5_lock(src_.hdf5() ? calls_.hdf5_mutex : nullptr);
    return fn();
  }

  // fp16 copies of the block's linears (converted on the device), norms; slots unassigned. A
  // selected weight keeps its fp32 upload for GPTQ (one host-to-device copy per weight, not two);
  // the host's fp32 values are freed here.
  void upload(BlockWeights&& bw, DevBlock& blk) {
    blk.host = std::move(bw);
    blk.params = BlockParamBuffers(c_, blk.host);
    for (int i = 0; i < 5; ++i) {
      LinearWeight& lw = *blk.host.linear(kBlockLinearNames[i]);
      DevLinear& l = blk.lin[i];
      l.name = lw.name;
      l.K = int(lw.K);
      l.N = int(lw.N);
      l.w.resize(lw.W.size());
      DeviceBuffer<float>* f32 = &staging_;
      if (selected_.count(lw.name)) {
        l.w32.resize(lw.W.size());
        f32 = &l.w32;
      } else {
        staging_.reserve(lw.W.size());
      }
      TL_CUDA_THROW(cudaMemcpy(f32->get(), lw.W.data(), lw.W.size() * 4, cudaMemcpyHostToDevice));
      check_launch(cuda::float_to_half_n(f32->get(), l.w.get(), int64_t(lw.W.size()), nullptr), "float_to_half_n");
      lw.W = std::vector<float>();
    }
  }

  void stage_done(const std::string& stage) {
    if (calls_.stage_done) calls_.stage_done(stage);
  }

  // --resume: the selected linears of these blocks get the fp16 W_hat the uninterrupted run's
  // GPTQ left in them: the same kernel (gptq_dequant_fp16) on the journal's codes, scales and
  // zeros, so the forward after them is that run's, bit for bit.
  void put_resumed_weights(const std::vector<DevBlock*>& blocks) {
    for (DevBlock* b : blocks)
      for (DevLinear& l : b->lin) {
        if (!selected_.count(l.name)) continue;
        const QuantWeight& qw = calls_.resumed_weight(l.name);
        if (qw.K != l.K || qw.N != l.N)
          throw Error("the journal's weight is [" + std::to_string(qw.K) + ", " + std::to_string(qw.N) +
                          "], the model's [" + std::to_string(l.K) + ", " + std::to_string(l.N) + "]",
                      "", l.name);
        const DeviceBuffer<uint8_t> q(qw.q);
        const DeviceBuffer<half_bits> scale(qw.scale), zero(qw.zero);
        check_launch(cuda::gptq_dequant_fp16(q.get(), reinterpret_cast<const __half*>(scale.get()),
                                             reinterpret_cast<const __half*>(zero.get()), l.K, l.N,
                                             int(qw.group_size), l.w.get(), nullptr),
                     "gptq_dequant_fp16 " + l.name);
        l.w32 = DeviceBuffer<float>();  // no GPTQ for it in this run
      }
    TL_CUDA_THROW(cudaDeviceSynchronize());  // the uploads' buffers are freed on return
  }

  // Hessian slots for the selected linears of these blocks; mlp_up shares mlp_gate's input.
  void assign_slots(const std::vector<DevBlock*>& blocks) {
    slot_dim_.clear();
    for (DevBlock* b : blocks) {
      for (int i = 0; i < 5; ++i) {
        DevLinear& l = b->lin[i];
        l.slot = -1;
        l.owns_slot = false;
        if (!selected_.count(l.name)) continue;
        if (i == 3 && b->lin[2].slot >= 0) {
          l.slot = b->lin[2].slot;
          continue;
        }
        l.slot = int(slot_dim_.size());
        l.owns_slot = true;
        slot_dim_.push_back(l.K);
      }
    }
  }

  // Zeroed Hessian accumulators, one per slot of slot_dim_; `samples` = the sample count each
  // will hold (windows x calls per window).
  void accumulate_begin(int samples) {
    hess_.resize(slot_dim_.size());
    for (size_t s = 0; s < slot_dim_.size(); ++s) {
      const size_t KK = size_t(slot_dim_[s]) * size_t(slot_dim_[s]);
      // Exactly K x K, never a larger slot's leftover: with an --only that selects other
      // linears block to block, slot numbers move, and plan() counts each slot at its own K.
      if (hess_[s].size() != KK) hess_[s].resize(KK);
      TL_CUDA_THROW(cudaMemset(hess_[s].get(), 0, KK * 4));
    }
    samples_ = samples;
  }

  // H_slot += (2 / samples) X^T X for X [M, K] fp16 (row-major; column-major it is X^T [K, M]),
  // bracketed by events so the pass can tell its Hessian time from its forward time.
  void accumulate(int slot, const __half* X, int M) {
    const int K = slot_dim_[size_t(slot)];
    const float alpha = float(2.0 / double(samples_)), one = 1.0f;
    if (events_used_ + 2 > events_.size()) {
      cudaEvent_t e0, e1;
      TL_CUDA_THROW(cudaEventCreate(&e0));
      TL_CUDA_THROW(cudaEventCreate(&e1));
      events_.push_back(e0);
      events_.push_back(e1);
    }
    TL_CUDA_THROW(cudaEventRecord(events_[events_used_++]));
    check_blas(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_T, K, K, M, &alpha, X, CUDA_R_16F, K, X, CUDA_R_16F, K, &one,
                            hess_[size_t(slot)].get(), CUDA_R_32F, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx (Hessian)");
    TL_CUDA_THROW(cudaEventRecord(events_[events_used_++]));
  }

  // After a pass (device synchronized): the time its Hessian GEMMs took.
  double hessian_seconds() {
    double s = 0;
    for (size_t i = 0; i + 1 < events_used_; i += 2) {
      float ms = 0;
      TL_CUDA_THROW(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
      s += ms / 1000.0;
    }
    events_used_ = 0;
    return s;
  }

  void symmetrize() {
    for (int s = 0; s < int(hess_.size()); ++s)
      check_launch(cuda::gptq_symmetrize(hess_[size_t(s)].get(), slot_dim_[size_t(s)], nullptr), "gptq_symmetrize");
  }

  void run_block(const DevBlock& b, float* x, int n_seq, bool hooks) {
    block_forward(c_, b.params.params(), chunk_.view(x), n_seq, T_,
                  [&](int i, const __half* X, __half* Y, int M) {
                    const DevLinear& l = b.lin[i];
                    if (hooks && l.owns_slot) accumulate(l.slot, X, M);
                    check_launch(cuda::detail::cublas_fp16_gemm(X, l.w.get(), Y, M, l.N, l.K, nullptr),
                             "cublas_fp16_gemm " + l.name);
                  },
                  ForwardMode::kPrefill, nullptr, AttentionKernel::kTensorCore);
  }

  // One pass over the calibration activations, chunk by chunk: body(x, windows, rows) on the
  // chunk in place (in_place: its result is the next block's input) or on a copy of it.
  // Timed apart from its Hessian GEMMs.
  void pass(bool in_place, const std::function<void(float* x, int windows, int64_t rows)>& body) {
    const auto t0 = Clock::now();
    for (int64_t w0 = 0; w0 < n_seq_; w0 += wpc_) {
      const int nw = int(std::min(wpc_, n_seq_ - w0));
      const int64_t r0 = w0 * T_, n = int64_t(nw) * T_;
      float* x = chunk_.x.get();
      if (in_place) x = acts_->get(r0, n, chunk_.x.get());
      else acts_->copy_to(r0, n, x);
      body(x, nw, n);
      if (in_place) acts_->put(r0, n, x);
    }
    TL_CUDA_THROW(cudaDeviceSynchronize());
    const double h = hessian_seconds();
    t_.forward += since(t0) - h;
    t_.hessian += h;
  }

  // Every chunk through `blocks` (`iterations` times): in place on x, or on a copy (pass 1).
  void forward_pass(const std::vector<DevBlock*>& blocks, int iterations, bool in_place, bool hooks) {
    pass(in_place, [&](float* x, int nw, int64_t) {
      for (int it = 0; it < iterations; ++it)
        for (const DevBlock* b : blocks) run_block(*b, x, nw, hooks);
    });
  }

  // The head's Hessian: every chunk through the loop stack (if any), then the final norm.
  void head_pass(const std::vector<DevBlock*>& loop, const float* final_norm, int D) {
    pass(false, [&](float* x, int nw, int64_t n) {
      for (int64_t it = 0; it < c_.loops; ++it)
        for (const DevBlock* b : loop) run_block(*b, x, nw, false);
      check_launch(cuda::rms_norm_rows(x, final_norm, chunk_.h.get(), int(n), D, float(c_.norm_eps), nullptr),
                   "rms_norm final");
      accumulate(0, chunk_.h.get(), int(n));
    });
  }

  // GPTQ of every selected weight of these blocks, in block order; their fp16 copies become
  // W_hat. A Hessian shared by mlp_gate and mlp_up is copied for the first (GPTQ modifies it).
  void quantize(const std::vector<DevBlock*>& blocks) {
    symmetrize();
    for (DevBlock* b : blocks) {
      for (int i = 0; i < 5; ++i) {
        DevLinear& l = b->lin[i];
        if (l.slot < 0) continue;
        const bool shared = i == 2 && b->lin[3].slot == l.slot;
        quantize_one(*b->host.linear(kBlockLinearNames[i]), l.slot, l.w.get(), shared, l.w32.get());
        l.w32 = DeviceBuffer<float>();  // GPTQ is done with it
      }
    }
  }

  // GPTQ of one weight: its fp32 values on the device (w32, from upload) or on the host (lw.W).
  void quantize_one(const LinearWeight& lw, int slot, __half* w_hat, bool keep_hessian = false,
                    const float* w32 = nullptr) {
    const int K = int(lw.K);
    float* H = hess_[size_t(slot)].get();
    if (keep_hessian) {
      hess_copy_.reserve(size_t(K) * size_t(K));
      TL_CUDA_THROW(cudaMemcpy(hess_copy_.get(), H, size_t(K) * size_t(K) * 4, cudaMemcpyDeviceToDevice));
      H = hess_copy_.get();
    }
    if (calls_.hessian) {
      Hessian h;
      h.name = lw.name;
      h.K = K;
      h.nsamples = samples_;
      h.H.resize(size_t(K) * size_t(K));
      TL_CUDA_THROW(cudaMemcpy(h.H.data(), H, h.H.size() * 4, cudaMemcpyDeviceToHost));
      calls_.hessian(h);
    }
    if (calls_.started) calls_.started(lw.name);
    const auto t0 = Clock::now();
    GptqGpuTimes gt;
    if (!w32 && lw.W.empty()) throw Error("internal: no fp32 values left for GPTQ (freed at upload)", "", lw.name);
    GptqResult r = w32 ? gptq_.quantize_resident(w32, lw.K, lw.N, H, calls_.options(lw.name, lw.K), w_hat, &gt)
                       : gptq_.quantize(lw.W.data(), lw.K, lw.N, H, calls_.options(lw.name, lw.K), w_hat, &gt);
    t_.cholesky += gt.cholesky;
    t_.sweep += gt.sweep;
    calls_.quantized(lw.name, std::move(r), samples_, since(t0));
  }

  GpuGptq& gptq_;
  const ModelSource& src_;
  const ModelConfig& c_;
  const std::set<std::string>& selected_;
  const SequentialCalls& calls_;
  GptqPhaseTimes& t_;
  cublasHandle_t blas_ = nullptr;
  std::vector<cudaEvent_t> events_;  // pairs around the Hessian GEMMs of the current pass
  size_t events_used_ = 0;
  int T_ = 0;
  int64_t n_seq_ = 0, wpc_ = 1;
  int samples_ = 1;
  ChunkBuffers chunk_;
  std::unique_ptr<Activations> acts_;
  DeviceBuffer<float> staging_, hess_copy_;
  std::vector<DeviceBuffer<float>> hess_;
  std::vector<int> slot_dim_;
};

}  // namespace

void run_sequential_calibration(GpuGptq& gptq, const ModelSource& src, const std::set<std::string>& selected,
                                const SequentialCalls& calls, GptqPhaseTimes& times, const std::vector<int32_t>& tokens,
                                int64_t seq_len, int64_t n_seq, bool activations_on_host) {
  Run run(gptq, src, selected, calls, times);
  run.go(tokens, seq_len, n_seq, activations_on_host);
}

}  // namespace tl::gpu
