// GPTQ (IST-DASLab/gptq `GPTQ.fasterquant`, commit 2d65066) ported to Eigen in float32, with
// the asymmetric min-max quantizer of minmax_quantizer.h. Same operations in the same order as
// upstream, so a weight quantized here gets upstream's codes (tests/convert/test_gptq_golden.cpp
// checks every golden case); only the Cholesky/GEMM summation orders differ, which can flip a
// code sitting on a near-tie of round() (and then that output column's later codes).
//
// Orientation: W[k, n] row-major, K = in_features (the axis GPTQ walks), N = out_features.
// Upstream works on W_pt[n, k]: its "columns" are our rows k.
//
// Steps (upstream's, with what they mean here):
//  1. Dead inputs: H[k, k] == 0 -> H[k, k] = 1 and W[k, :] = 0 (W_hat there is exactly 0).
//  2. Per-row (group_size == K) parameters come from W *before* step 1 (upstream calls
//     find_params on the untouched weight); static groups from W after step 1.
//  3. Act-order: rows quantized by decreasing diag(H) (a stable sort; perm[j] = the row k
//     quantized j-th). With groups, upstream's dynamic groups then run along the permuted
//     order, which scatters a group over K (g_idx[k] = position(k) / gs) -- not storable as
//     TinyLoop/Marlin contiguous groups. `static_groups` fixes each contiguous group's
//     parameters from W up front and keeps g_idx[k] = k / gs while quantizing in act-order
//     (upstream's static_groups=True); gptq-quantize always uses it with --act-order.
//  4. damp = percdamp * mean(diag(H)) (float32), H += damp I, U = upper Cholesky factor of
//     H^-1 (H^-1 = U^T U). Computed as U = V^-1 with V V^T = H, V upper (the Cholesky factor
//     of the row/column-reversed H, reversed back): one Cholesky and one triangular inverse
//     instead of upstream's cholesky -> cholesky_inverse -> cholesky; same factor.
//     Not positive definite: retry with percdamp * damp_growth^t (logged), then tl::Error.
//  5. Blocks of `block_size` rows: each row j is quantized (dynamic groups: parameters from
//     the block-start state of rows [j, j + gs) whenever j % gs == 0 -- upstream reads its
//     outer W there, which lags the in-block updates), err = (w - q) / U[j, j], the rest of
//     the block gets the rank-1 update w_r -= U[j, r] * err, and after the block the lazy
//     update W[i2:, :] -= U[i1:i2, i2:]^T Err (a GEMM).
//
// Output columns n never interact, so the weight is cut into column chunks of fixed width
// (`chunk_cols`), each run start to finish by one thread; results do not depend on the
// number of threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "core/half.h"
#include "libconvert/minmax_quantizer.h"

namespace tl {

using MatrixRowF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct GptqOptions {
  double percdamp = 0.01;       // damping as a fraction of mean(diag(H))
  int64_t group_size = 128;     // effective, 0 < group_size <= K (== K: per row; core/group_size.h)
  int64_t block_size = 128;     // rows per lazy-update block
  bool act_order = false;
  bool static_groups = false;   // see step 3 above
  ZeroMode zero_mode = ZeroMode::kInt;
  bool range_search = false;    // each group's range searched (minmax_quantizer.h; kInt only)
  int threads = 1;
  int64_t chunk_cols = 256;     // output columns per work item (fixed: thread-count independent)
  int max_damp_retries = 4;     // extra attempts after the first when H is not positive definite
  double damp_growth = 10.0;    // percdamp multiplier per retry
  bool want_w_hat = false;      // fill GptqResult::w_hat
  bool want_rtn_loss = false;   // fill GptqResult::rtn_loss (costs ~K^2 N flops)
  bool want_tie_margin = false; // fill GptqResult::tie_margin (tests: explains code flips)
  std::string name;             // weight name for errors and log lines
  std::function<void(const std::string&)> log;  // damping retries; may be empty
  // Tests only: use this [K, K] row-major upper factor U (rows/columns in quantization order)
  // instead of computing it from H (the golden files store upstream's).
  const float* hinv_upper = nullptr;
};

struct GptqResult {
  int64_t K = 0, N = 0, group_size = 0, G = 0;  // group_size effective (== K for per-row)
  std::vector<uint8_t> q;                       // [K, N] codes, original row order
  std::vector<float> scale, zq;                 // [G, N] float32 (zq: z or float zero)
  std::vector<half_bits> scale16, zero16;       // [G, N] as stored
  std::vector<int32_t> g_idx;                   // [K] group of row k
  std::vector<int32_t> perm;                    // [K] act-order only: row quantized j-th
  std::vector<int32_t> dead;                    // rows with H[k, k] == 0
  std::vector<float> w_hat;                     // [K, N] upstream's float32 W_hat (want_w_hat)
  std::vector<float> tie_margin;                // [K, N] |frac(x) - 1/2| of each value x that
                                                // round() got (want_tie_margin); ~0: a tie
  double loss = 0;           // upstream's printed error: sum(Losses) = 0.5 tr(E^T H_damped E)
  double rtn_loss = -1;      // same measure for plain RTN of W (want_rtn_loss), else -1
  double percdamp = 0;       // the percdamp that succeeded
  float damp = 0;            // the absolute damping added to diag(H)
  int damp_retries = 0;
  bool contiguous_groups() const;  // g_idx[k] == k / group_size (storable as TinyLoop)
};

// W: [K, N] row-major; H: [K, K] row-major symmetric (add_batch's H, before fix-ups).
GptqResult gptq_quantize(const float* W, int64_t K, int64_t N, const float* H,
                         const GptqOptions& opt);

// U with (H + damp I)^-1 = U^T U (upper; H symmetric, already permuted), and V = U^-1
// (H + damp I = V V^T) when v is non-null. False when H + damp I is not positive definite.
bool gptq_inverse_hessian_factor(const MatrixRowF& H, float damp, MatrixRowF* u, MatrixRowF* v,
                                 int threads = 1);

// Step 4's damping with its retries, for both devices: factor(damp) with damp = percdamp *
// mean_diag (float32), percdamp growing by damp_growth up to max_damp_retries times (each retry
// logged); fills r's percdamp, damp and damp_retries; tl::Error when every attempt fails.
void gptq_damped_factor(const GptqOptions& opt, float mean_diag, const std::function<bool(float damp)>& factor,
                        GptqResult* r);

// In-place inverse of an upper-triangular matrix (the strictly lower part is set to 0).
void invert_upper_triangular(Eigen::Ref<MatrixRowF> t, int threads = 1);

// Peak bytes gptq_quantize allocates for one [K, N] weight (the caller's W and H not counted):
// H's working copy, the Cholesky input and factor, U and V (5 K^2 floats), the per-chunk
// copies of W and the codes / parameters / RTN comparison (about 3 K N floats).
inline uint64_t gptq_peak_bytes(int64_t K, int64_t N) {
  return uint64_t(K) * uint64_t(K) * 4 * 5 + uint64_t(K) * uint64_t(N) * 4 * 3;
}

// 0.5 * tr(E^T H E) in double (the quadratic loss GPTQ minimizes), E = W_hat - W [K, N].
double quadratic_loss(const float* H, const float* E, int64_t K, int64_t N);

}  // namespace tl
