#include "libconvert/model_forward.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/parallel.h"
#include "libconvert/eigen_blocking.h"

namespace tl {
namespace {

// A linear is computed in fixed tiles of its output, rows x columns, whatever the thread count:
// Eigen's GEMM does not round an element the same way in every position of a product (its
// micro-kernels and remainder paths depend on where a row or column falls), so the tiles are
// the same on one thread and on sixteen, and a forward's logits are too (tests/convert/
// test_model_forward.cpp holds them bit for bit). The tiles run on every core, except inside
// another parallel_for (the CPU e2e's windows already use every core).
constexpr int64_t kLinearRowTile = 256, kLinearColumnTile = 512;

// Y = X W (+ bias) with the hook told about X first. kDecode: once per position t of seq_len on
// the rows s * seq_len + t of every sequence s (M = n_seq; strided views, no copies).
void linear(const LinearWeight& l, const ActMatrix& X, ActMatrix& Y, const LinearInputHook& hook,
            ForwardMode mode = ForwardMode::kPrefill, int64_t seq_len = 0) {
  if (X.cols() != l.K)
    throw Error("input has " + std::to_string(X.cols()) + " columns, expected K = " + std::to_string(l.K), "", l.name);
  pin_eigen_blocking();  // the same summation order on every CPU
  using Stride = Eigen::OuterStride<>;
  Y.resize(X.rows(), l.N);
  // Y[rows, n0:n1] = X[rows] W[:, n0:n1] for rows r0, r0 + step, ... (`rows` of them).
  auto tile = [&](int64_t r0, int64_t rows, int64_t step, int64_t n0, int64_t n1) {
    const Eigen::Map<const ActMatrix, 0, Stride> Xr(X.data() + r0 * l.K, rows, l.K, Stride(step * l.K));
    Eigen::Map<ActMatrix, 0, Stride> Yr(Y.data() + r0 * l.N + n0, rows, n1 - n0, Stride(step * l.N));
    const Eigen::Map<const ActMatrix, 0, Stride> Wc(l.W.data() + n0, l.K, n1 - n0, Stride(l.N));
    Yr.noalias() = Xr * Wc;
  };
  // Every tile of `rows` rows (r0, r0 + step, ...): in parallel unless nested.
  auto tiles = [&](int64_t r0, int64_t rows, int64_t step) {
    const int64_t row_tiles = (rows + kLinearRowTile - 1) / kLinearRowTile;
    const int64_t col_tiles = (l.N + kLinearColumnTile - 1) / kLinearColumnTile, n = row_tiles * col_tiles;
    auto run = [&](int64_t i) {
      const int64_t rt = i / col_tiles, ct = i % col_tiles;
      const int64_t rr = std::min(kLinearRowTile, rows - rt * kLinearRowTile);
      tile(r0 + rt * kLinearRowTile * step, rr, step, ct * kLinearColumnTile, std::min(l.N, (ct + 1) * kLinearColumnTile));
    };
    if (n < 2 || in_parallel_worker())
      for (int64_t i = 0; i < n; ++i) run(i);
    else
      parallel_for(n, resolve_threads(0), run);
  };
  if (mode == ForwardMode::kPrefill) {
    if (hook) hook(l.name, X.data(), X.rows(), X.cols());
    tiles(0, X.rows(), 1);
  } else {
    if (hook) throw Error("a decode-mode forward reports no linear inputs", "", l.name);
    if (seq_len <= 0 || X.rows() % seq_len != 0) throw Error("rows are not whole sequences", "", l.name);
    const int64_t n_seq = X.rows() / seq_len;
    for (int64_t t = 0; t < seq_len; ++t) tiles(t, n_seq, seq_len);
  }
  if (!l.bias.empty()) Y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(l.bias.data(), l.N);
}

// Qwen3's q_norm / k_norm: RMSNorm over each head vector (dh values at v) with gain g.
void head_rms_norm(float* v, const std::vector<float>& g, int64_t dh, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < dh; ++i) ss += double(v[i]) * double(v[i]);
  const float inv = float(1.0 / std::sqrt(ss / double(dh) + eps));
  for (int64_t i = 0; i < dh; ++i) v[i] = g[size_t(i)] * (v[i] * inv);
}

// Causal multi-head attention with GQA on one block's fused q|k|v projection (q/k norms and
// RoPE applied here); `window` > 0: query i sees keys i - window < j <= i.
// qkv: [rows, (H + 2 Hkv) dh]; out: [rows, H dh].
void attention(const ModelConfig& c, const BlockWeights& b, ActMatrix& qkv, int64_t seq_len, int64_t window,
               ActMatrix& out) {
  const int64_t H = c.n_heads, Hkv = c.n_kv_heads, dh = c.d_head;
  const int64_t rows = qkv.rows(), n_seq = rows / seq_len, group = H / Hkv;
  const int64_t k_off = H * dh, v_off = (H + Hkv) * dh;
  // cos/sin per (position, pair), built once per call.
  const int64_t half = dh / 2;
  std::vector<float> cs, sn;
  rope_tables(seq_len, rope_inv_freqs(c), &cs, &sn);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = r % seq_len;
    const float* cp = &cs[size_t(pos * half)];
    const float* sp = &sn[size_t(pos * half)];
    for (int64_t h = 0; h < H + Hkv; ++h) {
      float* v = &qkv(r, h * dh);
      if (c.qk_norm) head_rms_norm(v, h < H ? b.q_norm : b.k_norm, dh, c.norm_eps);
      for (int64_t i = 0; i < half; ++i) {
        const float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * cp[i] - x1 * sp[i];
        v[i + half] = x1 * cp[i] + x0 * sp[i];
      }
    }
  }
  out.resize(rows, H * dh);
  const float scale = float(1.0 / std::sqrt(double(dh)));
  ActMatrix q(seq_len, dh), k(seq_len, dh), v(seq_len, dh), s(seq_len, seq_len);
  for (int64_t sq = 0; sq < n_seq; ++sq) {
    const int64_t r0 = sq * seq_len;
    for (int64_t kvh = 0; kvh < Hkv; ++kvh) {
      k = qkv.block(r0, k_off + kvh * dh, seq_len, dh);
      v = qkv.block(r0, v_off + kvh * dh, seq_len, dh);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        q = qkv.block(r0, h * dh, seq_len, dh);
        s.noalias() = (q * k.transpose()) * scale;
        for (int64_t i = 0; i < seq_len; ++i) {
          // Row i sees keys j0..i (j0 = 0 without a window); the rest get probability 0.
          const int64_t j0 = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
          const float m = s.row(i).segment(j0, i - j0 + 1).maxCoeff();
          double sum = 0;
          for (int64_t j = j0; j <= i; ++j) {
            const float e = std::exp(s(i, j) - m);
            s(i, j) = e;
            sum += e;
          }
          const float inv = float(1.0 / sum);
          for (int64_t j = 0; j < j0; ++j) s(i, j) = 0.f;
          for (int64_t j = j0; j <= i; ++j) s(i, j) *= inv;
          for (int64_t j = i + 1; j < seq_len; ++j) s(i, j) = 0.f;
        }
        out.block(r0, h * dh, seq_len, dh).noalias() = s * v;
      }
    }
  }
}

