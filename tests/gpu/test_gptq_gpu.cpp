// gptq-quantize's GPU path (libgpu/gptq_gpu.h, libgpu/gptq_device.h) against upstream's golden
// GPTQ outputs and against the CPU port, on fresh random data:
//  - golden: with upstream's own inverse-Hessian factor, upstream's codes exactly (the sweep
//    follows upstream's float32 operations); with the GPU's cuSOLVER factor, the README's parity
//    gate the CPU port passes (tests/convert/test_gptq_golden.h);
//  - random layers, every parameter path (per row, dynamic groups smaller / equal / larger than
//    the block, static groups with act-order, float zero, dead inputs, a short last block,
//    N not a multiple of the kernel's 32 columns): the GPU's codes differ from the CPU's only in
//    columns whose first difference sits on a near-tie of round(); with the range search, the
//    CPU's ranges but where two grid steps' errors nearly tie;
// Sequential calibration and the tool on the GPU: test_gptq_gpu_sequential.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "convert/test_gptq_golden.h"
#include "core/fault_injection.h"
#include "core/group_size.h"
#include "core/half.h"
#include "cuda/cuda_errors.h"
#include "formats/calib_file.h"
#include "formats/token_file.h"
#include "gpu_support/gpu_test_util.h"
#include "libconvert/gptq.h"
#include "jobs/gptq_quantize_tool.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"
#include "libconvert/token_calibration.h"
#include "libgpu/gptq_device.h"
#include "libgpu/gptq_gpu.h"

