// GPTQ speed on the two layer shapes of the issue (K x N = 4096 x 4096 and 4096 x 11008, group
// 128, block 128), Hessians from 2048 correlated random samples. Upstream's fasterquant (torch
// 1.13 CPU, 2 threads) takes 60 s and 108 s for these on this machine kind.
//
// Before timing, a small case checks the result: GPTQ's loss must equal 0.5 tr(E^T H E) (the
// identity its error feedback guarantees) and be below RTN's.
//
// Usage: bench_gptq [--threads T] [--quick]   (--quick: 1024 x 1024 only)
// GFLOP/s counts the nominal work: N K^2 (the error-feedback updates, in-block and lazy) +
// 2/3 K^3 (one Cholesky and one triangular inverse).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "libconvert/gptq.h"
#include "libconvert/hessian.h"

namespace {

struct Layer {
  int64_t K, N;
  double upstream_s;  // measured upstream fasterquant time, 0 = none
};

// Correlated activations: per-channel scales (a few outliers) times (Z + Z2 B), B rank 32.
std::vector<float> make_hessian(int64_t K, int64_t samples, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t rank = 32;
  tl::MatrixRowF B(rank, K), Z2(samples, rank), X(samples, K);
  for (int64_t i = 0; i < B.size(); ++i) B.data()[i] = nd(rng) * 0.5f;
  for (int64_t i = 0; i < Z2.size(); ++i) Z2.data()[i] = nd(rng);
  for (int64_t i = 0; i < X.size(); ++i) X.data()[i] = nd(rng);
  X.noalias() += Z2 * B;
  for (int64_t k = 0; k < K; ++k) {
    const float s = (k % 97 == 0) ? 10.0f : 0.5f + float(k % 13) / 13.0f;
    X.col(k) *= s;
  }
  tl::HessianAccumulator acc(K);
  acc.add_batch(X.data(), samples, samples);
  return std::vector<float>(acc.H().data(), acc.H().data() + K * K);
}

std::vector<float> make_weight(int64_t K, int64_t N, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::student_t_distribution<float> td(5.0f);
  std::vector<float> W(size_t(K * N));
  for (float& w : W) w = 0.02f * td(rng);
  return W;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool correctness_check(int threads) {
  const int64_t K = 512, N = 256;
  const std::vector<float> H = make_hessian(K, 1024, 7), W = make_weight(K, N, 8);
  tl::GptqOptions o;
  o.threads = threads;
  o.want_w_hat = true;
  o.want_rtn_loss = true;
  const tl::GptqResult r = tl::gptq_quantize(W.data(), K, N, H.data(), o);
  std::vector<float> Hd = H, E(W.size());
  for (int64_t k = 0; k < K; ++k) Hd[size_t(k * K + k)] += r.damp;
  for (size_t i = 0; i < E.size(); ++i) E[i] = r.w_hat[i] - W[i];
  const double q = tl::quadratic_loss(Hd.data(), E.data(), K, N);
  const bool ok = std::fabs(q - r.loss) <= 1e-3 * q && r.loss < r.rtn_loss;
  std::printf("correctness: %lldx%lld loss %.6g, 0.5 tr(E^T H E) %.6g, RTN %.6g: %s\n",
              (long long)K, (long long)N, r.loss, q, r.rtn_loss, ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = int(std::thread::hardware_concurrency());
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else { std::fprintf(stderr, "usage: bench_gptq [--threads T] [--quick]\n"); return 2; }
  }
  if (threads < 1) threads = 1;
  if (!correctness_check(threads)) return 1;

  std::vector<Layer> layers = quick ? std::vector<Layer>{{1024, 1024, 0}}
                                    : std::vector<Layer>{{4096, 4096, 60}, {4096, 11008, 108}};
  // cpu s: CPU seconds of all threads, the work itself; wall time also depends on machine load.
  std::printf("%-12s %6s %9s %8s %9s %9s %10s %9s\n", "KxN", "group", "hinv+gptq", "cpu s", "GFLOP/s", "upstream", "speedup", "+rtn cmp");
  for (const Layer& L : layers) {
    const std::vector<float> H = make_hessian(L.K, 2048, 1), W = make_weight(L.K, L.N, 2);
    tl::GptqOptions o;
    o.group_size = 128;
    o.threads = threads;
    auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    const tl::GptqResult r = tl::gptq_quantize(W.data(), L.K, L.N, H.data(), o);
    const double s = seconds_since(t0), cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
    o.want_rtn_loss = true;
    t0 = std::chrono::steady_clock::now();
    const tl::GptqResult r2 = tl::gptq_quantize(W.data(), L.K, L.N, H.data(), o);
    const double s2 = seconds_since(t0);
    const double K = double(L.K), N = double(L.N);
    const double gflop = (N * K * K + 2.0 / 3.0 * K * K * K) * 1e-9;
    char name[32], up[32], sp[32];
    std::snprintf(name, sizeof name, "%lldx%lld", (long long)L.K, (long long)L.N);
    std::snprintf(up, sizeof up, L.upstream_s > 0 ? "%.0f s" : "-", L.upstream_s);
    std::snprintf(sp, sizeof sp, L.upstream_s > 0 ? "%.1fx" : "-", L.upstream_s / s);
    std::printf("%-12s %6d %7.2f s %6.2f s %9.1f %9s %10s %7.2f s   (loss %.4g, rtn %.4g, codes %s)\n", name, 128, s,
                cpu, gflop / s, up, sp, s2, r.loss, r2.rtn_loss, r.q == r2.q ? "same" : "DIFFER");
    if (r.q != r2.q) return 1;
  }
  return 0;
}
