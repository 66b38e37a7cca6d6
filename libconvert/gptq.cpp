#include "libconvert/gptq.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <thread>

#include <Eigen/Cholesky>

#include "core/error.h"
#include "core/group_size.h"
#include "core/parallel.h"
#include "libconvert/eigen_blocking.h"

// Compiled with -ffp-contract=off (libconvert/CMakeLists.txt): the in-block update
// `w -= U[j, r] * err` must round the product and the difference separately, as upstream's
// torch ops do, or codes near a tie of round() come out differently. Eigen's GEMM kernels use
// explicit FMA intrinsics and are unaffected.

namespace tl {

namespace {

// Everything the column chunks share, prepared once per weight.
struct Plan {
  const float* W = nullptr;      // original [K, N]
  int64_t K = 0, N = 0, gs = 0, G = 0, bs = 0;
  bool grouped = false;          // more than one group along K
  bool dynamic = false;          // grouped && !static: parameters found during the sweep
  ZeroMode mode = ZeroMode::kInt;
  bool range_search = false;     // minmax_quantizer.h: each group's parameters searched
  std::vector<int32_t> order;    // order[j] = row quantized j-th (perm or identity)
  std::vector<uint8_t> dead;     // [K] by original row
  MatrixRowF U, V;               // U: upper factor of H^-1 (quantization order); V = U^-1
  MinMaxParams fixed;            // [G * N]: static groups or the per-row parameters
  const MinMaxResult* rtn = nullptr;  // for the RTN comparison loss
};

// Output of one chunk that is reduced after all chunks ran (kept per chunk so the sum is in
// chunk order, independent of the thread that ran it).
struct ChunkStats {
  double loss = 0, rtn_loss = 0;
};

void slice_params(const MinMaxParams& all, int64_t g, int64_t N, int64_t n0, int64_t C,
                  MinMaxParams* out) {
  out->resize(C);
  std::copy_n(all.scale.begin() + g * N + n0, C, out->scale.begin());
  std::copy_n(all.zq.begin() + g * N + n0, C, out->zq.begin());
}

void run_chunk(const Plan& p, int64_t n0, int64_t C, GptqResult* r, ChunkStats* st) {
  const int64_t K = p.K, N = p.N;
  // Wc is upstream's W (updated only by the lazy block updates), W1 its in-block copy.
  MatrixRowF Wc(K, C);
  for (int64_t j = 0; j < K; ++j) {
    const int64_t k = p.order[size_t(j)];
    if (p.dead[size_t(k)]) Wc.row(j).setZero();
    else Wc.row(j) = Eigen::Map<const Eigen::RowVectorXf>(p.W + k * N + n0, C);
  }

  if (p.rtn) {
    // RTN's error in quantization order (dead rows: their inputs are always zero, so their
    // values cannot change the layer output), then 0.5 ||V^T E||^2 = 0.5 tr(E^T H E).
    MatrixRowF E(K, C);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t k = p.order[size_t(j)];
      if (p.dead[size_t(k)]) { E.row(j).setZero(); continue; }
      for (int64_t c = 0; c < C; ++c) {
        E(j, c) = p.rtn->w_hat[size_t(k * N + n0 + c)] - p.W[k * N + n0 + c];
      }
    }
    const MatrixRowF T = p.V.transpose().triangularView<Eigen::Lower>() * E;
    st->rtn_loss = 0.5 * T.cast<double>().squaredNorm();
  }

  const int64_t bs = p.bs;
  MatrixRowF W1(bs, C), Err1(bs, C);
  Eigen::RowVectorXf qrow(C);
  std::vector<uint8_t> codes(static_cast<size_t>(C));
  MinMaxParams cur;
  if (!p.grouped) slice_params(p.fixed, 0, N, n0, C, &cur);
  int64_t cur_group = p.grouped ? -1 : 0;
  double loss = 0;