namespace {

using tl_test::GptqCalib;
using tl_test::GptqCase;

TEST_CASE("gptq gpu golden: upstream's inverse-Hessian factor gives upstream's codes exactly") {
  tl::gpu::GpuGptq gpu;
  for (const char* name : tl_test::kCases) {
    const GptqCase g = tl_test::load_case(name);
    if (g.Hinv.empty()) continue;  // stored for K <= 256 only
    CAPTURE(g.name);
    const GptqCalib c = tl_test::load_calib(std::to_string(g.K) + "x" + std::to_string(g.N));
    tl::GptqOptions o = tl_test::options_for(g);
    o.hinv_upper = g.Hinv.data();
    const tl::GptqResult r = gpu.quantize_host(c.W.data(), c.K, c.N, c.H.data(), o);
    const tl_test::CodeDiff d = tl_test::diff_codes(g, r);
    CHECK_MESSAGE(d.cols == 0, g.name << ": " << d.codes << " codes in " << d.cols << " columns differ\n" << d.report);
    tl_test::check_params(g, r, d.col_differs);
    CHECK(r.g_idx == g.g_idx);
    if (g.actorder) CHECK(r.perm == g.perm);
  }
}

TEST_CASE("gptq gpu golden: the GPU's own factor passes the parity gate in every case") {
  tl::gpu::GpuGptq gpu;
  int64_t flips = 0, cols = 0;
  for (const char* name : tl_test::kCases) {
    const GptqCase g = tl_test::load_case(name);
    CAPTURE(g.name);
    const GptqCalib c = tl_test::load_calib(std::to_string(g.K) + "x" + std::to_string(g.N));
    const tl::GptqResult r = gpu.quantize_host(c.W.data(), c.K, c.N, c.H.data(), tl_test::options_for(g));
    const tl_test::CodeDiff d = tl_test::check_parity_gate(g, c, r);
    flips += d.codes;
    cols += d.cols;
  }
  MESSAGE("GPU: total near-tie code flips vs upstream: " << flips << " codes in " << cols << " columns");
}

// ---- GPU against CPU on random layers ----

// A value whose |frac(x) - 1/2| is below this is a near-tie for two float32 computations of the
// same GPTQ that differ in their Cholesky and GEMM summation orders: the inverse factors agree
// to ~K * 2^-24 * cond relative (K <= 512, a damped H of 2K random rows: cond ~ 10), ~3e-4 at
// most, and the error feedback of a column adds that up over at most K rows of |x| <= 15 with
// errors of +-1/2 -- so |x_gpu - x_cpu| stays below ~1e-3 until the first flip. A wrong row,
// parameter or update would move codes at margins spread over [0, 1/2].
constexpr float kGpuNearTie = 1e-3f;

struct LayerCase {
  const char* what;
  int64_t K, N, group, block;  // group: rows (== K: per row)
  bool act_order;
  tl::ZeroMode zero;
  int dead;  // dead input rows
};

const LayerCase kLayers[] = {
    {"g128 dynamic, 3 blocks", 384, 256, 128, 128, false, tl::ZeroMode::kInt, 0},
    {"g64 dynamic (group < block), N % 32 != 0", 320, 200, 64, 128, false, tl::ZeroMode::kInt, 0},
    {"g256 dynamic (group > block)", 512, 128, 256, 128, false, tl::ZeroMode::kInt, 0},
    {"per row, act-order", 256, 96, 256, 128, true, tl::ZeroMode::kInt, 0},
    {"g128 static act-order, float zero", 384, 160, 128, 128, true, tl::ZeroMode::kFloat, 0},
    {"g32 dynamic, dead inputs, block 64, short last block", 288, 64, 32, 64, false, tl::ZeroMode::kInt, 5},
    {"g128 static act-order, dead inputs", 256, 128, 128, 128, true, tl::ZeroMode::kInt, 3},
};

// GPTQ's options for a case (act-order with static groups, as upstream's act-order runs).
tl::GptqOptions options_of(const LayerCase& lc) {
  tl::GptqOptions o;
  o.group_size = lc.group;
  o.block_size = lc.block;
  o.act_order = lc.act_order;
  o.static_groups = lc.act_order;
  o.zero_mode = lc.zero;
  return o;
}

// H = 2/n X^T X of n = 2K rows whose columns have spread scales (so act-order reorders).
std::vector<float> random_hessian(int64_t K, int dead, std::mt19937_64& rng) {
  const int64_t n = 2 * K;
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(0.2, 2.0);
  std::vector<double> scale(static_cast<size_t>(K));
  for (double& s : scale) s = ud(rng);
  std::vector<double> X(static_cast<size_t>(n * K));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < K; ++k) X[size_t(r * K + k)] = nd(rng) * scale[size_t(k)];
  for (int d = 0; d < dead; ++d) {
    const int64_t k = (int64_t(d) * 37 + 11) % K;
    for (int64_t r = 0; r < n; ++r) X[size_t(r * K + k)] = 0;
  }
  std::vector<float> H(static_cast<size_t>(K * K));
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += X[size_t(r * K + i)] * X[size_t(r * K + j)];
      H[size_t(i * K + j)] = H[size_t(j * K + i)] = float(2.0 * s / double(n));
    }
  return H;
}

