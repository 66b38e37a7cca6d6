#include "libconvert/model_forward.h"

#include <cmath>

#include "core/error.h"
#include "libconvert/eigen_blocking.h"

namespace tl {
namespace {

using ConstWeightMap = Eigen::Map<const ActMatrix>;

// Y = X W with the hook told about X first.
void linear(const LinearWeight& l, const ActMatrix& X, ActMatrix& Y, const LinearInputHook& hook) {
  if (X.cols() != l.K)
    throw Error("input has " + std::to_string(X.cols()) + " columns, expected K = " + std::to_string(l.K), "", l.name);
  if (hook) hook(l.name, X.data(), X.rows(), X.cols());
  pin_eigen_blocking();  // the same summation order on every CPU
  Y.noalias() = X * ConstWeightMap(l.W.data(), l.K, l.N);
}

// Causal multi-head attention with GQA on one block's fused q|k|v projection (RoPE applied here).
// qkv: [rows, (H + 2 Hkv) dh]; out: [rows, H dh].
void attention(const ModelConfig& c, ActMatrix& qkv, int64_t seq_len, ActMatrix& out) {
  const int64_t H = c.n_heads, Hkv = c.n_kv_heads, dh = c.d_head;
  const int64_t rows = qkv.rows(), n_seq = rows / seq_len, group = H / Hkv;
  const int64_t k_off = H * dh, v_off = (H + Hkv) * dh;
  // cos/sin per (position, pair), the same values apply_rope computes, built once per call.
  const int64_t half = dh / 2;
  std::vector<float> cs, sn;
  rope_tables(seq_len, dh, c.rope_theta, &cs, &sn);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = r % seq_len;
    const float* cp = &cs[size_t(pos * half)];
    const float* sp = &sn[size_t(pos * half)];
    for (int64_t h = 0; h < H + Hkv; ++h) {
      float* v = &qkv(r, h * dh);
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cp[i] - b * sp[i];
        v[i + half] = b * cp[i] + a * sp[i];
      }
    }
  }
  out.resize(rows, H * dh);
  const float scale = float(1.0 / std::sqrt(double(dh)));
  ActMatrix q(seq_len, dh), k(seq_len, dh), v(seq_len, dh), s(seq_len, seq_len);
  for (int64_t b = 0; b < n_seq; ++b) {
    const int64_t r0 = b * seq_len;
    for (int64_t kvh = 0; kvh < Hkv; ++kvh) {
      k = qkv.block(r0, k_off + kvh * dh, seq_len, dh);
      v = qkv.block(r0, v_off + kvh * dh, seq_len, dh);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        q = qkv.block(r0, h * dh, seq_len, dh);
        s.noalias() = (q * k.transpose()) * scale;
        for (int64_t i = 0; i < seq_len; ++i) {
          // Row i sees keys 0..i; the rest get probability 0.
          const float m = s.row(i).head(i + 1).maxCoeff();
          double sum = 0;
          for (int64_t j = 0; j <= i; ++j) {
            const float e = std::exp(s(i, j) - m);
            s(i, j) = e;
            sum += e;
          }
          const float inv = float(1.0 / sum);
          for (int64_t j = 0; j <= i; ++j) s(i, j) *= inv;
          for (int64_t j = i + 1; j < seq_len; ++j) s(i, j) = 0.f;
        }
        out.block(r0, h * dh, seq_len, dh).noalias() = s * v;
      }
    }
  }
}

}  // namespace

float rope_inv_freq(int64_t i, int64_t dh, double theta) {
  // As HF: exponent (2i)/dh in float32, pow in float32, reciprocal in float32.
  const float e = float(2 * i) / float(dh);
  const float p = float(std::pow(double(float(theta)), double(e)));
  return 1.0f / p;
}

void rope_tables(int64_t T, int64_t dh, double theta, std::vector<float>* cos_tab,
                 std::vector<float>* sin_tab) {
  const int64_t half = dh / 2;
  cos_tab->resize(size_t(T * half));
  sin_tab->resize(size_t(T * half));
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float ang = float(p) * rope_inv_freq(i, dh, theta);
      (*cos_tab)[size_t(p * half + i)] = std::cos(ang);
      (*sin_tab)[size_t(p * half + i)] = std::sin(ang);
    }
}

