// Marlin layout round trips on fresh seeded random data: the fast tiled packer/decoder against
// the literal per-nibble reference, both scale permutations, the whole section (pack ->
// decode) and delta. All comparisons are exact (the layout is a bijection on bits).
#include <algorithm>
#include <tuple>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "core/error.h"
#include "formats/marlin_layout.h"

namespace {

constexpr uint32_t kSeed = 20240517;  // fixed so a failure reproduces

std::vector<uint8_t> random_codes(std::mt19937& rng, int64_t n) {
  std::vector<uint8_t> q(static_cast<size_t>(n));
  for (auto& v : q) v = uint8_t(rng() & 15u);
  return q;
}

// Positive finite float16 scales, log-uniform over [2^-14, 2^-1] (normal range, like real ones).
std::vector<tl::half_bits> random_scales(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> e(-14.0f, -1.0f);
  std::vector<tl::half_bits> s(static_cast<size_t>(n));
  for (auto& v : s) v = tl::float_to_half(std::exp2(e(rng)));
  return s;
}

template <class T>
size_t mismatches(const char* what, const std::vector<T>& got, const std::vector<T>& want, int64_t cols) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (bad < 5)
      std::printf("  %s[%lld, %lld]: got 0x%x, want 0x%x\n", what, (long long)(int64_t(i) / cols),
                  (long long)(int64_t(i) % cols), unsigned(uint32_t(got[i])), unsigned(uint32_t(want[i])));
    ++bad;
  }
  return bad;
}

tl::QuantWeight random_weight(std::mt19937& rng, int64_t K, int64_t N, int64_t group_size) {
  tl::QuantWeight w;
  w.name = "w";
  w.K = K;
  w.N = N;
  w.group_size = group_size;
  w.q = random_codes(rng, K * N);
  w.scale = random_scales(rng, w.groups() * N);
  w.zero.resize(w.scale.size());
  for (size_t i = 0; i < w.zero.size(); ++i)  // zero = -z * scale, z in [0, 15]
    w.zero[i] = tl::float_to_half(-float(rng() % 16u) * tl::half_to_float(w.scale[i]));
  return w;
}

}  // namespace

TEST_CASE("marlin codes: fast packer == reference, and both decoders invert it, on random shapes") {
  std::mt19937 rng(kSeed);
  for (int trial = 0; trial < 60; ++trial) {
    // Codes-level shapes only need K % 16 and N % 64 (the Marlin tile is 16 x 64).
    const int64_t K = 16 * int64_t(1 + rng() % 40), N = 64 * int64_t(1 + rng() % 12);
    CAPTURE(K);
    CAPTURE(N);
    const std::vector<uint8_t> q = random_codes(rng, K * N);
    std::vector<int32_t> B(static_cast<size_t>(K / 16 * 2 * N)), B_ref(B.size());
    tl::marlin_pack_codes(q.data(), K, N, B.data(), int(1 + trial % 3));
    tl::marlin_pack_codes_ref(q.data(), K, N, B_ref.data());
    REQUIRE(mismatches("B", B, B_ref, 2 * N) == 0);
    std::vector<uint8_t> back(q.size(), 0xff), back_ref(q.size(), 0xff);
    tl::marlin_unpack_codes(B.data(), K, N, back.data());
    tl::marlin_unpack_codes_ref(B.data(), K, N, back_ref.data());
    CHECK(mismatches("q(fast)", back, q, N) == 0);
    CHECK(mismatches("q(ref)", back_ref, q, N) == 0);
  }
}

