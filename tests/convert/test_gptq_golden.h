// Loading the slimmed golden GPTQ files (tests/golden/gptq_*.h5, written by
// tests/golden/gptq_slim.py from ../shared/golden) and the README's recommended parity gate.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "formats/h5_util.h"
#include "libconvert/gptq.h"

namespace tl_test {

struct GptqCalib {
  std::string path;
  int64_t K = 0, N = 0, nsamples = 0;
  std::vector<float> H, W, X;  // H [K, K]; W [K, N]; X [rows, K] (256x128 only)
  int64_t edge_zero = -1, edge_ties = -1, edge_positive = -1, edge_negative = -1;
};

struct GptqCase {
  std::string name, path;
  int64_t K = 0, N = 0, G = 0, group_size = 0, group_size_effective = 0, blocksize = 0;
  bool actorder = false, static_groups = false;
  double percdamp = 0, damp = 0, err_out_gptq = 0, err_out_rtn = 0, sum_losses = 0;
  std::vector<uint8_t> q, rtn_q;
  std::vector<int32_t> z, rtn_z, g_idx, perm;
  std::vector<float> scale_f32, zero_f32, rtn_scale_f32, rtn_zero_f32, Hinv;
  std::vector<uint16_t> scale, zero, rtn_scale, rtn_zero;
};

inline std::string golden_path(const std::string& file) { return std::string(TL_GOLDEN_DIR) + "/" + file; }

inline GptqCalib load_calib(const std::string& shape) {
  namespace h5 = tl::h5;
  GptqCalib c;
  c.path = golden_path("gptq_" + shape + "_calib.h5");
  h5::Handle f = h5::open_file(c.path);
  c.K = h5::attr_int(f, ".", "K", c.path);
  c.N = h5::attr_int(f, ".", "N", c.path);
  c.nsamples = h5::attr_int(f, ".", "nsamples", c.path);
  c.H = h5::read<float>(f, "H", c.path, nullptr, {c.K, c.K});
  c.W = h5::read<float>(f, "W", c.path, nullptr, {c.K, c.N});
  if (h5::exists(f, "X")) c.X = h5::read<float>(f, "X", c.path, nullptr, {-1, c.K});
  c.edge_zero = h5::attr_int(f, ".", "edge_col_zero", c.path);
  c.edge_ties = h5::attr_int(f, ".", "edge_col_ties", c.path);
  c.edge_positive = h5::attr_int(f, ".", "edge_col_positive", c.path);
  c.edge_negative = h5::attr_int(f, ".", "edge_col_negative", c.path);
  return c;
}

inline GptqCase load_case(const std::string& name) {
  namespace h5 = tl::h5;
  GptqCase g;
  g.name = name;
  g.path = golden_path("gptq_" + name + ".h5");
  h5::Handle f = h5::open_file(g.path);
  const std::string& p = g.path;
  g.K = h5::attr_int(f, ".", "K", p);
  g.N = h5::attr_int(f, ".", "N", p);
  g.G = h5::attr_int(f, ".", "G", p);
  g.group_size = h5::attr_int(f, ".", "group_size", p);
  g.group_size_effective = h5::attr_int(f, ".", "group_size_effective", p);
  g.blocksize = h5::attr_int(f, ".", "blocksize", p);
  g.actorder = h5::attr_int(f, ".", "actorder", p) != 0;
  g.static_groups = h5::attr_int(f, ".", "static_groups", p) != 0;
  g.percdamp = h5::attr_double(f, ".", "percdamp", p);
  g.damp = h5::attr_double(f, ".", "damp", p);
  g.err_out_gptq = h5::attr_double(f, ".", "err_out_gptq", p);
  g.err_out_rtn = h5::attr_double(f, ".", "err_out_rtn", p);
  g.sum_losses = h5::attr_double(f, ".", "gptq_error_sum_losses", p);
  const std::vector<int64_t> kn{g.K, g.N}, gn{g.G, g.N};
  g.q = h5::read<uint8_t>(f, "q", p, nullptr, kn);
  g.z = h5::read<int32_t>(f, "z", p, nullptr, gn);
  g.scale_f32 = h5::read<float>(f, "scale_f32", p, nullptr, gn);
  g.zero_f32 = h5::read<float>(f, "zero_f32", p, nullptr, gn);
  g.scale = h5::read_half_bits(f, "scale", p, nullptr, gn);
  g.zero = h5::read_half_bits(f, "zero", p, nullptr, gn);
  g.g_idx = h5::read<int32_t>(f, "g_idx", p, nullptr, {g.K});
  if (h5::exists(f, "perm")) g.perm = h5::read<int32_t>(f, "perm", p, nullptr, {g.K});
  if (h5::exists(f, "Hinv")) g.Hinv = h5::read<float>(f, "Hinv", p, nullptr, {g.K, g.K});
  g.rtn_q = h5::read<uint8_t>(f, "rtn/q", p, nullptr, kn);
  g.rtn_z = h5::read<int32_t>(f, "rtn/z", p, nullptr, gn);
  g.rtn_scale_f32 = h5::read<float>(f, "rtn/scale_f32", p, nullptr, gn);
  g.rtn_zero_f32 = h5::read<float>(f, "rtn/zero_f32", p, nullptr, gn);
  g.rtn_scale = h5::read_half_bits(f, "rtn/scale", p, nullptr, gn);
  g.rtn_zero = h5::read_half_bits(f, "rtn/zero", p, nullptr, gn);
  return g;
}

// ||X E||_F for E = W_hat - W, from H = 2/n X^T X: ||X E||^2 = n/2 tr(E^T H E).
inline double layer_output_error(const GptqCalib& c, const std::vector<float>& w_hat) {
  std::vector<float> e(w_hat.size());
  for (size_t i = 0; i < e.size(); ++i) e[i] = w_hat[i] - c.W[i];
  return std::sqrt(double(c.nsamples) * tl::quadratic_loss(c.H.data(), e.data(), c.K, c.N));
}

// The README's gate: codes and z identical except in at most max(1, N/100) output columns,
// each of which must first differ (in quantization order) at a near-tie of round().
constexpr double kNearTie = 1e-5;  // |frac(w/scale) - 0.5| below this is a tie in float32 noise

struct CodeDiff {
  int64_t codes = 0;          // differing codes
  int64_t cols = 0;           // output columns with any differing code or z
  int64_t unexplained = 0;    // columns whose first difference is not at a near-tie
  std::string report;         // first mismatches, for the failure message
  std::vector<bool> col_differs;  // [N]
};

// tie_margin: [K, N] |frac(x) - 0.5| of the value our run rounded (GptqResult::tie_margin).
inline CodeDiff diff_codes(const GptqCase& g, const tl::GptqResult& r) {
  CodeDiff d;
  d.col_differs.assign(size_t(g.N), false);
  char line[256];
  for (int64_t n = 0; n < g.N; ++n) {
    int64_t first_j = -1, count = 0;
    for (int64_t j = 0; j < g.K; ++j) {
      const int64_t k = r.perm.empty() ? j : r.perm[size_t(j)];
      if (g.q[size_t(k * g.N + n)] != r.q[size_t(k * g.N + n)]) {
        if (first_j < 0) first_j = j;
        ++count;
      }
    }
    bool z_diff = false;
    for (int64_t gi = 0; gi < g.G; ++gi) {
      z_diff |= g.z[size_t(gi * g.N + n)] != int32_t(r.zq[size_t(gi * g.N + n)]);
    }
    if (first_j < 0 && !z_diff) continue;
    d.codes += count;
    ++d.cols;
    d.col_differs[size_t(n)] = true;
    bool tie = false;
    if (first_j >= 0) {
      const int64_t k = r.perm.empty() ? first_j : r.perm[size_t(first_j)];
      const float m = r.tie_margin.empty() ? 1.0f : r.tie_margin[size_t(k * g.N + n)];
      tie = m < kNearTie;
      std::snprintf(line, sizeof line, "  col %lld: %lld codes differ, first at k=%lld (ours %d, ref %d, tie margin %.3g)%s\n",
                    (long long)n, (long long)count, (long long)k, int(r.q[size_t(k * g.N + n)]),
                    int(g.q[size_t(k * g.N + n)]), double(m), z_diff ? ", z differs" : "");
    } else {
      std::snprintf(line, sizeof line, "  col %lld: only z differs\n", (long long)n);
    }
    if (!tie) ++d.unexplained;
    if (d.report.size() < 2000) d.report += line;
  }
  return d;
}

}  // namespace tl_test
