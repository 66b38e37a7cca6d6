// GPU ops of the TinyLoop forward (libgpu/block_forward.cpp: the e2e tier's model runner and
// gptq-quantize's GPU calibration), besides the linear layers, which go through quant_gemm
// (tl_kernels.h) or cuBLAS. fp16 storage of activations that feed GEMMs, fp32 residual stream
// and fp32 math everywhere. The CPU reference of every op is libconvert/model_forward.cpp (the
// forward) and libverify/perplexity.cpp (row statistics); tests/cuda/test_model_*.cpp compare
// them. Launchers return an Rc (tl_kernels.h): kOk, kShapeUnsupported for a size the kernel
// does not take, kCudaError after recording the failing call (cuda_errors.h).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace tl::cuda {

// The order of an activation matrix's rows for n_seq sequences of T tokens: sequence-major
// (row s * T + t: the prefill forward) or position-major (row t * n_seq + s: the decode forward,
// where the n_seq rows of one position are contiguous, so that every linear runs on them at
// M = n_seq as a runtime generating n_seq sequences does). Only the ops that map a row to its
// (sequence, position) take it; the row-wise ops do not care.
enum class RowOrder { kSequenceMajor, kPositionMajor };

// The float element types a dense weight is stored in (cuda/ knows no file format: the caller maps
// its dtype here).
enum class WeightElem { kF32, kF16, kBF16 };
// dst [K, N] fp16 (row-major) = fp16(src), round to nearest even: src [K, N] or, transposed,
// PyTorch's [N, K]. The values the host's float_to_half of the widened weight gives, bit for bit, for
// every finite value and +-Inf (a NaN comes out a NaN, not its payload; weights are checked finite)
// (bf16 and fp32 widen exactly; one rounding). The e2e tier converts dense weights on the GPU.
int weight_to_half(const void* src, WeightElem elem, bool transposed, int64_t K, int64_t N, __half* dst,
                   cudaStream_t stream);

// x[r, :] = float(table[tokens[r], :]); table fp16 [vocab, D]. Ids are checked by the caller.
int embed_gather(const __half* table, const int32_t* tokens, float* x, int rows, int D,
                 cudaStream_t stream);

// out[r, :] = half(x[r, :] / sqrt(mean(x[r, :]^2) + eps) * gain), gain fp32 [D].
int rms_norm_rows(const float* x, const float* gain, __half* out, int rows, int D, float eps,
                  cudaStream_t stream);

// Splits the fused projection qkv [n_seq * T, (H + 2 Hkv) dh] (q | k | v per row, in `order`) into
// head-major q [n_seq, H, T, dh], k, v [n_seq, Hkv, T, dh] and applies RoPE to q and k in the HF
// rotate_half convention: pairs (i, i + dh/2) rotated by the angle whose cos / sin are
// cos_tab / sin_tab [T, dh/2] (fp32, built on the host from the same function the CPU forward
// uses, so both sides see identical angles). dh even.
int qkv_split_rope(const __half* qkv, const float* cos_tab, const float* sin_tab, __half* q,
                   __half* k, __half* v, int n_seq, int T, int H, int Hkv, int dh, RowOrder order,
                   cudaStream_t stream);

// Qwen3's q_norm / k_norm, in place on the fused projection qkv [rows, (H + 2 Hkv) dh]: each of
// the H query heads and Hkv key heads of a row becomes rms(head) * q_gain / k_gain (fp32 [dh],
// fp32 math, one warp per head); v is untouched. Runs before qkv_split_rope.
int head_rms_norm(__half* qkv, const float* q_gain, const float* k_gain, int rows, int H, int Hkv,
                  int dh, float eps, cudaStream_t stream);

// out [n_seq * T, H dh] (rows in `order`) = softmax(q k^T / sqrt(dh), causal) v per (sequence,
// head), from the head-major q, k, v of qkv_split_rope; query head
// h reads kv head h / (H / Hkv). window > 0: query i sees only keys i - window < j <= i (the
// sliding window of Mistral / Qwen2); 0: the whole causal prefix. Any even dh from 2 to 256
// (else kShapeUnsupported).
int causal_attention(const __half* q, const __half* k, const __half* v, __half* out, int n_seq,
                     int T, int H, int Hkv, int dh, int window, RowOrder order, cudaStream_t stream);

// The same on the tensor cores (attention_tc.cu), for gptq-quantize's calibration forward: the
// scores and the softmax as above (fp16 products, fp32 sums and exponentials), the probabilities
// rounded to fp16 for the P V product (fp32 sums), the row sums from the unrounded ones. Against
// causal_attention: |out - out_fp32| <= (2^-11 + T 2^-25) max |v| + both outputs' fp16 rounding
// (docs/gptq.md, "GPU"). dh in {32, 64, 96, 128} (attention_tc_supports), else kShapeUnsupported.
bool attention_tc_supports(int dh);
int causal_attention_tc(const __half* q, const __half* k, const __half* v, __half* out, int n_seq,
                        int T, int H, int Hkv, int dh, int window, RowOrder order, cudaStream_t stream);

// y[r, n] = half(float(y[r, n]) + bias[n]) over rows x N (a linear's bias, fp32 [N], added once
// after the GEMM and, on the Marlin path, after its delta correction).
int add_bias_rows(__half* y, const float* bias, int64_t rows, int64_t N, cudaStream_t stream);

// gate[i] = half(silu(gate[i]) * up[i]), in place over n elements.
int swiglu_inplace(__half* gate, const __half* up, int64_t n, cudaStream_t stream);
// gate[r, n] = half(silu(g) * u), g = float(gate[r, n]) + bias_gate[n], u = float(up[r, n]) +
// bias_up[n] (fp32 [F] biases, either nullptr: none), in place over rows x F: the MLP's gate and up
// biases and its SwiGLU in one pass (the unfused sequence of marlin_swiglu_asymmetric).
int swiglu_bias_rows(__half* gate, const __half* up, const float* bias_gate, const float* bias_up, int64_t rows,
                     int64_t F, cudaStream_t stream);

// x[i] += float(y[i]) over n elements.
int residual_add(float* x, const __half* y, int64_t n, cudaStream_t stream);

// Per row of logits [rows, V] (fp16): lse = log sum exp (fp32, max-shifted), argmax (lowest index
// of the max), and target_logit = logits[r, targets[r]] (0 where targets[r] < 0).
int logits_row_stats(const __half* logits, const int32_t* targets, int rows, int V, float* lse,
                     int32_t* argmax, float* target_logit, cudaStream_t stream);

// kld[r] = KL(P_ref || P) = sum_v p_ref (log p_ref - log p) per row, from logits and their lse.
int kld_rows(const __half* ref, const float* ref_lse, const __half* x, const float* lse, int rows,
             int V, float* kld, cudaStream_t stream);

}  // namespace tl::cuda
