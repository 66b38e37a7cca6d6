// The CPU forward (libconvert/model_forward) against a naive fp64 implementation written here
// from DESIGN.md's description with plain loops, on tiny seeded random models: GQA, a loop block
// run several times, and the plain-Llama case n_loop = 0. Also the piecewise API (embed, block by
// block, final) and the linear-input hook that GPTQ calibration relies on.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "core/error.h"
#include "core/parallel.h"
#include "libconvert/model_forward.h"

namespace {

using tl::ModelConfig;
using tl::ModelWeights;

// float32 forward vs fp64 reference on O(1) activations through <= 6 blocks: each float32 dot
// product of length <= 96 carries ~1e-7 relative error and the residual stream carries it
// through the depth; measured max |err| / max |ref| is 2e-7 .. 6e-7 over these cases, so 2e-5
// is a ~30x margin, while a wrong RoPE pairing, GQA map or mask moves logits by O(0.1 - 1).
constexpr double kForwardRelTol = 2e-5;

ModelConfig tiny_config(int64_t n_pre, int64_t n_loop, int64_t loops) {
  ModelConfig c;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // GQA: two query heads per kv head
  c.d_head = 8;
  c.ffn = 48;
  c.vocab = 40;
  c.n_pre = n_pre;
  c.n_loop = n_loop;
  c.loops = loops;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_seq = 64;
  return c;
}

using Mat = std::vector<std::vector<double>>;

Mat matmul(const Mat& X, const tl::LinearWeight& l) {
  Mat Y(X.size(), std::vector<double>(size_t(l.N), 0.0));
  for (size_t r = 0; r < X.size(); ++r)
    for (int64_t n = 0; n < l.N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < l.K; ++k) s += X[r][size_t(k)] * double(l.W[size_t(k * l.N + n)]);
      Y[r][size_t(n)] = s;
    }
  return Y;
}

Mat rms(const Mat& x, const std::vector<float>& g, double eps) {
  Mat y = x;
  for (auto& row : y) {
    double ss = 0;
    for (double v : row) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / double(row.size()) + eps);
    for (size_t d = 0; d < row.size(); ++d) row[d] *= inv * double(g[d]);
  }
  return y;
}

// One sequence through one block, straight from the description (fp64 everywhere, RoPE angles
// from the exact theta^(-2i/dh)).
void ref_block(const ModelConfig& c, const tl::BlockWeights& b, Mat& x) {
  const int64_t T = int64_t(x.size()), H = c.n_heads, Hkv = c.n_kv_heads, dh = c.d_head;
  Mat h = rms(x, b.attn_norm, c.norm_eps);
  Mat qkv = matmul(h, b.attn_qkv);
  auto rope = [&](std::vector<double>& row, int64_t off, int64_t pos) {
    for (int64_t i = 0; i < dh / 2; ++i) {
      const double ang = double(pos) * std::pow(c.rope_theta, -2.0 * double(i) / double(dh));
      const double a = row[size_t(off + i)], bb = row[size_t(off + i + dh / 2)];
      row[size_t(off + i)] = a * std::cos(ang) - bb * std::sin(ang);
      row[size_t(off + i + dh / 2)] = bb * std::cos(ang) + a * std::sin(ang);
    }
  };
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hh = 0; hh < H + Hkv; ++hh) rope(qkv[size_t(t)], hh * dh, t);
  Mat att(size_t(T), std::vector<double>(size_t(H * dh), 0.0));
  for (int64_t hh = 0; hh < H; ++hh) {
    const int64_t kvh = hh / (H / Hkv);
    const int64_t qo = hh * dh, ko = H * dh + kvh * dh, vo = (H + Hkv) * dh + kvh * dh;
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> s(size_t(i + 1));
      double m = -1e300;
      for (int64_t j = 0; j <= i; ++j) {
        double d = 0;
        for (int64_t e = 0; e < dh; ++e) d += qkv[size_t(i)][size_t(qo + e)] * qkv[size_t(j)][size_t(ko + e)];
        s[size_t(j)] = d / std::sqrt(double(dh));
        m = std::max(m, s[size_t(j)]);
      }
      double z = 0;
      for (double& v : s) z += (v = std::exp(v - m));
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t e = 0; e < dh; ++e)
          att[size_t(i)][size_t(qo + e)] += s[size_t(j)] / z * qkv[size_t(j)][size_t(vo + e)];
    }
  }
  Mat o = matmul(att, b.attn_out);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < c.d_model; ++d) x[size_t(t)][size_t(d)] += o[size_t(t)][size_t(d)];
  h = rms(x, b.mlp_norm, c.norm_eps);
  Mat g = matmul(h, b.mlp_gate), u = matmul(h, b.mlp_up);
  for (size_t t = 0; t < g.size(); ++t)
    for (size_t f = 0; f < g[t].size(); ++f) g[t][f] = g[t][f] / (1.0 + std::exp(-g[t][f])) * u[t][f];
  Mat dn = matmul(g, b.mlp_down);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < c.d_model; ++d) x[size_t(t)][size_t(d)] += dn[size_t(t)][size_t(d)];
}

