// core/marlin_index.h against the packer: every code and every scale of random weights is found
// where the element-wise formulas say (grouped and per-column scales, several tiles each way).
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "core/marlin_index.h"
#include "formats/marlin_layout.h"

TEST_CASE("marlin index: every code and scale where the packer put it") {
  std::mt19937 rng(std::random_device{}());
  for (const auto& [K, N, G] : {std::tuple<int64_t, int64_t, int64_t>{128, 128, 1}, {256, 384, 2}, {384, 256, 1},
                                {1024, 640, 8}}) {
    CAPTURE(K);
    CAPTURE(N);
    std::vector<uint8_t> q(size_t(K * N));
    for (uint8_t& v : q) v = uint8_t(rng() & 15);
    std::vector<int32_t> B(size_t(K / 16 * 2 * N));
    tl::marlin_pack_codes(q.data(), K, N, B.data());
    int64_t bad = 0;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {
        const tl::MarlinCodeAt at = tl::marlin_code_at(k, n, N);
        bad += ((uint32_t(B[size_t(at.word)]) >> at.shift) & 15u) != q[size_t(k * N + n)];
      }
    CHECK(bad == 0);
    std::vector<tl::half_bits> s(size_t(G * N)), sp(s.size());
    for (size_t i = 0; i < s.size(); ++i) s[i] = tl::half_bits(i);  // every value distinct
    tl::marlin_permute_scales(s.data(), G, N, G == 1, sp.data());
    int64_t bad_s = 0;
    for (int64_t g = 0; g < G; ++g)
      for (int64_t n = 0; n < N; ++n) bad_s += sp[size_t(tl::marlin_scale_at(g, n, N, G == 1))] != s[size_t(g * N + n)];
    CHECK(bad_s == 0);
  }
}
