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
//  - sequential calibration on a random TinyLoop model (pre blocks, a loop block, the head):
//    the same weights in the same order, Hessians from fp16 inputs within their rounding bound,
//    the same sample counts, GPTQ losses within a few percent; activations kept on the host give
//    the same bytes, and so does a second run (determinism);
//  - the tool: `--device cuda` twice gives byte-identical files; a run the fault hook fails late
//    keeps its completed stages, and --resume writes the uninterrupted run's bytes.
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

// ---- sequential calibration ----

tl::ModelConfig small_config() {
  tl::ModelConfig c;
  c.d_model = 64;
  c.n_heads = 2;  // d_head 32: the calibration's tensor-core attention (attention_tc_supports)
  c.n_kv_heads = 1;
  c.d_head = 32;
  c.ffn = 160;
  c.vocab = 300;
  c.n_pre = 2;
  c.n_loop = 1;
  c.loops = 2;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000;
  return c;
}

struct CalibOut {
  std::vector<std::string> order;              // quantized, in the order they came
  std::map<std::string, tl::Hessian> hessians;
  std::map<std::string, tl::GptqResult> results;
  std::map<std::string, int64_t> nsamples;
};

tl::GptqOptions calib_options(int64_t K) {
  tl::GptqOptions o;
  o.group_size = K;  // per row: every weight of the small model takes it
  o.want_rtn_loss = true;
  return o;
}

CalibOut run_gpu(const std::string& model, const std::vector<int32_t>& tokens, int64_t T, int64_t n_seq,
                 const std::set<std::string>& selected, bool on_host) {
  CalibOut out;
  auto dev = tl::gpu::make_gptq_device();
  tl::SequentialCalls calls;
  calls.options = [](const std::string&, int64_t K) { return calib_options(K); };
  calls.quantized = [&](const std::string& name, tl::GptqResult&& r, int64_t ns, double) {
    out.order.push_back(name);
    out.nsamples[name] = ns;
    out.results[name] = std::move(r);
  };
  calls.hessian = [&](const tl::Hessian& h) { out.hessians[h.name] = h; };
  calls.activations_on_host = on_host;
  tl::GptqPhaseTimes t;
  dev->calibrate(model, tokens, T, n_seq, selected, calls, &t);
  CHECK(t.forward > 0);
  CHECK(t.hessian > 0);
  CHECK(t.sweep > 0);
  return out;
}

std::string tmp_dir(const std::string& name);

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST_CASE("gptq gpu calibration: the CPU's sequential mode, block by block") {
  const tl::ModelConfig cfg = small_config();
  const uint64_t seed = tl::test::test_seed();
  tl::ModelWeights w = tl::random_model_weights(cfg, seed);
  const std::string path = tmp_dir("gptq_gpu_calib") + "/model.tinyloop";
  tl::write_model_tinyloop(w, path, tl::DType::F32);
  const int64_t T = 80, n_seq = 12;  // 960 rows: one chunk; two query and key tiles of the attention
  const std::vector<int32_t> tokens = tl::test::random_tokens(T * n_seq, cfg.vocab, 1);
  std::set<std::string> selected;
  for (const std::string& n : w.linear_names()) selected.insert(n);

  const CalibOut gpu = run_gpu(path, tokens, T, n_seq, selected, false);
  REQUIRE(gpu.results.size() == selected.size());
  // The schedule's order: pre.0.*, pre.1.*, loop.0.*, head.
  std::vector<std::string> expect;
  for (const char* p : {"pre.0", "pre.1", "loop.0"})
    for (const char* n : tl::kBlockLinearNames) expect.push_back(std::string(p) + "." + n);
  expect.push_back("head");
  CHECK(gpu.order == expect);

  // The CPU path on the same schedule, fed the GPU's W_hat after each block, so that both see
  // the same weights upstream of every Hessian (the two GPTQs' codes differ at near-ties, and
  // each difference would move every later Hessian): GPTQ on the CPU with its own Hessians.
  CalibOut cpu;
  tl::calibrate_sequential(w, tokens, T, n_seq, selected, [&](std::map<std::string, tl::Hessian>& hs, tl::ModelWeights& mw) {
    for (auto& [name, h] : hs) {
      tl::LinearWeight* l = mw.find_linear(name);
      cpu.results[name] = tl::gptq_quantize(l->W.data(), l->K, l->N, h.H.data(), calib_options(l->K));
      const tl::GptqResult& g = gpu.results.at(name);
      tl::QuantWeight qw;
      qw.name = name;
      qw.K = l->K;
      qw.N = l->N;
      qw.group_size = g.group_size;
      qw.q = g.q;
      qw.scale = g.scale16;
      qw.zero = g.zero16;
      l->W = qw.dequantize();
      cpu.nsamples[name] = h.nsamples;
      cpu.hessians[name] = h;
    }
  });
  for (const std::string& name : expect) {
    CAPTURE(name);
    CHECK(gpu.nsamples.at(name) == cpu.nsamples.at(name));
    // The GPU's Hessian inputs are fp16 (2^-11 relative per element, ~1e-3 at most on a product
    // of two, far less in a sum over rows); pre.0 sees the same embeddings on both sides. Later
    // blocks also see the GPU forward's fp16 activations (about 8 roundings of 2^-11 per block
    // pass, 5 block passes before the head), against the CPU's fp32 forward: 1e-2.
    const double hd = rel_diff(gpu.hessians.at(name).H, cpu.hessians.at(name).H);
    const bool first = name.rfind("pre.0.", 0) == 0;
    MESSAGE(name << ": Hessian relative difference " << hd);
    CHECK(hd <= (first ? 2e-3 : 1e-2));
    // GPTQ's loss on each side's own Hessian: the same optimization of nearly the same problem.
    const double lg = gpu.results.at(name).loss, lc = cpu.results.at(name).loss;
    CHECK(std::fabs(lg - lc) <= 0.05 * lc);
    CHECK(lg < gpu.results.at(name).rtn_loss);
  }

  // Activations in pinned host memory: the same bytes; and a second run: the same bytes.
  for (bool on_host : {true, false}) {
    CAPTURE(on_host);
    const CalibOut again = run_gpu(path, tokens, T, n_seq, selected, on_host);
    for (const std::string& name : expect) {
      CAPTURE(name);
      CHECK(again.hessians.at(name).H == gpu.hessians.at(name).H);
      CHECK(again.results.at(name).q == gpu.results.at(name).q);
      CHECK(again.results.at(name).scale16 == gpu.results.at(name).scale16);
      CHECK(again.results.at(name).zero16 == gpu.results.at(name).zero16);
    }
  }
}