TEST_CASE("marlin codes: each 16x64 tile maps onto its own 128 words (a bijection of positions)") {
  // Pack one-hot inputs: a single code 1 at (k, n) must light exactly one nibble, and no two
  // positions may share a nibble. Checks the layout formula itself, not just self-consistency.
  const int64_t K = 32, N = 128;
  std::vector<int> owner(size_t(K / 16 * 2 * N * 8), -1);
  std::vector<uint8_t> q(size_t(K * N), 0);
  std::vector<int32_t> B(static_cast<size_t>(K / 16 * 2 * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      q[size_t(k * N + n)] = 1;
      tl::marlin_pack_codes(q.data(), K, N, B.data(), 1);
      q[size_t(k * N + n)] = 0;
      int lit = 0;
      for (size_t m = 0; m < B.size(); ++m)
        for (int i = 0; i < 8; ++i)
          if ((uint32_t(B[m]) >> (4 * i)) & 15u) {
            ++lit;
            CHECK(int64_t(m) / (2 * N) == k / 16);  // stays in its 16-row strip
            CHECK(owner[m * 8 + size_t(i)] == -1);
            owner[m * 8 + size_t(i)] = int(k * N + n);
          }
      REQUIRE(lit == 1);
    }
}

TEST_CASE("marlin scales: both permutations round trip and move every entry") {
  std::mt19937 rng(kSeed + 1);
  for (int trial = 0; trial < 40; ++trial) {
    const bool per_column = trial % 2 == 0;
    const int64_t G = per_column ? 1 : int64_t(1 + rng() % 9), N = 64 * int64_t(1 + rng() % 10);
    CAPTURE(G);
    CAPTURE(N);
    // Distinct values so a permutation bug cannot hide behind equal entries.
    std::vector<tl::half_bits> s(static_cast<size_t>(G * N));
    for (size_t i = 0; i < s.size(); ++i) s[i] = tl::half_bits(0x1000 + i);
    std::vector<tl::half_bits> sp(s.size()), back(s.size());
    tl::marlin_permute_scales(s.data(), G, N, per_column, sp.data());
    tl::marlin_unpermute_scales(sp.data(), G, N, per_column, back.data());
    CHECK(mismatches("s", back, s, N) == 0);
    std::vector<tl::half_bits> sorted = sp;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == s);  // a permutation: every entry exactly once
    CHECK(sp != s);      // and not the identity
  }
}

TEST_CASE("marlin delta: vector and scalar paths agree with zero + 8 * scale in fp32") {
  std::mt19937 rng(kSeed + 2);
  for (int64_t count : {1, 7, 8, 9, 31, 64, 1000}) {
    std::vector<tl::half_bits> s = random_scales(rng, count), z(static_cast<size_t>(count)), d(static_cast<size_t>(count));
    for (auto& v : z) v = tl::half_bits(rng() & 0xfbffu);  // any finite half, either sign, subnormals too
    tl::marlin_delta(s.data(), z.data(), count, d.data());
    for (int64_t i = 0; i < count; ++i) {
      const float want = tl::half_to_float(z[size_t(i)]) + 8.0f * tl::half_to_float(s[size_t(i)]);
      CHECK(d[size_t(i)] == tl::float_to_half(want));
    }
  }
}

TEST_CASE("marlin delta: large scales, where 8 * scale overflows fp16 but delta does not") {
  // scale 8192 (8 * scale = 65536 > fp16's 65504) with zero -60000: delta = 5536, exact in fp16;
  // a packer that formed 8 * scale in fp16 first gets inf. Every position of the vector path
  // (8 lanes) and the scalar tail.
  const tl::half_bits s8192 = tl::float_to_half(8192.0f), z = tl::float_to_half(-60000.0f);
  REQUIRE(tl::half_to_float(z) == -60000.0f);
  for (int64_t count : {1, 3, 8, 11}) {
    std::vector<tl::half_bits> s(static_cast<size_t>(count), s8192), zs(static_cast<size_t>(count), z),
        d(static_cast<size_t>(count));
    tl::marlin_delta(s.data(), zs.data(), count, d.data());
    for (int64_t i = 0; i < count; ++i) CHECK(tl::half_to_float(d[size_t(i)]) == 5536.0f);
  }
}

