// Marlin packer vs upstream marlin.Layer.pack (IST-DASLab/marlin 2f6d7c1): the golden files in
// tests/golden/marlin_*.h5 are its outputs. B, s_packed and delta must match bit for bit, so
// every comparison here is exact and prints the first mismatches.
#include <cstdio>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "formats/h5_util.h"
#include "formats/marlin_layout.h"

namespace {

struct MarlinGolden {
  std::string path;
  int64_t K = 0, N = 0, G = 0, group_size = 0, group_size_effective = 0;
  std::vector<uint8_t> q_int;          // [K, N]
  std::vector<tl::half_bits> s;        // [G, N]
  std::vector<int32_t> B;              // [K/16, 2N]
  std::vector<tl::half_bits> s_packed; // [G, N]
  std::vector<tl::half_bits> zero, delta;  // asym/, [G, N]
  std::vector<float> delta_f32;        // asym/, [G, N]
};

MarlinGolden load(const std::string& name) {
  MarlinGolden g;
  g.path = std::string(TL_GOLDEN_DIR) + "/" + name;
  tl::h5::Handle f = tl::h5::open_file(g.path);
  g.K = tl::h5::attr_int(f, ".", "K", g.path);
  g.N = tl::h5::attr_int(f, ".", "N", g.path);
  g.G = tl::h5::attr_int(f, ".", "G", g.path);
  g.group_size = tl::h5::attr_int(f, ".", "group_size", g.path);
  g.group_size_effective = tl::h5::attr_int(f, ".", "group_size_effective", g.path);
  g.q_int = tl::h5::read<uint8_t>(f, "q_int", g.path, nullptr, {g.K, g.N});
  g.s = tl::h5::read_half_bits(f, "s", g.path, nullptr, {g.G, g.N});
  g.B = tl::h5::read<int32_t>(f, "B", g.path, nullptr, {g.K / 16, 2 * g.N});
  g.s_packed = tl::h5::read_half_bits(f, "s_packed", g.path, nullptr, {g.G, g.N});
  g.zero = tl::h5::read_half_bits(f, "asym/zero", g.path, nullptr, {g.G, g.N});
  g.delta = tl::h5::read_half_bits(f, "asym/delta", g.path, nullptr, {g.G, g.N});
  g.delta_f32 = tl::h5::read<float>(f, "asym/delta_f32", g.path, nullptr, {g.G, g.N});
  return g;
}

// Counts mismatches of two equally long arrays, printing the first few with their [row, col].
template <class T>
size_t count_mismatches(const char* what, const std::vector<T>& got, const std::vector<T>& want,
                        int64_t cols) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (bad < 5)
      std::printf("  %s[%lld, %lld]: got 0x%llx, want 0x%llx\n", what, (long long)(int64_t(i) / cols),
                  (long long)(int64_t(i) % cols), (unsigned long long)(uint32_t)got[i],
                  (unsigned long long)(uint32_t)want[i]);
    ++bad;
  }
  return bad;
}

const char* const kGoldenFiles[] = {"marlin_128x256_gfull.h5", "marlin_256x256_g128.h5",
                                    "marlin_256x512_gfull.h5", "marlin_512x512_g128.h5"};

}  // namespace

TEST_CASE("marlin golden: B and s_packed are bit-identical to upstream Layer.pack") {
  for (const char* name : kGoldenFiles) {
    CAPTURE(name);
    const MarlinGolden g = load(name);
    const bool per_column = g.G == 1;
    // Upstream takes the per-column path exactly when one group spans K (groupsize -1, or
    // groupsize 128 with K = 128).
    CHECK(per_column == (g.group_size_effective == g.K));

    std::vector<int32_t> B(g.B.size()), B_ref(g.B.size());
    tl::marlin_pack_codes(g.q_int.data(), g.K, g.N, B.data());
    tl::marlin_pack_codes_ref(g.q_int.data(), g.K, g.N, B_ref.data());
    CHECK(count_mismatches("B(fast)", B, g.B, 2 * g.N) == 0);
    CHECK(count_mismatches("B(ref)", B_ref, g.B, 2 * g.N) == 0);
    for (int threads : {1, 2, 3}) {  // strip splits must not change a byte
      std::vector<int32_t> Bt(g.B.size());
      tl::marlin_pack_codes(g.q_int.data(), g.K, g.N, Bt.data(), threads);
      CHECK(count_mismatches("B(threads)", Bt, g.B, 2 * g.N) == 0);
    }

    std::vector<tl::half_bits> sp(g.s.size());
    tl::marlin_permute_scales(g.s.data(), g.G, g.N, per_column, sp.data());
    CHECK(count_mismatches("s_packed", sp, g.s_packed, g.N) == 0);
  }
}