Mat ref_logits(const ModelWeights& w, const int32_t* tok, int64_t T) {
  const ModelConfig& c = w.config;
  Mat x(size_t(T), std::vector<double>(size_t(c.d_model)));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < c.d_model; ++d) x[size_t(t)][size_t(d)] = w.embed[size_t(tok[t] * c.d_model + d)];
  for (const auto& b : w.pre) ref_block(c, b, x);
  for (int64_t it = 0; it < c.loops; ++it)
    for (const auto& b : w.loop) ref_block(c, b, x);
  return matmul(rms(x, w.final_norm, c.norm_eps), w.head);
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, int32_t(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = d(rng);
  return t;
}

// Compares the forward's logits of n_seq sequences with the reference run per sequence.
void check_against_reference(const ModelWeights& w, int64_t n_seq, int64_t T, uint64_t seed,
                             tl::ForwardMode mode = tl::ForwardMode::kPrefill) {
  const auto tok = random_tokens(n_seq * T, w.config.vocab, seed);
  const tl::ActMatrix got = tl::forward_logits(w, tok.data(), n_seq, T, {}, mode);
  REQUIRE(got.rows() == n_seq * T);
  REQUIRE(got.cols() == w.config.vocab);
  double max_ref = 0, max_err = 0;
  int shown = 0;
  for (int64_t s = 0; s < n_seq; ++s) {
    const Mat ref = ref_logits(w, tok.data() + s * T, T);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t v = 0; v < w.config.vocab; ++v) max_ref = std::max(max_ref, std::abs(ref[size_t(t)][size_t(v)]));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t v = 0; v < w.config.vocab; ++v) {
        const double r = ref[size_t(t)][size_t(v)], g = got(s * T + t, v);
        const double e = std::abs(g - r);
        max_err = std::max(max_err, e);
        if (e > kForwardRelTol * max_ref && shown++ < 5)
          std::printf("mismatch seq %lld pos %lld vocab %lld: got %.7g ref %.7g\n", (long long)s,
                      (long long)t, (long long)v, g, r);
      }
  }
  INFO("max |err| " << max_err << " max |ref| " << max_ref);
  CHECK(max_ref > 0.1);  // the logits are not degenerate
  CHECK(max_err <= kForwardRelTol * max_ref);
}

}  // namespace

TEST_CASE("model forward: GQA + loop block matches the fp64 reference") {
  const ModelWeights w = tl::random_model_weights(tiny_config(2, 1, 3), 11);
  check_against_reference(w, 3, 17, 101);
}

TEST_CASE("model forward: two shared loop blocks, iteration-major order") {
  const ModelWeights w = tl::random_model_weights(tiny_config(1, 2, 2), 12);
  check_against_reference(w, 2, 13, 102);
}

