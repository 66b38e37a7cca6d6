#include "libverify/reference_math.h"

#include "core/group_size.h"

#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

namespace tl::verify {

std::vector<int64_t> reference_rows(int64_t M, int max_rows) {
  std::vector<int64_t> rows;
  if (M <= max_rows || max_rows < 32) {
    for (int64_t m = 0; m < M; ++m) rows.push_back(m);
    return rows;
  }
  for (int64_t m = 0; m < 16; ++m) rows.push_back(m);
  for (int64_t m = M - 16; m < M; ++m) rows.push_back(m);
  // Between them, first one row for each position in a 64-row slice of the tiled kernel that
  // the boundary tiles do not already check, spread over the slices: a fault tied to one row
  // of a slice cannot hide between samples (up to 48 rows, so up to 80 rows in all), then
  // evenly spaced rows up to max_rows.
  bool seen[64] = {};
  for (int64_t m : rows) seen[m % 64] = true;
  std::vector<int64_t> missing;
  for (int64_t p = 0; p < 64; ++p)
    if (!seen[p]) missing.push_back(p);
  const int64_t slices = (M - 16) / 64 + 1;  // slices holding rows below M - 16
  for (size_t j = 0; j < missing.size(); ++j) {
    for (int64_t slice = int64_t(j) * slices / int64_t(missing.size()); slice >= 0; --slice) {
      const int64_t m = slice * 64 + missing[j];
      if (m >= 16 && m < M - 16) {
        rows.push_back(m);
        break;
      }
    }
  }
  const int64_t inner = max_rows - int64_t(rows.size());
  for (int64_t i = 0; i < inner; ++i) rows.push_back(16 + (i * (M - 32)) / inner + i % 7);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

static int64_t group_of(const QuantWeight& w, int64_t k) { return k / w.group_size; }

std::vector<double> dequant_symmetric(const QuantWeight& w) {
  std::vector<double> W(size_t(w.K * w.N));
  for (int64_t k = 0; k < w.K; ++k) {
    const half_bits* s = &w.scale[size_t(group_of(w, k) * w.N)];
    for (int64_t n = 0; n < w.N; ++n)
      W[size_t(k * w.N + n)] = (double(w.q[size_t(k * w.N + n)]) - 8.0) * double(half_to_float(s[n]));
  }
  return W;
}

std::vector<double> dequant_asymmetric(const QuantWeight& w) {
  std::vector<double> W(size_t(w.K * w.N));
  for (int64_t k = 0; k < w.K; ++k) {
    const size_t g = size_t(group_of(w, k) * w.N);
    for (int64_t n = 0; n < w.N; ++n)
      W[size_t(k * w.N + n)] = double(w.q[size_t(k * w.N + n)]) * double(half_to_float(w.scale[g + n])) +
                               double(half_to_float(w.zero[g + n]));
  }
  return W;
}

std::vector<half_bits> delta_contract(const std::vector<half_bits>& scale,
                                      const std::vector<half_bits>& zero) {
  std::vector<half_bits> d(scale.size());
  for (size_t i = 0; i < d.size(); ++i)
    d[i] = float_to_half(half_to_float(zero[i]) + 8.0f * half_to_float(scale[i]));
  return d;
}

std::vector<double> group_sums(const half_bits* A, int64_t K, int64_t group_size,
                               const std::vector<int64_t>& rows) {
  const int64_t G = group_count(K, group_size);
  std::vector<double> s(rows.size() * size_t(G), 0.0);
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t k = 0; k < K; ++k)  // <= 2^13 fp16 terms: exact in fp64
      s[r * size_t(G) + size_t(k / group_size)] += double(half_to_float(A[rows[r] * K + k]));
  return s;
}

namespace {

// The product of reference_gemm over weights given row segment by row segment: fill(k, n0, nc,
// out) writes W[k, n0 .. n0 + nc) (and the noise form's) into `out`. A task holds one column
// block, so a weight is never materialized whole in fp64 (a 70B MLP weight would be 1.9 GB).
template <class Fill, class FillNoise>
GemmReference blocked_gemm(const half_bits* A, int64_t K, int64_t N, const std::vector<int64_t>& rows, bool noise,
                           const Fill& fill, const FillNoise& fill_noise) {
  const size_t R = rows.size();
  GemmReference out;
  out.c.assign(R * size_t(N), 0.0);
  out.sumsq.assign(R * size_t(N), 0.0);
  if (noise) {
    out.c_aux.assign(R * size_t(N), 0.0);
    out.sumsq_main.assign(R * size_t(N), 0.0);
  }
  std::vector<double> a(R * size_t(K));
  for (size_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) a[r * size_t(K) + size_t(k)] = half_to_float(A[rows[r] * K + k]);
  // Column blocks of 64 per task: the task's accumulators (rows x 64 x 3 doubles) stay in L2
  // while it streams its W columns once.
  constexpr int64_t kCols = 64;
  const int64_t blocks = (N + kCols - 1) / kCols;
  tl::parallel_for(blocks, resolve_threads(0), [&](int64_t b) {
    std::vector<double> acc(R * kCols, 0.0), aux(R * kCols, 0.0), sq(R * kCols, 0.0), sqm(R * kCols, 0.0);
    double w[kCols], wn_buf[kCols];
    const int64_t n0 = b * kCols, nc = std::min(kCols, N - n0);
    for (int64_t k = 0; k < K; ++k) {
      fill(k, n0, nc, w);
      const double* wn = w;
      if (noise) {
        fill_noise(k, n0, nc, wn_buf);
        wn = wn_buf;
      }
      for (size_t r = 0; r < R; ++r) {
        const double av = a[r * size_t(K) + size_t(k)];
        if (av == 0) continue;
        double* ac = &acc[r * kCols];
        double* ax = &aux[r * kCols];
        double* s2 = &sq[r * kCols];
        double* sm = &sqm[r * kCols];
        for (int64_t j = 0; j < nc; ++j) {
          const double u = av * w[j], t = av * wn[j];
          ac[j] += u;
          sm[j] += u * u;
          ax[j] += t;
          s2[j] += t * t;
        }
      }
    }
    for (size_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < nc; ++j) {
        const size_t o = r * size_t(N) + size_t(n0 + j);
        out.c[o] = acc[r * kCols + size_t(j)];
        out.sumsq[o] = sq[r * kCols + size_t(j)];
        if (noise) {
          out.c_aux[o] = aux[r * kCols + size_t(j)];
          out.sumsq_main[o] = sqm[r * kCols + size_t(j)];
        }
      }
  });
  return out;
}

// Row segments of a quantized weight in fp64, exactly dequant_symmetric's / dequant_asymmetric's values.
struct QuantRows {
  const QuantWeight& w;
  bool asym;
  void operator()(int64_t k, int64_t n0, int64_t nc, double* out) const {
    const size_t g = size_t(group_of(w, k) * w.N), row = size_t(k * w.N);
    for (int64_t j = 0; j < nc; ++j) {
      const size_t n = size_t(n0 + j);
      const double q = double(w.q[row + n]), s = double(half_to_float(w.scale[g + n]));
      out[j] = asym ? q * s + double(half_to_float(w.zero[g + n])) : (q - 8.0) * s;
    }
  }
};

}  // namespace

GemmReference reference_gemm(const half_bits* A, int64_t K, int64_t N, const std::vector<int64_t>& rows,
                             const double* W, const double* W_noise) {
  auto rows_of = [N](const double* M) {
    return [M, N](int64_t k, int64_t n0, int64_t nc, double* out) { std::copy_n(M + k * N + n0, nc, out); };
  };
  return blocked_gemm(A, K, N, rows, W_noise != nullptr, rows_of(W), rows_of(W_noise ? W_noise : W));
}

// A * W_hat (asym) or A * W_marlin, with the other as the noise form where both are asked.
static GemmReference quant_gemm_reference(const half_bits* A, const QuantWeight& w, const std::vector<int64_t>& rows,
                                          bool asym, bool with_noise) {
  return blocked_gemm(A, w.K, w.N, rows, with_noise, QuantRows{w, asym}, QuantRows{w, !asym});
}

// A * W for one weight form, sigma^2 = sum_k (a_k W)^2 (the kernel rounds only these terms).
static CaseReference one_weight_reference(const half_bits* A, int64_t M, const QuantWeight& w, bool asym,
                                          int max_rows) {
  CaseReference r;
  r.rows = reference_rows(M, max_rows);
  GemmReference g = quant_gemm_reference(A, w, r.rows, asym, false);
  r.ref = std::move(g.c);
  r.sigma.resize(g.sumsq.size());
  for (size_t i = 0; i < r.sigma.size(); ++i) r.sigma[i] = std::sqrt(g.sumsq[i]);
  return r;
}

CaseReference symmetric_reference(const half_bits* A, int64_t M, const QuantWeight& w, int max_rows) {
  return one_weight_reference(A, M, w, /*asym=*/false, max_rows);
}

CaseReference wrapper_reference(const half_bits* A, int64_t M, const QuantWeight& w,
                                const std::vector<half_bits>& delta16, int max_rows) {
  CaseReference r;
  r.rows = reference_rows(M, max_rows);
  GemmReference g = quant_gemm_reference(A, w, r.rows, /*asym=*/true, /*with_noise=*/true);
  const int64_t G = w.groups(), N = w.N;
  const std::vector<double> asum = group_sums(A, w.K, w.group_size, r.rows);
  r.ref = std::move(g.c);
  r.sigma.resize(r.ref.size());
  for (size_t i = 0; i < r.rows.size(); ++i)
    for (int64_t n = 0; n < N; ++n) {
      const size_t o = i * size_t(N) + size_t(n);
      double corr2 = 0;
      for (int64_t gi = 0; gi < G; ++gi) {
        const double t = asum[i * size_t(G) + size_t(gi)] * half_to_float(delta16[size_t(gi * N + n)]);
        corr2 += t * t;
      }
      r.sigma[o] = std::sqrt(g.sumsq[o] + g.sumsq_main[o] + g.c_aux[o] * g.c_aux[o] + corr2);
    }
  return r;
}

CaseReference swiglu_reference(const half_bits* A, int64_t M, const QuantWeight& gate, const QuantWeight& up,
                               const std::vector<float>& bias_gate, const std::vector<float>& bias_up,
                               int max_rows) {
  const CaseReference g = wrapper_reference(A, M, gate, gate.marlin->delta, max_rows);
  const CaseReference u = wrapper_reference(A, M, up, up.marlin->delta, max_rows);
  CaseReference r;
  r.rows = g.rows;
  r.ref.resize(g.ref.size());
  r.sigma.resize(g.ref.size());
  const int64_t N = gate.N;
  for (size_t i = 0; i < r.rows.size(); ++i)
    for (int64_t n = 0; n < N; ++n) {
      const size_t o = i * size_t(N) + size_t(n);
      const double G = g.ref[o] + (bias_gate.empty() ? 0.0 : double(bias_gate[size_t(n)]));
      const double U = u.ref[o] + (bias_up.empty() ? 0.0 : double(bias_up[size_t(n)]));
      const double sig = 1.0 / (1.0 + std::exp(-G)), silu = G * sig, dsilu = sig * (1.0 + G * (1.0 - sig));
      r.ref[o] = silu * U;
      const double dg = dsilu * U, du = silu;
      r.sigma[o] = std::sqrt(dg * dg * (g.sigma[o] * g.sigma[o] + G * G) + du * du * (u.sigma[o] * u.sigma[o] + U * U));
    }
  return r;
}

CaseReference native_reference(const half_bits* A, int64_t M, const QuantWeight& w, int max_rows) {
  return one_weight_reference(A, M, w, /*asym=*/true, max_rows);
}

CaseReference correction_reference(const half_bits* A, const half_bits* C_in,
                                   const half_bits* delta, int64_t M, int64_t N, int64_t K,
                                   int64_t group_size) {
  CaseReference r;
  r.rows = reference_rows(M, int(M));  // cheap: every row
  const int64_t G = group_count(K, group_size);
  const std::vector<double> asum = group_sums(A, K, group_size, r.rows);
  r.ref.resize(size_t(M * N));
  r.sigma.resize(size_t(M * N));
  tl::parallel_for(M, resolve_threads(0), [&](int64_t m) {
      for (int64_t n = 0; n < N; ++n) {
        const double c = half_to_float(C_in[m * N + n]);
        double v = c, s2 = c * c;
        for (int64_t g = 0; g < G; ++g) {
          const double t = asum[size_t(m * G + g)] * half_to_float(delta[g * N + n]);
          v += t;
          s2 += t * t;
        }
        r.ref[size_t(m * N + n)] = v;
        r.sigma[size_t(m * N + n)] = std::sqrt(s2);
      }
  });
  return r;
}

}  // namespace tl::verify
