// Causal attention on the GPU: the fp32 kernel (causal_attention, the e2e tier's forward) and the
// tensor-core kernel (causal_attention_tc, gptq-quantize's calibration forward), both against an
// fp64 softmax(q k^T / sqrt(dh)) v of the same fp16 inputs, with the error bound of each derived
// below; on random shapes that cross every tile edge of the tensor-core kernel (T < 64, T = 64,
// ragged last tiles, several query and key tiles), every head size it takes, GQA, sliding
// windows shorter and longer than a tile, both row orders, and peaky and flat score spreads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/model_ops.h"
#include "cuda/tl_kernels.h"
#include "gpu_support/gpu_test_util.h"

namespace tl::test {
namespace {

struct AttnCase {
  int n_seq, T, H, Hkv, dh, window;
  double q_scale;  // spread of the scores: 1 flat-ish, 4 peaky
  cuda::RowOrder order;
};

std::string describe(const AttnCase& c) {
  return "n_seq " + std::to_string(c.n_seq) + " T " + std::to_string(c.T) + " H " + std::to_string(c.H) + "/" +
         std::to_string(c.Hkv) + " dh " + std::to_string(c.dh) + " window " + std::to_string(c.window) + " q x" +
         std::to_string(c.q_scale) + (c.order == cuda::RowOrder::kPositionMajor ? " position-major" : "");
}

// Error model (u = 2^-24, fp32's unit roundoff; gamma_n = n u / (1 - n u)), per output element
// of query i over its visible keys j (n of them), w_j = softmax weights, V = max_j |v_j|:
//  * scores: q . k from exact fp16 products summed in fp32 (depth dh), times the scale (and
//    log2 e), then exp / exp2 of a difference: each exponent argument is off by at most
//    delta = (gamma_dh + 4 u) * S, S = scale * max_j sum |q| |k| (+ the max subtraction's
//    rounding, inside the 4 u); perturbing every argument by <= delta moves each w_j by a factor
//    within e^{+-2 delta}, so o by <= (e^{2 delta} - 1) V;
//  * the sums over keys (numerator and l) in fp32: <= 2 gamma_n V;
//  * the tensor-core kernel only: p_j rounded to fp16 for the P V product, relative 2^-11 (or
//    2^-25 absolute under fp16's normal range) while l keeps the fp32 p_j: <= (2^-11 + n 2^-25) V
//    (l >= 1: the row's largest p is exp(0));
//  * the output's fp16 rounding: half an fp16 step, <= 2^-11 |o| + 2^-25.
// The tensor cores' fp32 accumulation is not IEEE (it aligns the addends and truncates): for it
// the bound takes u = 2^-23 wherever the sums are the mma's.
double attention_bound(bool tensor_core, int n, int dh, double S, double V, double ref) {
  const double u = tensor_core ? 0x1p-23 : 0x1p-24;
  auto gamma = [&](double k) { return k * u / (1 - k * u); };
  const double delta = (gamma(dh) + 4 * u) * S;
  double b = (std::expm1(2 * delta) + 2 * gamma(n)) * V + 0x1p-11 * std::fabs(ref) + 0x1p-25;
  if (tensor_core) b += (0x1p-11 + n * 0x1p-25) * V;
  return b;
}

struct Inputs {
  std::vector<half_bits> q, k, v;  // [n_seq][H or Hkv][T][dh]
};

Inputs random_inputs(const AttnCase& c, uint64_t stream) {
  Rng rng(stream);
  Inputs in;
  const size_t nq = size_t(c.n_seq) * c.H * c.T * c.dh, nkv = size_t(c.n_seq) * c.Hkv * c.T * c.dh;
  in.q = random_halves(rng, nq, -c.q_scale, c.q_scale);
  in.k = random_halves(rng, nkv, -1.0, 1.0);
  in.v = random_halves(rng, nkv, -2.0, 2.0);
  return in;
}

// The row of query i of sequence s in the output, in the case's order.
int64_t out_row(const AttnCase& c, int s, int i) {
  return c.order == cuda::RowOrder::kPositionMajor ? int64_t(i) * c.n_seq + s : int64_t(s) * c.T + i;
}

// Runs one kernel; returns the output [n_seq * T, H dh].
std::vector<half_bits> run(const AttnCase& c, const Inputs& in, bool tensor_core) {
  DeviceBuffer<half_bits> q(in.q), k(in.k), v(in.v);
  const size_t n_out = size_t(c.n_seq) * c.T * c.H * c.dh;
  DeviceBuffer<half_bits> out(n_out);
  out.poison();  // NaN: an unwritten element fails
  auto h = [](const DeviceBuffer<half_bits>& b) { return reinterpret_cast<const __half*>(b.get()); };
  __half* o = reinterpret_cast<__half*>(out.get());
  if (tensor_core)
    TL_REQUIRE_LAUNCH(cuda::causal_attention_tc(h(q), h(k), h(v), o, c.n_seq, c.T, c.H, c.Hkv, c.dh, c.window,
                                                c.order, nullptr));
  else
    TL_REQUIRE_LAUNCH(cuda::causal_attention(h(q), h(k), h(v), o, c.n_seq, c.T, c.H, c.Hkv, c.dh, c.window,
                                             c.order, nullptr));
  return out.download();
}

struct Check {
  double worst = 0;     // max |out - ref| / bound
  int64_t failed = 0;   // elements over their bound (NaN included)
  double max_abs = 0;   // max |out - ref|
};

// Every element of `out` against the fp64 reference; window_ref: the window the reference
// applies (the case's own, or another for the control below).
Check check(const AttnCase& c, const Inputs& in, const std::vector<half_bits>& out, bool tensor_core, int window_ref) {
  Check r;
  const double scale = 1.0 / std::sqrt(double(c.dh));
  std::vector<double> sc, w;
  for (int s = 0; s < c.n_seq; ++s)
    for (int h = 0; h < c.H; ++h) {
      const int kvh = h / (c.H / c.Hkv);
      const half_bits* qh = &in.q[((size_t(s) * c.H + h) * c.T) * c.dh];
      const half_bits* kh = &in.k[((size_t(s) * c.Hkv + kvh) * c.T) * c.dh];
      const half_bits* vh = &in.v[((size_t(s) * c.Hkv + kvh) * c.T) * c.dh];
      for (int i = 0; i < c.T; ++i) {
        const int lo = window_ref > 0 ? std::max(0, i - window_ref + 1) : 0, n = i - lo + 1;
        sc.assign(size_t(n), 0.0);
        double S = 0, mx = -INFINITY;
        for (int j = lo; j <= i; ++j) {
          double d = 0, a = 0;
          for (int e = 0; e < c.dh; ++e) {
            const double x = half_to_float(qh[size_t(i) * c.dh + e]), y = half_to_float(kh[size_t(j) * c.dh + e]);
            d += x * y;
            a += std::fabs(x * y);
          }
          sc[size_t(j - lo)] = d * scale;
          S = std::max(S, a * scale * 1.4426950408889634);
          mx = std::max(mx, d * scale);
        }
        double l = 0;
        w.assign(size_t(n), 0.0);
        for (int j = 0; j < n; ++j) l += (w[size_t(j)] = std::exp(sc[size_t(j)] - mx));
        for (int e = 0; e < c.dh; ++e) {
          double o = 0, V = 0;
          for (int j = 0; j < n; ++j) {
            const double x = half_to_float(vh[size_t(lo + j) * c.dh + e]);
            o += w[size_t(j)] * x;
            V = std::max(V, std::fabs(x));
          }
          o /= l;
          const double got = half_to_float(out[size_t(out_row(c, s, i)) * c.H * c.dh + size_t(h) * c.dh + e]);
          const double err = std::fabs(got - o), bound = attention_bound(tensor_core, n, c.dh, S, V, o);
          if (!(err <= bound)) ++r.failed;
          r.worst = std::max(r.worst, std::isfinite(err) ? err / bound : INFINITY);
          r.max_abs = std::max(r.max_abs, std::isfinite(err) ? err : INFINITY);
        }
      }
    }
  return r;
}

std::vector<AttnCase> cases() {
  Rng rng(0xa77e);
  auto pick = [&](int lo, int hi) { return lo + int(rng.next() % uint64_t(hi - lo + 1)); };
  std::vector<AttnCase> out;
  const int dhs[] = {32, 64, 96, 128};
  // Fixed edges first: one query, one whole tile, one past it; then random shapes.
  out.push_back({1, 1, 2, 1, 64, 0, 2.0, cuda::RowOrder::kSequenceMajor});
  out.push_back({1, 64, 2, 2, 128, 0, 2.0, cuda::RowOrder::kSequenceMajor});
  out.push_back({2, 65, 4, 1, 32, 0, 4.0, cuda::RowOrder::kPositionMajor});
  const int n_random = quick_mode() ? 4 : 16;
  for (int t = 0; t < n_random; ++t) {
    AttnCase c;
    c.dh = dhs[t % 4];
    c.n_seq = pick(1, 3);
    c.T = t % 3 == 0 ? pick(17, 63) : pick(65, quick_mode() ? 160 : 300);
    c.Hkv = pick(1, 2);
    c.H = c.Hkv * pick(1, 3);
    // No window, one shorter than a tile, one spanning several tiles.
    c.window = t % 3 == 1 ? pick(1, 63) : t % 3 == 2 ? pick(64, 200) : 0;
    c.q_scale = t % 2 ? 4.0 : 1.0;
    c.order = t % 4 == 3 ? cuda::RowOrder::kPositionMajor : cuda::RowOrder::kSequenceMajor;
    out.push_back(c);
  }
  return out;
}

}  // namespace

TEST_CASE("causal attention: fp32 and tensor-core kernels within their derived bounds of fp64") {
  double worst_tc = 0, worst_fp32 = 0;
  uint64_t stream = 1;
  for (const AttnCase& c : cases()) {
    CAPTURE(describe(c));
    const Inputs in = random_inputs(c, stream++);
    for (bool tc : {false, true}) {
      CAPTURE(tc);
      const Check r = check(c, in, run(c, in, tc), tc, c.window);
      CHECK(r.failed == 0);
      (tc ? worst_tc : worst_fp32) = std::max(tc ? worst_tc : worst_fp32, r.worst);
    }
  }
  MESSAGE("worst error / bound: fp32 kernel " << worst_fp32 << ", tensor-core kernel " << worst_tc);
}

TEST_CASE("causal attention: the checks see a wrong window and a wrong kv head") {
  // The bound is tight enough to tell the kernels' features apart: the same output checked
  // against a reference without the window, or with the kv heads of a model without GQA, fails.
  const AttnCase c{1, 150, 4, 2, 64, 40, 2.0, cuda::RowOrder::kSequenceMajor};
  const Inputs in = random_inputs(c, 99);
  for (bool tc : {false, true}) {
    CAPTURE(tc);
    const std::vector<half_bits> out = run(c, in, tc);
    CHECK(check(c, in, out, tc, c.window).failed == 0);
    CHECK(check(c, in, out, tc, 0).failed > 0);
    AttnCase no_gqa = c;
    no_gqa.Hkv = c.H;  // head h reads kv head h: only heads 0 (same kv head) can match
    Inputs wide = in;
    wide.k.resize(size_t(c.H) * c.T * c.dh);
    wide.v.resize(wide.k.size());
    for (int h = 0; h < c.H; ++h)  // kv head h of the wide model = kv head h % Hkv of the case
      for (size_t e = 0; e < size_t(c.T) * c.dh; ++e) {
        wide.k[size_t(h) * c.T * c.dh + e] = in.k[size_t(h % c.Hkv) * c.T * c.dh + e];
        wide.v[size_t(h) * c.T * c.dh + e] = in.v[size_t(h % c.Hkv) * c.T * c.dh + e];
      }
    CHECK(check(no_gqa, wide, out, tc, c.window).failed > 0);
  }
}

TEST_CASE("causal attention tc: the head sizes it takes, and refusals") {
  for (int dh : {32, 64, 96, 128}) CHECK(cuda::attention_tc_supports(dh));
  for (int dh : {2, 16, 48, 80, 256}) CHECK_FALSE(cuda::attention_tc_supports(dh));
  CHECK(cuda::causal_attention_tc(nullptr, nullptr, nullptr, nullptr, 1, 8, 2, 1, 80, 0, cuda::RowOrder::kSequenceMajor,
                                  nullptr) == cuda::kShapeUnsupported);
  CHECK(cuda::causal_attention_tc(nullptr, nullptr, nullptr, nullptr, 1, 8, 3, 2, 64, 0, cuda::RowOrder::kSequenceMajor,
                                  nullptr) == cuda::kShapeUnsupported);
}

}  // namespace tl::test