std::string tmp_dir(const std::string& name) {
  const std::string dir = std::string(TL_TEST_TMP) + "/" + name;
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

std::vector<char> file_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

// A random TinyLoop model (fp16 .tinyloop) and 600 calibration tokens in a fresh folder, and the
// tool's options for a sequential GPTQ run on them (15 windows of 40 tokens).
struct ToolModel {
  tl::ModelConfig cfg = small_config();
  std::string dir, model, toks;
  ToolModel(const std::string& name, uint64_t seed) : dir(tmp_dir(name)), model(dir + "/model.tinyloop"),
                                                      toks(dir + "/tokens.u32") {
    tl::write_model_tinyloop(tl::random_model_weights(cfg, tl::test::test_seed() + seed), model, tl::DType::F16);
    tl::write_token_file_u32(toks, tl::test::random_tokens(600, cfg.vocab, seed + 4));
  }
  tl::GptqQuantizeOptions options(const std::string& out) const {
    tl::GptqQuantizeOptions o;
    o.input = model;
    o.output = out;
    o.calib_tokens = toks;
    o.calib_seq = 40;
    o.calib_samples = 15;
    o.quiet = true;
    return o;
  }
};

TEST_CASE("gptq-quantize --device cuda: the same bytes on every run, the CPU path beside it") {
  const ToolModel tm("gptq_gpu_tool", 7);
  const tl::ModelConfig& cfg = tm.cfg;
  const std::string& dir = tm.dir;
  auto dev = tl::gpu::make_gptq_device();
  auto run = [&](const std::string& device, const std::string& out, uint64_t max_memory = 0,
                 const std::string& save_calib = "") {
    tl::GptqQuantizeOptions o = tm.options(out);
    o.group_size = tl::GroupSize::per_row();
    o.device = device;
    o.gpu = dev.get();
    o.threads = 2;
    o.max_memory = max_memory;
    o.save_calib = save_calib;
    return tl::run_gptq_quantize(o);
  };
  // Admission before any work: the host formula of the streamed path, with its numbers.
  CHECK_THROWS_WITH(run("cuda", dir + "/gpu_tool_small.tinyloop", 1 << 16),
                    doctest::Contains("streaming block by block: 2 x one block in float32"));
  REQUIRE(run("cuda", dir + "/gpu_tool_a.tinyloop") == 0);
  REQUIRE(run("cuda", dir + "/gpu_tool_b.tinyloop", 0, dir + "/gpu_tool_calib.h5") == 0);
  REQUIRE(run("cpu", dir + "/gpu_tool_cpu.tinyloop") == 0);
  const std::vector<char> a = file_bytes(dir + "/gpu_tool_a.tinyloop"), b = file_bytes(dir + "/gpu_tool_b.tinyloop");
  CHECK(a.size() > 10000);
  CHECK(a == b);
  // --save-calib on the GPU: every selected weight's Hessian, symmetric, with its sample count.
  const tl::CalibReader calib(dir + "/gpu_tool_calib.h5");
  CHECK(calib.names().size() == 15);  // 3 blocks x 5 linears
  const tl::Hessian h = calib.read("loop.0.mlp_down");
  CHECK(h.K == cfg.ffn);
  CHECK(h.nsamples == 15 * cfg.loops);  // 15 windows, every loop iteration
  bool symmetric = true;
  for (int64_t i = 0; i < h.K; ++i)
    for (int64_t j = 0; j < i; ++j) symmetric = symmetric && h.H[size_t(i * h.K + j)] == h.H[size_t(j * h.K + i)];
  CHECK(symmetric);
  // Both devices write every block linear, readable as a model.
  for (const char* f : {"/gpu_tool_a.tinyloop", "/gpu_tool_cpu.tinyloop"}) {
    const tl::ModelWeights q = tl::load_model_weights(dir + f, false);
    CHECK(bool(q.pre[1].mlp_down.quant));
    CHECK(bool(q.loop[0].attn_qkv.quant));
  }
}

// A GPU that fails mid-run (the fault hook: a kernel launch three quarters into the run fails;
// launches, unlike allocations, are spread evenly over the blocks) on a
// .tinyloop model (HDF5 reads beside the writer): exit-2 error naming the kept stages, the
// journal there, no output; then --resume without the fault writes the uninterrupted run's bytes.
TEST_CASE("gptq-quantize --device cuda --resume after a GPU fault, on a .tinyloop model: the same bytes") {
  const ToolModel tm("gptq_gpu_fault_resume", 9);
  const std::string& dir = tm.dir;
  auto dev = tl::gpu::make_gptq_device();
  auto run = [&](const std::string& out, bool resume) {
    tl::GptqQuantizeOptions o = tm.options(out);
    o.group_size = tl::GroupSize::rows(32);  // divides both K of small_config (64, 160)
    o.device = "cuda";
    o.gpu = dev.get();
    o.resume = resume;
    return tl::run_gptq_quantize(o);
  };
  struct HookOff {
    ~HookOff() { tl::cuda::set_fault_injection({}); }
  } off;
  REQUIRE(run(dir + "/warm.tinyloop", false) == 0);  // the process's scratch and handles exist now
  const int64_t l0 = tl::cuda::fault_counts().launches;
  REQUIRE(run(dir + "/ref.tinyloop", false) == 0);
  const int64_t per_run = tl::cuda::fault_counts().launches - l0;
  REQUIRE(per_run >= 40);
  const std::string out = dir + "/out.tinyloop";
  tl::cuda::set_fault_injection({tl::FaultPlan::Kind::kLaunch, tl::cuda::fault_counts().launches + per_run * 3 / 4});
  std::string what;
  try {
    run(out, false);
  } catch (const tl::Error& e) {
    what = e.what();
  }
  tl::cuda::set_fault_injection({});
  CAPTURE(what);
  CHECK(what.find("injected by TL_FAULT_INJECT=launch:") != std::string::npos);
  CHECK(what.find("completed stage(s) kept in " + out + ".journal: the same command with --resume continues") !=
        std::string::npos);
  CHECK(!std::ifstream(out).good());
  CHECK(std::ifstream(out + ".journal/journal.json").good());
  REQUIRE(run(out, true) == 0);
  CHECK(file_bytes(out) == file_bytes(dir + "/ref.tinyloop"));
  CHECK(!std::ifstream(out + ".journal/journal.json").good());
}

}  // namespace

