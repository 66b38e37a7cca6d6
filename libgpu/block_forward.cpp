#include "libgpu/block_forward.h"
#include "libgpu/launch_check.h"

#include <string>

#include "core/error.h"
#include "cuda/model_ops.h"
#include "cuda/tl_kernels.h"

namespace tl::gpu {

namespace {


}  // namespace

BlockBufferSizes block_buffer_elements(const ModelConfig& c, int64_t rows) {
  return {rows * c.d_model, rows * (c.n_heads + 2 * c.n_kv_heads) * c.d_head, rows * c.n_heads * c.d_head,
          rows * c.n_kv_heads * c.d_head, rows * c.ffn};
}

void block_forward(const ModelConfig& c, const float* attn_norm, const float* mlp_norm, const BlockBuffers& b,
                   int n_seq, int T, const BlockLinear& linear) {
  const int M = n_seq * T, D = int(c.d_model), H = int(c.n_heads), Hkv = int(c.n_kv_heads);
  const int dh = int(c.d_head);
  const int64_t F = c.ffn;
  const float eps = float(c.norm_eps);
  check_launch(cuda::rms_norm_rows(b.x, attn_norm, b.h, M, D, eps, nullptr), "rms_norm attn");
  linear(0, b.h, b.qkv, M);
  check_launch(cuda::qkv_split_rope(b.qkv, b.cos_tab, b.sin_tab, b.q, b.k, b.v, n_seq, T, H, Hkv, dh, nullptr),
           "qkv_split_rope");
  check_launch(cuda::causal_attention(b.q, b.k, b.v, b.att, n_seq, T, H, Hkv, dh, nullptr),
           "causal_attention (d_head " + std::to_string(dh) + ")");
  linear(1, b.att, b.y, M);
  check_launch(cuda::residual_add(b.x, b.y, int64_t(M) * D, nullptr), "residual_add");
  check_launch(cuda::rms_norm_rows(b.x, mlp_norm, b.h, M, D, eps, nullptr), "rms_norm mlp");
  linear(2, b.h, b.gate, M);
  linear(3, b.h, b.up, M);
  check_launch(cuda::swiglu_inplace(b.gate, b.up, int64_t(M) * F, nullptr), "swiglu");
  linear(4, b.gate, b.y, M);
  check_launch(cuda::residual_add(b.x, b.y, int64_t(M) * D, nullptr), "residual_add");
}

}  // namespace tl::gpu
