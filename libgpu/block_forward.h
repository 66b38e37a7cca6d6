// One TinyLoop block on the GPU (the op sequence of libconvert/model_forward.h's run_block), the
// one place it is written: the e2e tier's GpuModel and the GPU calibration of gptq-quantize
// both call it, each with its own linear layers (quant_gemm paths / fp16 weights + Hessian
// hooks). fp16 activations feed the GEMMs; the residual stream x and all other math are fp32.
//
//   h = rms(x) * attn_norm;  qkv = h W0;  q, k = rope(q, k);  att = softmax(q k^T) v
//   x += att W1;  h = rms(x) * mlp_norm;  gate = h W2;  up = h W3;  gate = silu(gate) * up
//   x += gate W4                                   (W0..W4: kBlockLinearNames order)
// Only in a CUDA build.
#pragma once

#include <cstdint>
#include <functional>

#include <cuda_fp16.h>

#include "formats/model_config.h"

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

// Y [M, N] = X [M, K] * W_i for the block's linear i (0..4, kBlockLinearNames order).
using BlockLinear = std::function<void(int i, const __half* X, __half* Y, int M)>;

// x <- block(x) over n_seq sequences of T tokens; attn_norm, mlp_norm: device fp32 [D].
// Throws tl::Error when an op refuses the shape or CUDA fails.
void block_forward(const ModelConfig& c, const float* attn_norm, const float* mlp_norm, const BlockBuffers& b,
                   int n_seq, int T, const BlockLinear& linear);

}  // namespace tl::gpu