namespace {

TEST_CASE("gptq gpu calibration: bad input is an error before any work") {
  const tl::ModelConfig cfg = small_config();
  const tl::ModelWeights w = tl::random_model_weights(cfg, 5);
  const std::string path = tmp_dir("gptq_gpu_bad") + "/model.tinyloop";
  tl::write_model_tinyloop(w, path, tl::DType::F16);
  auto dev = tl::gpu::make_gptq_device();
  tl::SequentialCalls calls;
  calls.options = [](const std::string&, int64_t K) { return calib_options(K); };
  calls.quantized = [](const std::string&, tl::GptqResult&&, int64_t, double) { FAIL("nothing may be quantized"); };
  std::vector<int32_t> tokens(64, 1);
  tokens[37] = int32_t(cfg.vocab);  // one id past the vocabulary
  CHECK_THROWS_WITH(dev->calibrate(path, tokens, 16, 4, {"pre.0.attn_qkv"}, calls, nullptr),
                    doctest::Contains("token id 300 outside [0, 300)"));
  tokens[37] = 1;
  CHECK_THROWS_WITH(dev->calibrate(path, tokens, 16, 4, {"embed"}, calls, nullptr),
                    doctest::Contains("not a linear weight"));
  CHECK_THROWS_WITH(dev->calibrate(path, tokens, 16, 5, {"pre.0.attn_qkv"}, calls, nullptr),
                    doctest::Contains("needs 5 windows of 16 tokens"));
}

}  // namespace
