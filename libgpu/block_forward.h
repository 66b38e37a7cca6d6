// One TinyLoop block on the GPU (the op sequence of libconvert/model_forward.h's run_block), the
// one place it is written: the e2e tier's GpuModel and the GPU calibration of gptq-quantize
// both call it, each with its own linear layers (quant_gemm paths / fp16 weights + Hessian
// hooks). fp16 activations feed the GEMMs; the residual stream x and all other math are fp32.
//
//   h = rms(x) * attn_norm;  qkv = h W0 + b0;  [qk_norm: q, k heads = rms(head) * gain]
//   q, k = rope(q, k);  att = softmax(q k^T) v  [within the block's sliding window]
//   x += att W1 + b1;  h = rms(x) * mlp_norm;  gate = h W2 + b2;  up = h W3 + b3
//   gate = silu(gate) * up;  x += gate W4 + b4    (W0..W4: kBlockLinearNames order; a bias
//                                                  only where the config has it)
// ForwardMode (libconvert/model_forward.h): kPrefill runs each linear once on the n_seq * T rows
// (sequence-major, row s * T + t); kDecode holds the rows position-major (row t * n_seq + s) and
// runs each linear once per position on its n_seq rows (M = n_seq: the decode kernel), the
// row-wise ops once on all rows, attention over each position's keys.
// Only in a CUDA build.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <cuda_fp16.h>

#include "cuda/device_buffer.h"
#include "formats/model_config.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"

namespace tl::gpu {

// Device buffers for `rows` = n_seq * T rows (the caller sizes them: block_buffer_elements).
struct BlockBuffers {
  float* x = nullptr;                        // [rows, D] residual stream, updated in place
  __half *h = nullptr, *qkv = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr,
         *y = nullptr, *gate = nullptr, *up = nullptr;
  const float *cos_tab = nullptr, *sin_tab = nullptr;  // [T, d_head / 2] (rope_tables)
};

// Elements of each fp16 buffer for `rows` rows: h / y [rows, D], qkv, q / att [rows, H dh],
// k / v [rows, Hkv dh], gate / up [rows, FFN].
struct BlockBufferSizes {
  int64_t h, qkv, q, kv, gate;
};
BlockBufferSizes block_buffer_elements(const ModelConfig& c, int64_t rows);

// Y [M, N] = X [M, K] * W_i for the block's linear i (0..4, kBlockLinearNames order), without
// its bias (block_forward adds it).
using BlockLinear = std::function<void(int i, const __half* X, __half* Y, int M)>;
// The MLP's pair in one call: Y [M, F] = silu(X W2 + bias_gate) * (X W3 + bias_up) (biases fp32
// [F] or nullptr), up_scratch [M, F] free for its use (cuda::quant_swiglu).
using BlockSwiglu = std::function<void(const __half* X, __half* Y, __half* up_scratch, const float* bias_gate,
                                       const float* bias_up, int M)>;

// A block's parameters besides its linear weights, device fp32 (null where the config has none).
struct BlockParams {
  const float *attn_norm = nullptr, *mlp_norm = nullptr;  // [D]
  const float* bias[5] = {};                              // [N_i], kBlockLinearNames order
  const float *q_norm = nullptr, *k_norm = nullptr;       // [dh] (qk_norm)
  int window = 0;                                         // sliding attention window, 0: none
};

// Device copies of a block's parameters besides its linear weights (norms, biases, q/k norms)
// and its window, for both callers of block_forward.
class BlockParamBuffers {
 public:
  BlockParamBuffers() = default;
  BlockParamBuffers(const ModelConfig& c, const BlockWeights& b);
  const BlockParams& params() const { return p_; }
  uint64_t bytes() const;

 private:
  std::vector<cuda::DeviceBuffer<float>> bufs_;
  BlockParams p_;
};

// The RoPE cos / sin tables of the config for positions < T (rope_tables of rope_inv_freqs),
// uploaded into cos_tab / sin_tab [T, dh / 2].
void upload_rope_tables(const ModelConfig& c, int T, cuda::DeviceBuffer<float>& cos_tab,
                        cuda::DeviceBuffer<float>& sin_tab);

// Which attention kernel a forward runs: the fp32 one (cuda::causal_attention: the e2e tier's
// reference forward) or the tensor-core one (cuda::causal_attention_tc: gptq-quantize's
// calibration, where its error bound is far below the fp16 rounding of the activations the
// Hessians are made of). kTensorCore runs the fp32 kernel for a head size the tensor-core kernel
// does not take (attention_tc_supports).
enum class AttentionKernel { kFp32, kTensorCore };

// x <- block(x) over n_seq sequences of T tokens, rows in the mode's order. Throws tl::Error
// when an op refuses the shape or CUDA fails.
// swiglu: the MLP's gate, up and SwiGLU through one call (null: linear 2 and 3, their biases,
// then swiglu_inplace).
void block_forward(const ModelConfig& c, const BlockParams& p, const BlockBuffers& b, int n_seq, int T,
                   const BlockLinear& linear, ForwardMode mode = ForwardMode::kPrefill,
                   const BlockSwiglu& swiglu = nullptr, AttentionKernel attention = AttentionKernel::kFp32);

// The mode's linear: Y [n_seq * T, N] = X [n_seq * T, K] * W, once (prefill) or once per position
// on its n_seq contiguous rows (decode, position-major rows). linear(X, Y, M) runs one GEMM.
void mode_linear(ForwardMode mode, int n_seq, int T, int64_t K, int64_t N, const __half* X, __half* Y,
                 const std::function<void(const __half* X, __half* Y, int M)>& linear);

}  // namespace tl::gpu