TEST_CASE("marlin section: pack -> decode recovers q and scale for gate-passing shapes") {
  std::mt19937 rng(kSeed + 3);
  tl::MarlinSection reused;  // marlin_pack_into must not depend on what the buffers held before
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t K = 128 * int64_t(1 + rng() % 6), N = 128 * int64_t(1 + rng() % 4);
    const int64_t gs = trial % 2 ? 128 : K;
    CAPTURE(K);
    CAPTURE(N);
    CAPTURE(gs);
    const tl::QuantWeight w = random_weight(rng, K, N, gs);
    tl::marlin_pack_into(w, "", &reused);
    const tl::MarlinSection& m = reused;
    CHECK(m.groupsize == tl::marlin_groupsize_arg(K, gs));
    const tl::MarlinDecoded d = tl::marlin_decode(m, K, N, gs);
    CHECK(mismatches("q", d.q, w.q, N) == 0);
    CHECK(mismatches("scale", d.scale, w.scale, N) == 0);
    // The dequantized weight each side implies: TinyLoop q*scale + zero vs Marlin
    // (q - 8)*s + delta. Both in fp32 from the same fp16 inputs; delta's one fp16 rounding
    // bounds the difference by half an fp16 ulp of delta plus fp32 rounding of the sums.
    const int64_t G = w.groups();
    float worst = 0;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {
        const size_t gi = size_t((k / gs) * N + n);
        const float sc = tl::half_to_float(w.scale[gi]), zr = tl::half_to_float(w.zero[gi]);
        const float code = float(w.q[size_t(k * N + n)]);
        const float tinyloop = code * sc + zr;
        const float marlin = (code - 8.0f) * sc + tl::half_to_float(m.delta[gi]);
        const float bound = std::ldexp(std::fabs(zr + 8.0f * sc), -11) + 32.0f * sc * 0x1p-24f;
        worst = std::max(worst, std::fabs(tinyloop - marlin) / bound);
      }
    CHECK(G * N == int64_t(m.delta.size()));
    CHECK(worst <= 1.0f);
  }
}

TEST_CASE("marlin section: N not a multiple of 128 packs padded with zero weights, decodes to the weight") {
  std::mt19937 rng(kSeed + 5);
  // A toy head, GPT-2's vocabulary (50257 -> 50304) on a short K, and N < 128.
  for (const auto& [K, N, gs] : {std::tuple<int64_t, int64_t, int64_t>{256, 200, 128}, {128, 50257, 128}, {256, 5, 256}}) {
    CAPTURE(K);
    CAPTURE(N);
    const tl::QuantWeight w = random_weight(rng, K, N, gs);
    const tl::MarlinSection m = tl::marlin_pack(w);
    const int64_t NP = tl::marlin_padded_n(N), G = w.groups();
    CHECK(m.padded_n == NP);
    CHECK(m.columns(N) == NP);
    REQUIRE(m.B.size() == size_t(K / 16 * 2 * NP));
    REQUIRE(m.delta.size() == size_t(G * NP));
    const tl::MarlinDecoded d = tl::marlin_decode(m, K, N, gs);
    CHECK(mismatches("q", d.q, w.q, N) == 0);
    CHECK(mismatches("scale", d.scale, w.scale, N) == 0);
    // The padding: codes 8, scale 1 and delta 0, i.e. (q - 8) s + delta = 0 in every extra column.
    REQUIRE(d.pad_q.size() == size_t(K * (NP - N)));
    CHECK(std::count(d.pad_q.begin(), d.pad_q.end(), uint8_t(8)) == int64_t(d.pad_q.size()));
    CHECK(std::count(d.pad_scale.begin(), d.pad_scale.end(), tl::float_to_half(1.0f)) == int64_t(d.pad_scale.size()));
    int64_t pad_delta_nonzero = 0, own_delta_wrong = 0;
    std::vector<tl::half_bits> own(size_t(G * N));
    tl::marlin_delta(w.scale.data(), w.zero.data(), G * N, own.data());
    for (int64_t g = 0; g < G; ++g)
      for (int64_t n = 0; n < NP; ++n) {
        const tl::half_bits v = m.delta[size_t(g * NP + n)];
        if (n >= N) pad_delta_nonzero += v != 0;
        else own_delta_wrong += v != own[size_t(g * N + n)];
      }
    CHECK(pad_delta_nonzero == 0);
    CHECK(own_delta_wrong == 0);
  }
  // A section whose column count is neither N nor N padded is refused by the decoder.
  const tl::QuantWeight w = random_weight(rng, 128, 200, 128);
  tl::MarlinSection m = tl::marlin_pack(w);
  m.padded_n = 384;
  CHECK_THROWS_WITH_AS(tl::marlin_decode(m, 128, 200, 128), doctest::Contains("expected 256"), tl::Error);
}