  for (int64_t i1 = 0; i1 < K; i1 += bs) {
    const int64_t i2 = std::min(i1 + bs, K), cnt = i2 - i1;
    W1.topRows(cnt) = Wc.middleRows(i1, cnt);
    for (int64_t i = 0; i < cnt; ++i) {
      const int64_t j = i1 + i;
      const int64_t k = p.order[size_t(j)];
      int64_t g = 0;
      if (p.dynamic) {
        g = j / p.gs;
        if (j % p.gs == 0) {
          const int64_t rows = std::min(p.gs, K - j);
          minmax_find_params(Wc.data() + j * C, rows, C, C, p.mode, &cur, p.range_search);
          std::copy(cur.scale.begin(), cur.scale.end(), r->scale.begin() + g * N + n0);
          std::copy(cur.zq.begin(), cur.zq.end(), r->zq.begin() + g * N + n0);
        }
      } else if (p.grouped) {
        g = k / p.gs;
        if (g != cur_group) { slice_params(p.fixed, g, N, n0, C, &cur); cur_group = g; }
      }

      const float d = p.U(j, j);
      auto w = W1.row(i);
      minmax_quantize_row(w.data(), C, cur, p.mode, codes.data(), qrow.data());
      std::copy(codes.begin(), codes.end(), r->q.begin() + k * N + n0);
      if (!r->w_hat.empty()) std::copy_n(qrow.data(), C, r->w_hat.begin() + k * N + n0);
      if (!r->tie_margin.empty()) {
        for (int64_t c = 0; c < C; ++c) {
          const float x = p.mode == ZeroMode::kInt ? w[c] / cur.scale[size_t(c)]
                                                   : (w[c] - cur.zq[size_t(c)]) / cur.scale[size_t(c)];
          r->tie_margin[size_t(k * N + n0 + c)] = std::fabs(x - std::floor(x) - 0.5f);
        }
      }
      auto err = Err1.row(i);
      const float d2 = d * d;
      for (int64_t c = 0; c < C; ++c) {
        const float e = w[c] - qrow[c];
        loss += double((e * e) / d2);
        err[c] = e / d;
      }
      for (int64_t rr = i + 1; rr < cnt; ++rr) {
        W1.row(rr).noalias() -= p.U(j, i1 + rr) * err;
      }
    }
    if (i2 < K) {
      Wc.bottomRows(K - i2).noalias() -=
          p.U.block(i1, i2, cnt, K - i2).transpose() * Err1.topRows(cnt);
    }
  }
  st->loss = loss / 2;
}

std::string fmt_g(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

bool GptqResult::contiguous_groups() const {
  for (int64_t k = 0; k < K; ++k) {
    if (g_idx[size_t(k)] != k / group_size) return false;
  }
  return true;
}

void invert_upper_triangular(Eigen::Ref<MatrixRowF> t, int threads) {
  const int64_t n = t.rows();
  if (n <= 64) {
    MatrixRowF x = MatrixRowF::Identity(n, n);
    t.triangularView<Eigen::Upper>().solveInPlace(x);
    t = x.triangularView<Eigen::Upper>();
    return;
  }
  // [A B; 0 D]^-1 = [A^-1, -A^-1 B D^-1; 0, D^-1]: two half-size inverses (in parallel) and two
  // triangular-times-dense products (split by columns / rows), K^3/3 flops in all, mostly in
  // GEMM-speed kernels.
  const int64_t h = (n / 2 + 15) / 16 * 16;
  auto A = t.topLeftCorner(h, h);
  auto B = t.topRightCorner(h, n - h);
  auto D = t.bottomRightCorner(n - h, n - h);
  if (threads > 1 && n >= 512) {
    std::thread other([&] { invert_upper_triangular(D, threads / 2); });
    invert_upper_triangular(A, threads - threads / 2);
    other.join();
  } else {
    invert_upper_triangular(A, 1);
    invert_upper_triangular(D, 1);
  }
  // The two products run in column / row blocks of a fixed width, never one block per thread:
  // a block boundary moves rows and columns between Eigen's full and remainder micro-kernels,
  // which sum in different orders, so a split that followed the thread count would make the
  // result depend on it.
  constexpr int64_t kSplit = 128;
  MatrixRowF tmp(h, n - h);
  const int64_t cblocks = (n - h + kSplit - 1) / kSplit, rblocks = (h + kSplit - 1) / kSplit;
  parallel_for(cblocks, threads, [&](int64_t i) {
    const int64_t c0 = i * kSplit, c = std::min(kSplit, n - h - c0);
    tmp.middleCols(c0, c).noalias() = A.triangularView<Eigen::Upper>() * B.middleCols(c0, c);
  });
  parallel_for(rblocks, threads, [&](int64_t i) {
    const int64_t r0 = i * kSplit, r = std::min(kSplit, h - r0);
    B.middleRows(r0, r).noalias() = -(tmp.middleRows(r0, r) * D.triangularView<Eigen::Upper>());
  });
  t.bottomLeftCorner(n - h, h).setZero();
}

bool gptq_inverse_hessian_factor(const MatrixRowF& H, float damp, MatrixRowF* u, MatrixRowF* v,
                                 int threads) {
  pin_eigen_blocking();
  const int64_t K = H.rows();
  // Cholesky of the reversed matrix: J (H + damp I) J = L L^T  =>  H + damp I = V V^T with
  // V = J L J upper triangular, and (H + damp I)^-1 = V^-T V^-1 = U^T U with U = V^-1.
  // H is symmetric, so the column-major R = J H J is the row-major H read backwards.
  Eigen::MatrixXf R(K, K);
  std::reverse_copy(H.data(), H.data() + K * K, R.data());
  R.diagonal().array() += damp;
  Eigen::LLT<Eigen::MatrixXf, Eigen::Lower> llt(R);
  if (llt.info() != Eigen::Success) return false;
  // V(i, j) = L(K-1-i, K-1-j): the column-major L's storage read backwards is V column-major.
  Eigen::MatrixXf Vc(K, K);
  std::reverse_copy(llt.matrixLLT().data(), llt.matrixLLT().data() + K * K, Vc.data());
  MatrixRowF Vm = Vc.triangularView<Eigen::Upper>();
  MatrixRowF Um = Vm;
  invert_upper_triangular(Um, threads);
  for (int64_t i = 0; i < K; ++i) {
    const float d = Um(i, i);
    if (!(d > 0.0f) || !std::isfinite(d) || !std::isfinite(Vm(i, i))) return false;
  }
  if (!Um.allFinite()) return false;
  *u = std::move(Um);
  if (v) *v = std::move(Vm);
  return true;
}

void gptq_damped_factor(const GptqOptions& opt, float mean_diag, const std::function<bool(float damp)>& factor,
                        GptqResult* r) {
  double pd = opt.percdamp;
  for (int attempt = 0;; ++attempt) {
    const float damp = float(pd) * mean_diag;
    if (factor(damp)) {
      r->percdamp = pd;
      r->damp = damp;
      r->damp_retries = attempt;
      return;
    }
    if (attempt >= opt.max_damp_retries) {
      throw Error("Hessian is not positive definite even with damping " + fmt_g(pd) + " of the mean diagonal (" +
                      std::to_string(attempt + 1) + " attempts); check the calibration data for this weight",
                  "", opt.name);
    }
    const double next = pd * opt.damp_growth;
    if (opt.log) {
      opt.log(opt.name + ": Hessian not positive definite with damp " + fmt_g(pd) + " of mean diag; retrying with " +
              fmt_g(next));
    }
    pd = next;
  }
}

double quadratic_loss(const float* H, const float* E, int64_t K, int64_t N) {
  const Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> h(H, K, K);
  const Eigen::Map<const MatrixRowF> e(E, K, N);
  const Eigen::MatrixXd hd = h.cast<double>();
  const Eigen::MatrixXd ed = e.cast<double>();
  return 0.5 * (ed.transpose() * hd * ed).trace();
}

GptqResult gptq_quantize(const float* W, int64_t K, int64_t N, const float* H,
                         const GptqOptions& opt) {
  if (K <= 0 || N <= 0) throw Error("empty weight", "", opt.name);
  pin_eigen_blocking();  // the same summation order on every CPU (eigen_blocking.h)
  if (opt.block_size <= 0) throw Error("block size must be positive", "", opt.name);
  Plan p;
  p.W = W;
  p.K = K;
  p.N = N;
  check_effective_group_size(K, opt.group_size, "", opt.name);
  p.gs = opt.group_size;
  p.G = group_count(K, p.gs);
  p.bs = opt.block_size;
  p.grouped = p.G > 1;
  p.dynamic = p.grouped && !opt.static_groups;
  p.mode = opt.zero_mode;
  p.range_search = opt.range_search;

  GptqResult r;
  r.K = K;
  r.N = N;
  r.group_size = p.gs;
  r.G = p.G;
  r.q.assign(size_t(K * N), 0);
  r.scale.assign(size_t(p.G * N), 0.0f);
  r.zq.assign(size_t(p.G * N), 0.0f);
  if (opt.want_w_hat) r.w_hat.assign(size_t(K * N), 0.0f);
  if (opt.want_tie_margin) r.tie_margin.assign(size_t(K * N), 1.0f);

  // Step 2 (per-row): parameters of the untouched W.
  if (!p.grouped) minmax_find_params(W, K, N, N, p.mode, &p.fixed, p.range_search);

  // Step 1: dead inputs.
  const Eigen::Map<const MatrixRowF> Hm(H, K, K);
  MatrixRowF Hw = Hm;
  p.dead.assign(size_t(K), 0);
  for (int64_t k = 0; k < K; ++k) {
    if (!std::isfinite(Hw(k, k))) throw Error("Hessian diagonal is not finite at " + std::to_string(k), "", opt.name);
    if (Hw(k, k) == 0.0f) {
      Hw(k, k) = 1.0f;
      p.dead[size_t(k)] = 1;
      r.dead.push_back(int32_t(k));
    }
  }

  // Step 2 (static groups): contiguous groups of the dead-zeroed W.
  if (p.grouped && !p.dynamic) {
    p.fixed.resize(p.G * N);
    MinMaxParams gp;
    MatrixRowF rows;
    for (int64_t g = 0; g < p.G; ++g) {
      const int64_t k0 = g * p.gs, k1 = std::min(K, k0 + p.gs);
      rows = Eigen::Map<const MatrixRowF>(W + k0 * N, k1 - k0, N);
      for (int64_t k = k0; k < k1; ++k) {
        if (p.dead[size_t(k)]) rows.row(k - k0).setZero();
      }
      minmax_find_params(rows.data(), k1 - k0, N, N, p.mode, &gp, p.range_search);
      std::copy(gp.scale.begin(), gp.scale.end(), p.fixed.scale.begin() + g * N);
      std::copy(gp.zq.begin(), gp.zq.end(), p.fixed.zq.begin() + g * N);
    }
  }

  // Step 3: order.
  p.order.resize(size_t(K));
  std::iota(p.order.begin(), p.order.end(), 0);
  if (opt.act_order) {
    std::stable_sort(p.order.begin(), p.order.end(),
                     [&](int32_t a, int32_t b) { return Hw(a, a) > Hw(b, b); });
    r.perm = p.order;
    MatrixRowF Hp(K, K);
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t j = 0; j < K; ++j) Hp(i, j) = Hw(p.order[size_t(i)], p.order[size_t(j)]);
    }
    Hw = std::move(Hp);
  }