TEST_CASE("model forward: plain Llama (n_loop = 0), MHA and single-token sequences") {
  ModelConfig c = tiny_config(2, 0, 0);
  c.n_kv_heads = c.n_heads;
  const ModelWeights w = tl::random_model_weights(c, 13);
  check_against_reference(w, 2, 9, 103);
  check_against_reference(w, 4, 1, 104);
}

TEST_CASE("model forward: sequences in a batch are independent and causal") {
  const ModelWeights w = tl::random_model_weights(tiny_config(1, 1, 2), 14);
  const int64_t T = 12;
  auto tok = random_tokens(2 * T, w.config.vocab, 105);
  const tl::ActMatrix both = tl::forward_logits(w, tok.data(), 2, T);
  const tl::ActMatrix second = tl::forward_logits(w, tok.data() + T, 1, T);
  CHECK((both.bottomRows(T) - second).cwiseAbs().maxCoeff() == 0.0f);
  // Changing the last token changes no earlier position's logits (the causal mask).
  auto tok2 = tok;
  tok2[T - 1] = (tok2[T - 1] + 1) % int32_t(w.config.vocab);
  const tl::ActMatrix changed = tl::forward_logits(w, tok2.data(), 2, T);
  CHECK((changed.topRows(T - 1) - both.topRows(T - 1)).cwiseAbs().maxCoeff() == 0.0f);
  CHECK((changed.row(T - 1) - both.row(T - 1)).cwiseAbs().maxCoeff() > 0.0f);
}

TEST_CASE("model forward: piecewise run and the linear-input hook") {
  ModelWeights w = tl::random_model_weights(tiny_config(2, 1, 3), 15);
  const int64_t T = 8, n_seq = 2;
  const auto tok = random_tokens(n_seq * T, w.config.vocab, 106);
  std::map<std::string, int> calls;
  std::map<std::string, double> first_sum;
  auto hook = [&](const std::string& name, const float* X, int64_t rows, int64_t K) {
    const tl::LinearWeight* l = w.find_linear(name);
    REQUIRE(l != nullptr);
    CHECK(K == l->K);
    CHECK(rows == n_seq * T);
    if (calls[name]++ == 0) {
      double s = 0;
      for (int64_t i = 0; i < rows * K; ++i) s += X[i];
      first_sum[name] = s;
    }
  };
  const tl::ActMatrix full = tl::forward_logits(w, tok.data(), n_seq, T, hook);
  // Every linear weight is seen; a loop block once per iteration.
  for (const std::string& name : w.linear_names())
    CHECK_MESSAGE(calls[name] == (name.rfind("loop.", 0) == 0 ? 3 : 1), name);
  // mlp_gate and mlp_up see the same input.
  CHECK(first_sum["pre.1.mlp_gate"] == first_sum["pre.1.mlp_up"]);

  // Block by block gives the same logits; replacing block 1's weights changes only what follows.
  tl::ActMatrix x = tl::embed_tokens(w, tok.data(), n_seq * T);
  const auto steps = tl::block_schedule(w.config);
  REQUIRE(steps.size() == 5);
  CHECK(steps[2].prefix == "loop.0");
  CHECK(steps[4].iteration == 2);
  for (const auto& s : steps) tl::run_block(w.config, tl::block_weights(w, s), x, T);
  CHECK((tl::final_logits(w, x) - full).cwiseAbs().maxCoeff() == 0.0f);
}