TEST_CASE("gptq gpu vs cpu: random layers, codes differ only after near-ties") {
  std::mt19937_64 rng(tl::test::test_seed());
  tl::gpu::GpuGptq gpu, split;
  // The 64-bit potrf and the split triangular inverse, which production takes past 2^31
  // elements (K > 46340), here on every case: at most 4096 elements whole (K = 256: blocks of
  // 16 rows, four levels of splits; K = 512: six).
  split.set_max_whole_elements(4096);
  float worst_margin = 0;
  for (const LayerCase& lc : kLayers) {
    CAPTURE(lc.what);
    const int64_t K = lc.K, N = lc.N;
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> W(static_cast<size_t>(K * N));
    for (float& w : W) w = nd(rng);
    const std::vector<float> H = random_hessian(K, lc.dead, rng);
    tl::GptqOptions o = options_of(lc);
    o.want_rtn_loss = true;
    o.want_tie_margin = true;
    const tl::GptqResult c = tl::gptq_quantize(W.data(), K, N, H.data(), o);
    o.want_tie_margin = false;
    for (tl::gpu::GpuGptq* gp : {&gpu, &split}) {
      CAPTURE(gp == &split);
      const tl::GptqResult g = gp->quantize_host(W.data(), K, N, H.data(), o);

      CHECK(g.dead == c.dead);
      CHECK(int(g.dead.size()) == lc.dead);
      CHECK(g.perm == c.perm);
      CHECK(g.g_idx == c.g_idx);
      CHECK(g.damp == c.damp);  // the same float32 product of the same double mean
      int64_t cols = 0, codes = 0, unexplained = 0;
      std::vector<bool> col_differs(static_cast<size_t>(N), false);
      for (int64_t n = 0; n < N; ++n) {
        int64_t first = -1;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t k = c.perm.empty() ? j : c.perm[size_t(j)];
          if (g.q[size_t(k * N + n)] != c.q[size_t(k * N + n)]) {
            if (first < 0) first = k;
            ++codes;
          }
        }
        if (first < 0) continue;
        ++cols;
        col_differs[size_t(n)] = true;
        const float m = c.tie_margin[size_t(first * N + n)];
        worst_margin = std::max(worst_margin, m);
        if (!(m < kGpuNearTie)) {
          ++unexplained;
          MESSAGE("column " << n << ": first difference at row " << first << " has tie margin " << m);
        }
      }
      MESSAGE(lc.what << (gp == &split ? " (split factor)" : "") << ": " << codes << " codes in " << cols << " of " << N
                      << " columns differ");
      CHECK(unexplained == 0);
      CHECK(cols <= std::max<int64_t>(1, N / 50));
      // Parameters that are a function of W alone (per row, static groups) are bit-exact; those
      // of dynamic groups in columns whose codes all match differ by at most one float16 step.
      const bool dynamic = lc.group < K && !lc.act_order;
      int64_t bad = 0;
      for (int64_t gi = 0; gi < c.G; ++gi)
        for (int64_t n = 0; n < N; ++n) {
          if (col_differs[size_t(n)]) continue;
          const size_t i = size_t(gi * N + n);
          const int64_t steps = dynamic && gi > 0 ? 1 : 0;
          if (tl_test::half_steps(g.scale16[i], c.scale16[i]) > steps || tl_test::half_steps(g.zero16[i], c.zero16[i]) > steps)
            ++bad;
        }
      CHECK(bad == 0);
      // The loss (a double sum either way) moves with the factor only (no flips: ~1e-5).
      CHECK(std::fabs(g.loss - c.loss) <= (cols ? 1e-3 : 1e-4) * c.loss);
      // RTN's loss: the same E, a float32 GEMM on each side.
      CHECK(std::fabs(g.rtn_loss - c.rtn_loss) <= 1e-4 * c.rtn_loss);
      CHECK(g.loss < g.rtn_loss);
    }
  }
  MESSAGE("largest tie margin at a first difference: " << worst_margin << " (bound " << kGpuNearTie << ")");
}

// ---- The factor's triangular inverse: whole (cuSOLVER's trtri) or split in blocks ----