// The angle table HF Llama computes in float32: inv_freq[i] = 1 / theta^(2i/dh).
float rope_inv_freq(int64_t i, int64_t dh, double theta) {
  // As HF: exponent (2i)/dh in float32, pow in float32, reciprocal in float32.
  const float e = float(2 * i) / float(dh);
  const float p = float(std::pow(double(float(theta)), double(e)));
  return 1.0f / p;
}

}  // namespace

const char* forward_mode_name(ForwardMode m) { return m == ForwardMode::kDecode ? "decode" : "prefill"; }

std::vector<float> rope_inv_freqs(const ModelConfig& c) {
  const int64_t half = c.d_head / 2;
  std::vector<float> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) f[size_t(i)] = rope_inv_freq(i, c.d_head, c.rope_theta);
  const float factor = float(c.rope_factor);
  if (c.rope_type == "linear") {
    for (float& x : f) x = x / factor;
  } else if (c.rope_type == "llama3") {
    // transformers' _compute_llama3_parameters, step by step in float32 (a Python scalar over a
    // tensor is the tensor's reciprocal times the scalar): wavelengths above the original
    // context / low_freq_factor are slowed by `factor`, those below context / high_freq_factor
    // kept, the band between blended linearly in context / wavelength.
    const double old_ctx = double(c.rope_original_max_seq);
    const float low_wl = float(old_ctx / c.rope_low_freq_factor), high_wl = float(old_ctx / c.rope_high_freq_factor);
    const float lo = float(c.rope_low_freq_factor), span = float(c.rope_high_freq_factor - c.rope_low_freq_factor);
    for (float& x : f) {
      const float wavelen = (1.0f / x) * float(2.0 * M_PI);
      const float scaled = wavelen > low_wl ? x / factor : x;
      const float smooth = ((1.0f / wavelen) * float(old_ctx) - lo) / span;
      const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
      const bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
      x = medium ? smoothed : scaled;
    }
  }
  return f;
}

