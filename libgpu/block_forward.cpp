#include "libgpu/block_forward.h"
#include "libgpu/launch_check.h"

#include <string>

#include "core/error.h"
#include "cuda/model_ops.h"
#include "cuda/tl_kernels.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"

namespace tl::gpu {

BlockParamBuffers::BlockParamBuffers(const ModelConfig& c, const BlockWeights& b) {
  bufs_.reserve(9);
  auto dev = [&](const std::vector<float>& v) -> const float* {
    if (v.empty()) return nullptr;
    bufs_.emplace_back(v);
    return bufs_.back().get();
  };
  p_.attn_norm = dev(b.attn_norm);
  p_.mlp_norm = dev(b.mlp_norm);
  for (int i = 0; i < 5; ++i) p_.bias[i] = dev(b.linear(kBlockLinearNames[i])->bias);
  p_.q_norm = dev(b.q_norm);
  p_.k_norm = dev(b.k_norm);
  p_.window = int(block_window(c, b.prefix));
}

uint64_t BlockParamBuffers::bytes() const {
  uint64_t n = 0;
  for (const auto& b : bufs_) n += b.bytes();
  return n;
}

void upload_rope_tables(const ModelConfig& c, int T, cuda::DeviceBuffer<float>& cos_tab,
                        cuda::DeviceBuffer<float>& sin_tab) {
  std::vector<float> cs, sn;
  rope_tables(T, rope_inv_freqs(c), &cs, &sn);
  cos_tab.resize(cs.size());
  sin_tab.resize(sn.size());
  cos_tab.upload(cs);
  sin_tab.upload(sn);
}

BlockBufferSizes block_buffer_elements(const ModelConfig& c, int64_t rows) {
  return {rows * c.d_model, rows * (c.n_heads + 2 * c.n_kv_heads) * c.d_head, rows * c.n_heads * c.d_head,
          rows * c.n_kv_heads * c.d_head, rows * c.ffn};
}

void mode_linear(ForwardMode mode, int n_seq, int T, int64_t K, int64_t N, const __half* X, __half* Y,
                 const std::function<void(const __half* X, __half* Y, int M)>& linear) {
  if (mode == ForwardMode::kPrefill) {
    linear(X, Y, n_seq * T);
    return;
  }
  for (int t = 0; t < T; ++t) linear(X + int64_t(t) * n_seq * K, Y + int64_t(t) * n_seq * N, n_seq);
}

void block_forward(const ModelConfig& c, const BlockParams& p, const BlockBuffers& b, int n_seq, int T,
                   const BlockLinear& linear, ForwardMode mode, const BlockSwiglu& swiglu, AttentionKernel attention) {
  const int M = n_seq * T, D = int(c.d_model), H = int(c.n_heads), Hkv = int(c.n_kv_heads);
  const int dh = int(c.d_head);
  const int64_t F = c.ffn, qkv_n = int64_t(H + 2 * Hkv) * dh;
  const int64_t out_n[5] = {qkv_n, D, F, F, D}, in_k[5] = {D, int64_t(H) * dh, D, D, F};
  const cuda::RowOrder order = mode == ForwardMode::kDecode ? cuda::RowOrder::kPositionMajor
                                                            : cuda::RowOrder::kSequenceMajor;
  const float eps = float(c.norm_eps);
  // The linear, then its bias: once, after the whole product (on the Marlin path after its
  // delta correction too).
  auto linear_bias = [&](int i, const __half* X, __half* Y) {
    mode_linear(mode, n_seq, T, in_k[i], out_n[i], X, Y,
                [&](const __half* x, __half* y, int rows) { linear(i, x, y, rows); });
    if (p.bias[i]) check_launch(cuda::add_bias_rows(Y, p.bias[i], M, out_n[i], nullptr), kBlockLinearNames[i]);
  };
  check_launch(cuda::rms_norm_rows(b.x, p.attn_norm, b.h, M, D, eps, nullptr), "rms_norm attn");
  linear_bias(0, b.h, b.qkv);
  if (p.q_norm)
    check_launch(cuda::head_rms_norm(b.qkv, p.q_norm, p.k_norm, M, H, Hkv, dh, eps, nullptr), "head_rms_norm");
  check_launch(cuda::qkv_split_rope(b.qkv, b.cos_tab, b.sin_tab, b.q, b.k, b.v, n_seq, T, H, Hkv, dh, order, nullptr),
           "qkv_split_rope");
  if (attention == AttentionKernel::kTensorCore && cuda::attention_tc_supports(dh))
    check_launch(cuda::causal_attention_tc(b.q, b.k, b.v, b.att, n_seq, T, H, Hkv, dh, p.window, order, nullptr),
                 "causal_attention_tc (d_head " + std::to_string(dh) + ")");
  else
    check_launch(cuda::causal_attention(b.q, b.k, b.v, b.att, n_seq, T, H, Hkv, dh, p.window, order, nullptr),
                 "causal_attention (d_head " + std::to_string(dh) + ")");
  linear_bias(1, b.att, b.y);
  check_launch(cuda::residual_add(b.x, b.y, int64_t(M) * D, nullptr), "residual_add");
  check_launch(cuda::rms_norm_rows(b.x, p.mlp_norm, b.h, M, D, eps, nullptr), "rms_norm mlp");
  if (swiglu) {
    mode_linear(mode, n_seq, T, D, F, b.h, b.gate,
                [&](const __half* x, __half* y, int rows) { swiglu(x, y, b.up, p.bias[2], p.bias[3], rows); });
  } else {
    linear_bias(2, b.h, b.gate);
    linear_bias(3, b.h, b.up);
    check_launch(cuda::swiglu_inplace(b.gate, b.up, int64_t(M) * F, nullptr), "swiglu");
  }
  linear_bias(4, b.gate, b.y);
  check_launch(cuda::residual_add(b.x, b.y, int64_t(M) * D, nullptr), "residual_add");
}

}  // namespace tl::gpu
