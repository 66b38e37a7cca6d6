// The TinyLoop forward pass on the CPU (Eigen, float32): the reference the GPU runner is checked
// against, and the engine GPTQ calibration runs on.
//
//   x = embed[tokens]                                         [rows, D], rows = n_seq * seq_len
//   for each block (n_pre distinct, then n_loop shared blocks `loops` times):
//     h = rms(x) * attn_norm
//     q | k | v = h attn_qkv (+ bias)                         (H + 2 Hkv) * dh columns
//     qk_norm: each q and k head = rms(head) * q_norm / k_norm  (Qwen3)
//     RoPE on q and k (HF Llama rotate_half: pairs (i, i + dh/2), angle pos * inv_freq[i],
//       inv_freq = rope_inv_freqs(config): theta^(-2i/dh), rescaled by rope_type)
//     a = softmax(q k^T / sqrt(dh), causal) v                 query head h reads kv head h / (H/Hkv);
//       a block with a sliding window W: query i sees keys i - W < j <= i
//     x += a attn_out (+ bias)
//     h = rms(x) * mlp_norm
//     x += (silu(h mlp_gate + b) * (h mlp_up + b)) mlp_down (+ bias)
//   logits = (rms(x) * final_norm) head                       [rows, vocab]
//
// rms(x) = x / sqrt(mean(x^2) + eps). Positions restart at 0 in every sequence.
//
// Two evaluation orders of the same function (ForwardMode):
//   prefill  every linear once on all n_seq * seq_len rows (M = n_seq * seq_len), as a runtime
//            runs a prompt;
//   decode   every linear once per position t on the n_seq rows of position t (M = n_seq), as a
//            runtime generating n_seq sequences in lockstep runs it, token by token. Attention
//            reads the keys and values of positions <= t only, exactly the KV cache a token-by-
//            token decode holds; the forward runs layer by layer (all positions of a block,
//            then the next), which gives the values a token-major decode gives with the same
//            kernels, without re-reading the cache once per token.
//
// For calibration the forward can run piece by piece (embed, one block, final) and reports the
// input of every linear weight to a hook before the product, so GPTQ can accumulate Hessians;
// a caller quantizes block i, writes W_hat into the ModelWeights and re-runs block i before
// block i + 1 is calibrated (GPTQ's sequential mode). A loop block reports its inputs on every
// iteration under the same name. Rows of x are independent across sequences, so a caller may
// run any number of sequences per call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "libconvert/model_weights.h"

namespace tl {

using ActMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Called with the full weight name ("pre.0.attn_qkv", "loop.0.mlp_down", "head") and its input
// X [rows, K] (row-major float32) just before Y = X W. mlp_gate and mlp_up see the same X.
using LinearInputHook =
    std::function<void(const std::string& name, const float* X, int64_t rows, int64_t K)>;

enum class ForwardMode { kPrefill, kDecode };
const char* forward_mode_name(ForwardMode m);  // "prefill", "decode"

// One step of the block schedule: which block runs, and which loop iteration it belongs to.
struct BlockStep {
  bool loop = false;
  int64_t index = 0;      // block index within pre or loop
  int64_t iteration = 0;  // 0 for pre blocks; 0..loops-1 for loop blocks
  std::string prefix;     // "pre.<i>" / "loop.<j>"
};

// n_pre steps, then loops x n_loop steps (iteration-major: loop.0, loop.1, loop.0, loop.1, ...).
std::vector<BlockStep> block_schedule(const ModelConfig& c);
const BlockWeights& block_weights(const ModelWeights& w, const BlockStep& s);

// x = embed[tokens] (throws tl::Error on an id outside [0, vocab)).
ActMatrix embed_tokens(const ModelWeights& w, const int32_t* tokens, int64_t rows);

// x <- block(x); rows = n_seq * seq_len, sequences contiguous (the block's attention window:
// block_window(c, b.prefix)). kDecode: the linears per position (no hook: tl::Error).
void run_block(const ModelConfig& c, const BlockWeights& b, ActMatrix& x, int64_t seq_len,
               const LinearInputHook& hook = {}, ForwardMode mode = ForwardMode::kPrefill);

// logits = (rms(x) * final_norm) head (kDecode: the head per position of seq_len).
ActMatrix final_logits(const ModelWeights& w, const ActMatrix& x, const LinearInputHook& hook = {},
                       ForwardMode mode = ForwardMode::kPrefill, int64_t seq_len = 0);

// The whole forward: tokens [n_seq, seq_len] -> logits [n_seq * seq_len, vocab] (row s * seq_len
// + t in both modes).
ActMatrix forward_logits(const ModelWeights& w, const int32_t* tokens, int64_t n_seq,
                         int64_t seq_len, const LinearInputHook& hook = {},
                         ForwardMode mode = ForwardMode::kPrefill);

// Pieces, exposed for tests and for the GPU runner's CPU references.
void rms_norm_rows(const ActMatrix& x, const std::vector<float>& gain, double eps, ActMatrix& out);
// cos / sin of pos * inv_freq[i] for pos < T, i < dh/2: [T, dh/2] each (the GPU uses these too).
void rope_tables(int64_t T, const std::vector<float>& inv_freq, std::vector<float>* cos_tab,
                 std::vector<float>* sin_tab);
// inv_freq[i], i < d_head / 2, for the config's rope_type, as transformers computes it in
// float32 (default: 1 / theta^(2i/dh); linear: / factor; llama3: the Llama 3.1 blend).
std::vector<float> rope_inv_freqs(const ModelConfig& c);

}  // namespace tl
