#include "libverify/random_weights.h"

#include <cmath>

#include "core/error.h"
#include "formats/marlin_layout.h"

namespace tl::verify {

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Rng case_rng(uint64_t seed, const std::string& tier, uint64_t case_index) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the tier name
  for (unsigned char c : tier) h = (h ^ c) * 1099511628211ull;
  return Rng(splitmix64(splitmix64(seed) ^ h) + case_index);
}

std::vector<half_bits> random_halves(Rng& rng, int64_t rows, int64_t cols, double stddev) {
  std::normal_distribution<float> normal(0.0f, float(stddev));
  std::vector<half_bits> v(size_t(rows * cols));
  for (half_bits& h : v) h = float_to_half(normal(rng));
  return v;
}

QuantWeight random_quant_weight(Rng& rng, const std::string& name, int64_t K, int64_t N,
                                int64_t group_size) {
  QuantWeight w;
  w.name = name;
  w.K = K;
  w.N = N;
  w.group_size = group_size;
  w.q.resize(size_t(K * N));
  for (size_t i = 0; i < w.q.size(); i += 16) {  // 16 codes per 64-bit draw
    uint64_t bits = rng();
    for (size_t j = i; j < std::min(w.q.size(), i + 16); ++j, bits >>= 4) w.q[j] = uint8_t(bits & 15);
  }
  const int64_t G = w.groups();
  std::uniform_real_distribution<double> log2s(-9.0, -6.0);
  std::uniform_int_distribution<int> z(0, 15);
  std::normal_distribution<double> jitter(0.0, 0.25);
  w.scale.resize(size_t(G * N));
  w.zero.resize(size_t(G * N));
  for (size_t i = 0; i < w.scale.size(); ++i) {
    w.scale[i] = float_to_half(float(std::exp2(log2s(rng))));
    const double s = half_to_float(w.scale[i]);
    w.zero[i] = float_to_half(float(-(z(rng) + jitter(rng)) * s));
  }
  w.provenance = {{"method", "random"}, {"note", "synthetic weight of a parity tier"}};
  return w;
}

QuantWeight random_packed_weight(Rng& rng, const std::string& name, int64_t K, int64_t N,
                                 int64_t group_size) {
  QuantWeight w = random_quant_weight(rng, name, K, N, group_size);
  const MarlinGate gate = marlin_gate(K, N, group_size);
  if (!gate.ok) throw Error("cannot pack a random weight: " + gate.reason, "", name);
  w.marlin = marlin_pack(w);
  return w;
}

}  // namespace tl::verify