// A random lower-triangular L: diagonal in [1, 2], strict lower in [-1/2, 1/2] / sqrt(n), so that
// L^-1's off-diagonal entries are far above rounding (a transposed or mis-signed block product
// moves them by ~1e-3). Each inverse X, whole (cuSOLVER's trtri) and split (blocks of <= 8 rows:
// every size but n = 1 splits, n = 1100 through the 256-row rounding of the first split), is held
// against the float64 inverse X* elementwise: |X - X*| <= c n u (|X*| |L| |X*|), the componentwise
// forward-error bound of triangular inversion (Higham, Accuracy and Stability of Numerical
// Algorithms, 2nd ed., sections 8.2 and 14.2; block methods built of triangular inverses and
// matrix products keep it, since a product satisfies |fl(A B) - A B| <= n u |A| |B| in any
// summation order), c = 2. Both sides measure at ~0.02 of it; a block product with a transposed
// factor or a wrong sign exceeds it by 10^4 and more (a float32 model of the algorithm, numpy).
// The strict upper triangle and the rows past n of the leading dimension hold 7.0, which neither
// may touch.
TEST_CASE("gptq gpu factor: the split triangular inverse meets trtri's componentwise bound and leaves the rest alone") {
  tl::test::Rng rng(77);
  for (const int64_t n : {int64_t(1), int64_t(17), int64_t(300), int64_t(1100)}) {
    CAPTURE(n);
    const int64_t lda = n + 19;
    std::vector<float> L(static_cast<size_t>(lda * n), 7.0f);  // column-major, L[i + j * lda]
    for (int64_t j = 0; j < n; ++j) {
      L[size_t(j + j * lda)] = float(rng.uniform(1.0, 2.0));
      for (int64_t i = j + 1; i < n; ++i)
        L[size_t(i + j * lda)] = float(rng.uniform(-0.5, 0.5) / std::sqrt(double(n)));
    }
    // X* by forward substitution in float64, then the bound's |X*| |L| |X*| (all lower, column-major).
    auto at = [&](const std::vector<double>& m, int64_t i, int64_t j) -> double { return m[size_t(i + j * n)]; };
    std::vector<double> Xs(static_cast<size_t>(n * n), 0.0), T(Xs), E(Xs);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = j; i < n; ++i) {
        double sum = i == j ? 1.0 : 0.0;
        for (int64_t k = j; k < i; ++k) sum -= double(L[size_t(i + k * lda)]) * at(Xs, k, j);
        Xs[size_t(i + j * n)] = sum / double(L[size_t(i + i * lda)]);
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = j; i < n; ++i) {
        double t = 0;
        for (int64_t k = j; k <= i; ++k) t += std::fabs(double(L[size_t(i + k * lda)])) * std::fabs(at(Xs, k, j));
        T[size_t(i + j * n)] = t;
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = j; i < n; ++i) {
        double e = 0;
        for (int64_t k = j; k <= i; ++k) e += std::fabs(at(Xs, i, k)) * at(T, k, j);
        E[size_t(i + j * n)] = 2.0 * double(n) * tl::test::kU32 * e;
      }
    for (int split = 0; split < 2; ++split) {
      tl::gpu::GpuGptq gpu;
      if (split) gpu.set_max_whole_elements(8 * lda);
      tl::test::DeviceBuffer<float> A(L);
      REQUIRE(gpu.invert_lower(A.get(), n, lda));
      const std::vector<float> x = A.download();
      int64_t touched = 0, over = 0;
      double worst = 0;
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < lda; ++i)
          if ((i < j || i >= n) && x[size_t(i + j * lda)] != 7.0f) ++touched;
        for (int64_t i = j; i < n; ++i) {
          const double err = std::fabs(double(x[size_t(i + j * lda)]) - at(Xs, i, j)), bound = at(E, i, j);
          worst = std::max(worst, err / bound);
          if (!(err <= bound)) ++over;
        }
      }
      MESSAGE("n " << n << (split ? " split" : " whole") << ": worst error " << worst << " of its bound");
      CHECK(touched == 0);
      CHECK(over == 0);
    }
  }
}