TEST_CASE("marlin golden: the decoder recovers q_int and s from upstream's B and s_packed") {
  for (const char* name : kGoldenFiles) {
    CAPTURE(name);
    const MarlinGolden g = load(name);
    std::vector<uint8_t> q(g.q_int.size()), q_ref(g.q_int.size());
    tl::marlin_unpack_codes(g.B.data(), g.K, g.N, q.data());
    tl::marlin_unpack_codes_ref(g.B.data(), g.K, g.N, q_ref.data());
    CHECK(count_mismatches("q(fast)", q, g.q_int, g.N) == 0);
    CHECK(count_mismatches("q(ref)", q_ref, g.q_int, g.N) == 0);
    std::vector<tl::half_bits> s(g.s.size());
    tl::marlin_unpermute_scales(g.s_packed.data(), g.G, g.N, g.G == 1, s.data());
    CHECK(count_mismatches("s", s, g.s, g.N) == 0);
  }
}

TEST_CASE("marlin golden: delta = zero + 8 * scale in fp32, stored fp16, bit-identical") {
  for (const char* name : kGoldenFiles) {
    CAPTURE(name);
    const MarlinGolden g = load(name);
    std::vector<tl::half_bits> delta(g.s.size());
    tl::marlin_delta(g.s.data(), g.zero.data(), int64_t(g.s.size()), delta.data());
    CHECK(count_mismatches("delta", delta, g.delta, g.N) == 0);
    // The fp32 intermediate as well (compared as bits: it is defined exactly).
    std::vector<uint32_t> d32(g.s.size()), want32(g.s.size());
    for (size_t i = 0; i < d32.size(); ++i) {
      d32[i] = tl::float_to_bits(tl::half_to_float(g.zero[i]) + 8.0f * tl::half_to_float(g.s[i]));
      want32[i] = tl::float_to_bits(g.delta_f32[i]);
    }
    CHECK(count_mismatches("delta_f32", d32, want32, g.N) == 0);
  }
}

TEST_CASE("marlin golden: marlin_pack(QuantWeight) emits the whole section") {
  for (const char* name : kGoldenFiles) {
    CAPTURE(name);
    const MarlinGolden g = load(name);
    tl::QuantWeight w;
    w.name = "golden";
    w.K = g.K;
    w.N = g.N;
    w.group_size = g.group_size_effective;
    w.q = g.q_int;
    w.scale = g.s;
    w.zero = g.zero;
    const tl::MarlinSection m = tl::marlin_pack(w);
    // Marlin's groupsize argument: -1 exactly when one group spans K.
    CHECK(m.groupsize == (g.group_size_effective == g.K ? -1 : g.group_size_effective));
    CHECK(m.layout == tl::kMarlinLayoutTag);
    CHECK(count_mismatches("B", m.B, g.B, 2 * g.N) == 0);
    CHECK(count_mismatches("s", m.s, g.s_packed, g.N) == 0);
    CHECK(count_mismatches("delta", m.delta, g.delta, g.N) == 0);

    const tl::MarlinDecoded d = tl::marlin_decode(m, g.K, g.N, w.group_size);
    CHECK(count_mismatches("decoded q", d.q, g.q_int, g.N) == 0);
    CHECK(count_mismatches("decoded scale", d.scale, g.s, g.N) == 0);
  }
}