TEST_CASE("model forward: decode mode (every linear once per position, M = n_seq) computes the same model") {
  // Against the fp64 reference directly, with the same bound: a decode that fed a linear the
  // rows of another position or sequence (a stride or offset error) moves logits by O(0.1 - 1).
  const ModelWeights w = tl::random_model_weights(tiny_config(2, 1, 3), 16);
  check_against_reference(w, 3, 17, 107, tl::ForwardMode::kDecode);
  check_against_reference(w, 1, 5, 108, tl::ForwardMode::kDecode);
  // Causal in decode too: a later token changes no earlier position of any sequence.
  const int64_t T = 9, n_seq = 4;
  auto tok = random_tokens(n_seq * T, w.config.vocab, 109);
  const tl::ActMatrix dec = tl::forward_logits(w, tok.data(), n_seq, T, {}, tl::ForwardMode::kDecode);
  tok[2 * T + 6] = (tok[2 * T + 6] + 1) % int32_t(w.config.vocab);  // sequence 2, position 6
  const tl::ActMatrix changed = tl::forward_logits(w, tok.data(), n_seq, T, {}, tl::ForwardMode::kDecode);
  for (int64_t s = 0; s < n_seq; ++s)
    for (int64_t t = 0; t < T; ++t) {
      const float d = (changed.row(s * T + t) - dec.row(s * T + t)).cwiseAbs().maxCoeff();
      if (s == 2 && t >= 6) CHECK(d > 0.0f);
      else CHECK(d == 0.0f);
    }
  // The calibration hook sees whole batches only: decode refuses it.
  auto hook = [](const std::string&, const float*, int64_t, int64_t) {};
  CHECK_THROWS_AS(tl::forward_logits(w, tok.data(), n_seq, T, hook, tl::ForwardMode::kDecode), tl::Error);
}

TEST_CASE("model forward: linears in tiles on every core give the one-thread logits bit for bit") {
  // Widths that make several 512-column tiles and a ragged last one (ffn 700, vocab 1000), M = 1,
  // a few rows and more than one 256-row tile (2 x 150), prefill and decode. The one-thread run is
  // the same forward inside a parallel_for asked for one thread (which keeps nested work inline).
  ModelConfig c = tiny_config(1, 1, 2);
  c.d_model = 300;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.d_head = 50;
  c.ffn = 700;
  c.vocab = 1000;
  c.max_seq = 256;
  const ModelWeights w = tl::random_model_weights(c, 21);
  struct Run {
    int64_t n_seq, T;
    tl::ForwardMode mode;
  };
  for (const Run& r : {Run{1, 1, tl::ForwardMode::kPrefill}, Run{1, 7, tl::ForwardMode::kPrefill},
                       Run{3, 23, tl::ForwardMode::kPrefill}, Run{2, 150, tl::ForwardMode::kPrefill},
                       Run{5, 6, tl::ForwardMode::kDecode},
                       Run{1, 4, tl::ForwardMode::kDecode}}) {
    CAPTURE(r.n_seq);
    CAPTURE(r.T);
    const auto tok = random_tokens(r.n_seq * r.T, c.vocab, 200 + uint64_t(r.n_seq * r.T));
    const tl::ActMatrix pieces = tl::forward_logits(w, tok.data(), r.n_seq, r.T, {}, r.mode);
    tl::ActMatrix one;
    tl::parallel_for(1, 1, [&](int64_t) {
      CHECK(tl::in_parallel_worker());
      one = tl::forward_logits(w, tok.data(), r.n_seq, r.T, {}, r.mode);
    });
    CHECK_FALSE(tl::in_parallel_worker());
    REQUIRE(one.rows() == pieces.rows());
    CHECK(std::memcmp(one.data(), pieces.data(), sizeof(float) * size_t(one.size())) == 0);
  }
}

TEST_CASE("model forward: bad token ids and ragged batches are errors") {
  const ModelWeights w = tl::random_model_weights(tiny_config(1, 0, 0), 16);
  std::vector<int32_t> tok = {1, 2, int32_t(w.config.vocab)};
  CHECK_THROWS_AS(tl::forward_logits(w, tok.data(), 1, 3), tl::Error);
  tok[2] = -1;
  CHECK_THROWS_AS(tl::forward_logits(w, tok.data(), 1, 3), tl::Error);
  tl::ActMatrix x = tl::ActMatrix::Zero(5, w.config.d_model);
  CHECK_THROWS_AS(tl::run_block(w.config, w.pre[0], x, 2), tl::Error);
}