// The size that failed: trtri refused a whole 53248 x 53248 factor (405B's mlp_down). Past 2^31
// elements (n = 46341) the default factor splits; a bidiagonal L (1 on the diagonal, -1/2 below)
// has L^-1_ij = 2^-(i - j), every product and sum of which is exact in float32 (only zeros are
// added), so the columns read back, around the split too, must hold exactly those powers (or
// zero where 2^-(i-j) is below float32's normal range, if the library flushes subnormals). 8.6 GB;
// skipped with a message where the device has less free.
TEST_CASE("gptq gpu factor: a triangular inverse past 2^31 elements, exact on a bidiagonal matrix") {
  const int64_t n = 46341;
  static_assert(46341ll * 46341ll > tl::gpu::GpuGptq::kMaxWholeElements, "past the whole limit");
  size_t free_bytes = 0, total = 0;
  TL_CUDA_THROW(cudaMemGetInfo(&free_bytes, &total));
  const size_t bytes = size_t(n) * size_t(n) * sizeof(float);
  if (free_bytes < bytes + (size_t(1) << 30)) {
    MESSAGE("skipped: needs " << bytes / 1e9 << " GB, " << free_bytes / 1e9 << " GB free");
    return;
  }
  tl::test::DeviceBuffer<float> A(size_t(n) * size_t(n));
  A.zero();
  const std::vector<float> ones(static_cast<size_t>(n), 1.0f), halves(static_cast<size_t>(n), -0.5f);
  const float seven = 7.0f;
  // The diagonal and the subdiagonal, strided writes of a column each.
  TL_CUDA_THROW(cudaMemcpy2D(A.get(), size_t(n + 1) * sizeof(float), ones.data(), sizeof(float), sizeof(float), size_t(n),
                             cudaMemcpyHostToDevice));
  TL_CUDA_THROW(cudaMemcpy2D(A.get() + 1, size_t(n + 1) * sizeof(float), halves.data(), sizeof(float), sizeof(float),
                             size_t(n - 1), cudaMemcpyHostToDevice));
  const int64_t half = n / 2 - (n / 2) % 256;  // where the first split falls (gptq_gpu.cpp)
  const int64_t cols[] = {0, 1, half - 2, half - 1, half, half + 1, n / 3, n - 2, n - 1};
  for (const int64_t j : cols)  // a marker above the diagonal, which must stay
    if (j > 0) TL_CUDA_THROW(cudaMemcpy(A.get() + j * n + (j - 1), &seven, sizeof(float), cudaMemcpyHostToDevice));
  tl::gpu::GpuGptq gpu;
  REQUIRE(gpu.invert_lower(A.get(), n, n));
  int64_t wrong = 0;
  for (const int64_t j : cols) {
    std::vector<float> col(static_cast<size_t>(n));
    TL_CUDA_THROW(cudaMemcpy(col.data(), A.get() + j * n, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost));
    if (j > 0 && col[size_t(j - 1)] != 7.0f) ++wrong;
    for (int64_t i = j; i < n; ++i) {
      const float want = std::ldexp(1.0f, -int(std::min<int64_t>(i - j, 200)));
      const float got = col[size_t(i)];
      const bool ok = got == want || (want < std::numeric_limits<float>::min() && got == 0.0f);
      if (!ok && wrong++ < 5) MESSAGE("column " << j << " row " << i << ": " << got << ", want 2^-" << (i - j));
    }
  }
  CHECK(wrong == 0);
}

