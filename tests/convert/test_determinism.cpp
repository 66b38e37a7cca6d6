// Quantizer output is a function of its inputs alone: the same codes, float16 scales and zeros
// (every byte) whatever the thread count and whatever cache sizes the CPU reports to Eigen.
//
// A CPU is simulated by the cache sizes Eigen would have detected on it (CPUID): Eigen's GEMM
// panel depth, and so the summation order of every product, follows the L1 size. Before
// libconvert/eigen_blocking.h, an AMD EPYC (32 KiB L1) and an Intel Xeon (48 KiB) gave a
// different float16 scale in the golden case 512x384_g128_act0, and 3 threads gave another one
// than 1 or 2 (the triangular inverse was split into one block per thread).
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <Eigen/Core>
#include <doctest/doctest.h>

#include "core/group_size.h"
#include "libconvert/eigen_blocking.h"
#include "libconvert/gptq.h"
#include "libconvert/hessian.h"
#include "test_gptq_golden.h"

namespace {

// L1 / L2 / L3 as Eigen reads them on machines this project runs on (2-core AMD EPYC VMs,
// Intel Xeon hosts, a desktop Zen 4), plus Eigen's own defaults (16 KiB / 512 KiB / 512 KiB
// when CPUID tells it nothing).
struct CacheSizes {
  std::ptrdiff_t l1, l2, l3;
};
constexpr CacheSizes kCpus[] = {{32 << 10, 512 << 10, 32 << 20},
                                {48 << 10, 2 << 20, 105 << 20},
                                {64 << 10, 1 << 20, 320 << 20},
                                {16 << 10, 512 << 10, 512 << 10}};

std::vector<int> thread_counts() {
  const int all = int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> t = {1, 2, 3, 5};
  if (all != 1 && all != 2 && all != 3 && all != 5) t.push_back(all);
  return t;
}

// Every byte the file stores for the weight, plus the loss it reports.
struct Output {
  std::vector<uint8_t> q;
  std::vector<tl::half_bits> scale16, zero16;
  double loss = 0;
  bool operator==(const Output& o) const {
    return q == o.q && scale16 == o.scale16 && zero16 == o.zero16 &&
           std::memcmp(&loss, &o.loss, sizeof loss) == 0;
  }
};

Output run(const std::vector<float>& W, const std::vector<float>& H, int64_t K, int64_t N,
           tl::GptqOptions o, const CacheSizes& cpu, int threads) {
  Eigen::setCpuCacheSizes(cpu.l1, cpu.l2, cpu.l3);  // what CPUID would have told Eigen
  o.threads = threads;
  const tl::GptqResult r = tl::gptq_quantize(W.data(), K, N, H.data(), o);
  return {r.q, r.scale16, r.zero16, r.loss};
}

void check_independent(const std::string& label, const std::vector<float>& W,
                       const std::vector<float>& H, int64_t K, int64_t N, const tl::GptqOptions& o) {
  const Output ref = run(W, H, K, N, o, kCpus[0], 1);
  for (const CacheSizes& cpu : kCpus) {
    for (int t : thread_counts()) {
      CAPTURE(label);
      CAPTURE(cpu.l1);
      CAPTURE(t);
      CHECK(run(W, H, K, N, o, cpu, t) == ref);
    }
  }
}

}  // namespace

TEST_CASE("determinism: GPTQ bytes do not depend on the CPU's cache sizes or the thread count") {
  // The golden case that differed between machines, with upstream's settings.
  const tl_test::GptqCase g = tl_test::load_case("512x384_g128_act0");
  const tl_test::GptqCalib c = tl_test::load_calib("512x384");
  tl::GptqOptions o;
  o.percdamp = g.percdamp;
  o.group_size = tl::group_size_from_upstream(g.group_size, g.K);
  o.block_size = g.blocksize;
  check_independent("512x384 g128", c.W, c.H, c.K, c.N, o);

  // Act-order with static groups and per-row on the same data: other paths through step 2-4.
  o.act_order = o.static_groups = true;
  check_independent("512x384 g128 act-order", c.W, c.H, c.K, c.N, o);
  o.group_size = c.K;
  check_independent("512x384 row act-order", c.W, c.H, c.K, c.N, o);

  // Fresh random data with K not a multiple of the split width and N not of the chunk width:
  // remainder blocks in the triangular inverse and a short last column chunk.
  std::mt19937_64 rng(20261201);
  std::normal_distribution<float> nd;
  const int64_t K = 704, N = 300;
  std::vector<float> W(size_t(K * N)), X(size_t(2 * K * K));
  for (float& w : W) w = 0.02f * nd(rng);
  for (float& x : X) x = nd(rng);
  tl::HessianAccumulator acc(K);
  acc.add_batch(X.data(), 2 * K, 1);
  const std::vector<float> H(acc.H().data(), acc.H().data() + K * K);
  tl::GptqOptions r;
  r.group_size = 64;
  r.zero_mode = tl::ZeroMode::kFloat;
  check_independent("random 704x300 g64 float zero", W, H, K, N, r);
}

TEST_CASE("determinism: the Hessian accumulation does not depend on the CPU's cache sizes") {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd;
  const int64_t K = 520, rows = 900;
  std::vector<float> X(size_t(rows * K));
  for (float& x : X) x = nd(rng);
  std::vector<float> ref;
  for (const CacheSizes& cpu : kCpus) {
    Eigen::setCpuCacheSizes(cpu.l1, cpu.l2, cpu.l3);
    tl::HessianAccumulator acc(K);
    acc.add_batch(X.data(), 400, 1);
    acc.add_batch(X.data() + 400 * K, rows - 400, 1);
    const std::vector<float> H(acc.H().data(), acc.H().data() + K * K);
    if (ref.empty()) ref = H;
    CAPTURE(cpu.l1);
    CHECK(std::memcmp(H.data(), ref.data(), H.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("determinism: pin_eigen_blocking fixes Eigen's cache sizes") {
  Eigen::setCpuCacheSizes(48 << 10, 2 << 20, 105 << 20);
  tl::pin_eigen_blocking();
  CHECK(Eigen::l1CacheSize() == tl::kEigenL1Bytes);
  CHECK(Eigen::l2CacheSize() == tl::kEigenL2Bytes);
  CHECK(Eigen::l3CacheSize() == tl::kEigenL3Bytes);
}