  // Step 4: damping and the inverse factor, with retries.
  double diag_sum = 0;
  for (int64_t k = 0; k < K; ++k) diag_sum += Hw(k, k);
  const float mean_diag = float(diag_sum / double(K));
  if (opt.hinv_upper) {
    p.U = Eigen::Map<const MatrixRowF>(opt.hinv_upper, K, K);
    p.V = p.U.triangularView<Eigen::Upper>();
    invert_upper_triangular(p.V);
    r.percdamp = opt.percdamp;
    r.damp = float(opt.percdamp) * mean_diag;
  } else {
    gptq_damped_factor(opt, mean_diag, [&](float damp) {
      return gptq_inverse_hessian_factor(Hw, damp, &p.U, &p.V, std::max(1, opt.threads));
    }, &r);
  }

  MinMaxResult rtn;
  if (opt.want_rtn_loss) {
    rtn = rtn_quantize(W, K, N, p.gs, p.mode);
    p.rtn = &rtn;
  }

  // Step 5, chunk by chunk.
  const int64_t C = std::max<int64_t>(1, opt.chunk_cols);
  const int64_t nchunks = (N + C - 1) / C;
  std::vector<ChunkStats> stats(static_cast<size_t>(nchunks));
  parallel_for(nchunks, std::max(1, opt.threads), [&](int64_t c) {
    const int64_t n0 = c * C;
    run_chunk(p, n0, std::min(C, N - n0), &r, &stats[size_t(c)]);
  });
  for (const ChunkStats& s : stats) {
    r.loss += s.loss;
    if (p.rtn) r.rtn_loss = std::max(r.rtn_loss, 0.0) + s.rtn_loss;
  }

  if (!p.dynamic) {
    for (int64_t g = 0; g < p.G; ++g) {
      std::copy_n(p.fixed.scale.begin() + g * N, N, r.scale.begin() + g * N);
      std::copy_n(p.fixed.zq.begin() + g * N, N, r.zq.begin() + g * N);
    }
  }
  r.g_idx.resize(size_t(K));
  for (int64_t j = 0; j < K; ++j) {
    const int64_t k = p.order[size_t(j)];
    r.g_idx[size_t(k)] = int32_t(p.dynamic ? j / p.gs : k / p.gs);
  }
  r.scale16.resize(size_t(p.G * N));
  r.zero16.resize(size_t(p.G * N));
  MinMaxParams gp;
  for (int64_t g = 0; g < p.G; ++g) {
    gp.scale.assign(r.scale.begin() + g * N, r.scale.begin() + (g + 1) * N);
    gp.zq.assign(r.zq.begin() + g * N, r.zq.begin() + (g + 1) * N);
    minmax_storage_params(gp, p.mode, &r.scale16[size_t(g * N)], &r.zero16[size_t(g * N)]);
  }
  return r;
}

}  // namespace tl