// The range search (minmax_quantizer.h) on the GPU: the grid's steps shared by a column's four
// sweep lanes (dynamic groups) or walked by one thread (per row, static groups). The CPU sums
// |W_hat - w|^2.4 with glibc's powf, the GPU with CUDA's (a few ulp): the two pick different
// steps only where two steps' errors agree to a few ulp of their sum, a rare near-tie. A
// different pick moves the scale by a grid step, >= 1 %, ten or more float16 steps; the other
// differences are the factor's last bits in a dynamic group's rows (one float16 step, as in the
// test above). So, in columns whose codes all match: scales more than 4 float16 steps apart (a
// different pick) in <= 1 % of (group, column) pairs, and <= 1 step apart in the rest past a
// dynamic first group (bit-exact otherwise); a flipped pick moves a column's later rows (<= 5 %
// of columns differ in a code). Weights with an outlier per group make the search shrink; each
// case checks that it did (the searched scales differ from min-max's in >= 1/4 of the groups).
TEST_CASE("gptq gpu vs cpu: the range search picks the CPU's ranges but for near-equal errors") {
  std::mt19937_64 rng(tl::test::test_seed());
  tl::gpu::GpuGptq gpu;
  const LayerCase cases[] = {
      {"g64 dynamic, range search", 256, 200, 64, 128, false, tl::ZeroMode::kInt, 0},
      {"g128 static act-order, range search", 256, 128, 128, 128, true, tl::ZeroMode::kInt, 2},
      {"per row, range search", 256, 96, 256, 64, false, tl::ZeroMode::kInt, 0},
  };
  for (const LayerCase& lc : cases) {
    CAPTURE(lc.what);
    const int64_t K = lc.K, N = lc.N;
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::uniform_int_distribution<int64_t> row(0, lc.group - 1);
    std::vector<float> W(static_cast<size_t>(K * N));
    for (float& w : W) w = nd(rng);
    for (int64_t g0 = 0; g0 < K; g0 += lc.group)  // an outlier per group and column: worth shrinking past
      for (int64_t n = 0; n < N; ++n) W[size_t((g0 + row(rng)) * N + n)] = 0.4f * (n % 2 ? 1.0f : -1.0f);
    const std::vector<float> H = random_hessian(K, lc.dead, rng);
    tl::GptqOptions o = options_of(lc);
    const tl::GptqResult plain = gpu.quantize_host(W.data(), K, N, H.data(), o);
    o.range_search = true;
    const tl::GptqResult c = tl::gptq_quantize(W.data(), K, N, H.data(), o);
    const tl::GptqResult g = gpu.quantize_host(W.data(), K, N, H.data(), o);
    const bool dynamic = lc.group < K && !lc.act_order;
    std::vector<bool> col_differs(static_cast<size_t>(N), false);
    int64_t cols = 0, other_pick = 0, off = 0, searched = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        if (g.q[size_t(k * N + n)] != c.q[size_t(k * N + n)]) {
          col_differs[size_t(n)] = true;
          ++cols;
          break;
        }
    for (int64_t gi = 0; gi < c.G; ++gi)
      for (int64_t n = 0; n < N; ++n) {
        const size_t i = size_t(gi * N + n);
        searched += g.scale16[i] != plain.scale16[i];
        if (col_differs[size_t(n)]) continue;
        const int64_t steps = tl_test::half_steps(g.scale16[i], c.scale16[i]);
        const int64_t allowed = dynamic && gi > 0 ? 1 : 0;
        if (steps > 4) ++other_pick;
        else if (steps > allowed || tl_test::half_steps(g.zero16[i], c.zero16[i]) > allowed) ++off;
      }
    MESSAGE(lc.what << ": " << other_pick << " of " << c.G * N << " groups picked another step, " << cols << " of "
                    << N << " columns differ in a code; " << searched << " groups searched away from min-max");
    CHECK(searched >= c.G * N / 4);
    CHECK(other_pick <= std::max<int64_t>(1, c.G * N / 100));
    CHECK(off == 0);
    CHECK(cols <= std::max<int64_t>(1, N / 20));
    CHECK(std::fabs(g.loss - c.loss) <= 1e-2 * c.loss);
  }
}

TEST_CASE("gptq gpu: refuses what the CPU refuses, and blocks above its kernel's limit") {
  tl::gpu::GpuGptq gpu;
  const int64_t K = 64, N = 32;
  std::vector<float> W(size_t(K * N), 0.1f), H(size_t(K * K), 0.0f);
  for (int64_t k = 0; k < K; ++k) H[size_t(k * K + k)] = -1.0f;  // negative definite
  tl::GptqOptions o;
  o.group_size = K;
  o.max_damp_retries = 1;
  CHECK_THROWS_WITH(gpu.quantize_host(W.data(), K, N, H.data(), o), doctest::Contains("not positive definite"));
  o.block_size = 512;
  CHECK_THROWS_WITH(gpu.quantize_host(W.data(), K, N, H.data(), o), doctest::Contains("block size 512"));
  o.block_size = 128;
  o.range_search = true;
  o.zero_mode = tl::ZeroMode::kFloat;
  CHECK_THROWS_WITH(gpu.quantize_host(W.data(), K, N, H.data(), o), doctest::Contains("integer zero points"));
}

}  // namespace