void rope_tables(int64_t T, const std::vector<float>& inv_freq, std::vector<float>* cos_tab,
                 std::vector<float>* sin_tab) {
  const int64_t half = int64_t(inv_freq.size());
  cos_tab->resize(size_t(T * half));
  sin_tab->resize(size_t(T * half));
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float ang = float(p) * inv_freq[size_t(i)];
      (*cos_tab)[size_t(p * half + i)] = std::cos(ang);
      (*sin_tab)[size_t(p * half + i)] = std::sin(ang);
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
               const LinearInputHook& hook, ForwardMode mode) {
  if (seq_len <= 0 || x.rows() % seq_len != 0)
    throw Error(std::to_string(x.rows()) + " rows are not whole sequences of " + std::to_string(seq_len), "", b.prefix);
  ActMatrix h, qkv, attn, y, gate, up;
  rms_norm_rows(x, b.attn_norm, c.norm_eps, h);
  linear(b.attn_qkv, h, qkv, hook, mode, seq_len);
  // Row i's scores see keys j <= i only (the rest get probability 0 before they meet v), so the
  // attention of a whole window is the attention of each position over its KV cache.
  attention(c, b, qkv, seq_len, block_window(c, b.prefix), attn);
  linear(b.attn_out, attn, y, hook, mode, seq_len);
  x += y;
  rms_norm_rows(x, b.mlp_norm, c.norm_eps, h);
  linear(b.mlp_gate, h, gate, hook, mode, seq_len);
  linear(b.mlp_up, h, up, hook, mode, seq_len);
  // SwiGLU: silu(g) * u, silu(g) = g / (1 + e^-g).
  gate = gate.unaryExpr([](float g) { return g / (1.0f + std::exp(-g)); }).cwiseProduct(up);
  linear(b.mlp_down, gate, y, hook, mode, seq_len);
  x += y;
}

ActMatrix final_logits(const ModelWeights& w, const ActMatrix& x, const LinearInputHook& hook, ForwardMode mode,
                       int64_t seq_len) {
  ActMatrix h, logits;
  rms_norm_rows(x, w.final_norm, w.config.norm_eps, h);
  linear(w.head, h, logits, hook, mode, seq_len);
  return logits;
}

ActMatrix forward_logits(const ModelWeights& w, const int32_t* tokens, int64_t n_seq,
                         int64_t seq_len, const LinearInputHook& hook, ForwardMode mode) {
  ActMatrix x = embed_tokens(w, tokens, n_seq * seq_len);
  for (const BlockStep& s : block_schedule(w.config))
    run_block(w.config, block_weights(w, s), x, seq_len, hook, mode);
  return final_logits(w, x, hook, mode, seq_len);
}

}  // namespace tl