void apply_rope(float* v, int64_t dh, int64_t pos, double theta) {
  const int64_t half = dh / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float ang = float(pos) * rope_inv_freq(i, dh, theta);
    const float cs = std::cos(ang), sn = std::sin(ang);
    const float a = v[i], b = v[i + half];
    v[i] = a * cs - b * sn;
    v[i + half] = b * cs + a * sn;
  }
}

void rms_norm_rows(const ActMatrix& x, const std::vector<float>& gain, double eps, ActMatrix& out) {
  out.resize(x.rows(), x.cols());
  const Eigen::Map<const Eigen::RowVectorXf> g(gain.data(), Eigen::Index(gain.size()));
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const double ms = double(x.row(r).squaredNorm()) / double(x.cols());
    const float inv = float(1.0 / std::sqrt(ms + eps));
    out.row(r) = (x.row(r) * inv).cwiseProduct(g);
  }
}

std::vector<BlockStep> block_schedule(const ModelConfig& c) {
  std::vector<BlockStep> steps;
  for (int64_t i = 0; i < c.n_pre; ++i) steps.push_back({false, i, 0, block_prefix(false, i)});
  for (int64_t it = 0; it < c.loops; ++it)
    for (int64_t j = 0; j < c.n_loop; ++j) steps.push_back({true, j, it, block_prefix(true, j)});
  return steps;
}

const BlockWeights& block_weights(const ModelWeights& w, const BlockStep& s) {
  const auto& blocks = s.loop ? w.loop : w.pre;
  if (s.index < 0 || s.index >= int64_t(blocks.size())) throw Error("no such block", "", s.prefix);
  return blocks[size_t(s.index)];
}

ActMatrix embed_tokens(const ModelWeights& w, const int32_t* tokens, int64_t rows) {
  const int64_t D = w.config.d_model, V = w.config.vocab;
  ActMatrix x(rows, D);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = tokens[r];
    if (t < 0 || t >= V)
      throw Error("token id " + std::to_string(t) + " outside [0, " + std::to_string(V) + ")", "",
                  "token " + std::to_string(r));
    x.row(r) = Eigen::Map<const Eigen::RowVectorXf>(&w.embed[size_t(t * D)], D);
  }
  return x;
}

void run_block(const ModelConfig& c, const BlockWeights& b, ActMatrix& x, int64_t seq_len,
               const LinearInputHook& hook) {
  if (seq_len <= 0 || x.rows() % seq_len != 0)
    throw Error(std::to_string(x.rows()) + " rows are not whole sequences of " + std::to_string(seq_len), "", b.prefix);
  ActMatrix h, qkv, attn, y, gate, up;
  rms_norm_rows(x, b.attn_norm, c.norm_eps, h);
  linear(b.attn_qkv, h, qkv, hook);
  attention(c, qkv, seq_len, attn);
  linear(b.attn_out, attn, y, hook);
  x += y;
  rms_norm_rows(x, b.mlp_norm, c.norm_eps, h);
  linear(b.mlp_gate, h, gate, hook);
  linear(b.mlp_up, h, up, hook);
  // SwiGLU: silu(g) * u, silu(g) = g / (1 + e^-g).
  gate = gate.unaryExpr([](float g) { return g / (1.0f + std::exp(-g)); }).cwiseProduct(up);
  linear(b.mlp_down, gate, y, hook);
  x += y;
}

ActMatrix final_logits(const ModelWeights& w, const ActMatrix& x, const LinearInputHook& hook) {
  ActMatrix h, logits;
  rms_norm_rows(x, w.final_norm, w.config.norm_eps, h);
  linear(w.head, h, logits, hook);
  return logits;
}

ActMatrix forward_logits(const ModelWeights& w, const int32_t* tokens, int64_t n_seq,
                         int64_t seq_len, const LinearInputHook& hook) {
  ActMatrix x = embed_tokens(w, tokens, n_seq * seq_len);
  for (const BlockStep& s : block_schedule(w.config)) run_block(w.config, block_weights(w, s), x, seq_len, hook);
  return final_logits(w, x, hook);
}

}  // namespace tl
