// The Marlin gate (which weights may be packed) and the packer's refusal of bad weights: every
// bad input is a tl::Error whose message names the weight, the item and what was expected.
#include <cmath>
#include <limits>
#include <string>

#include <doctest/doctest.h>

#include "core/error.h"
#include "formats/marlin_layout.h"

namespace {

tl::QuantWeight small_weight(int64_t K = 256, int64_t N = 128, int64_t gs = 128) {
  tl::QuantWeight w;
  w.name = "layers.0.mlp_up";
  w.K = K;
  w.N = N;
  w.group_size = gs;
  w.q.assign(static_cast<size_t>(K * N), 7);
  w.scale.assign(static_cast<size_t>(w.groups() * N), tl::float_to_half(0.01f));
  w.zero.assign(w.scale.size(), tl::float_to_half(-0.08f));
  return w;
}

// The error message of marlin_pack(w, "model.tinyloop"), or "" when it did not throw.
std::string pack_error(const tl::QuantWeight& w) {
  try {
    tl::marlin_pack(w, "model.tinyloop");
  } catch (const tl::Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("marlin gate: K a multiple of 128, any N (padded), and a supported group size") {
  CHECK(tl::marlin_gate(256, 256, 128).ok);
  CHECK(tl::marlin_gate(256, 256, 256).ok);    // per-row: group_size == K
  CHECK(tl::marlin_gate(128, 128, 128).ok);    // per-row and 128 at once
  CHECK(tl::marlin_gate(8192, 57344, 128).ok);

  CHECK(tl::marlin_gate(2048, 50257, 128).ok);  // the head: its section padded to 50304 columns
  const tl::MarlinGate k = tl::marlin_gate(200, 256, 200);
  CHECK_FALSE(k.ok);
  CHECK(contains(k.reason, "K = 200"));
  const tl::MarlinGate g64 = tl::marlin_gate(256, 256, 64);
  CHECK_FALSE(g64.ok);
  CHECK(contains(g64.reason, "group size 64"));
  const tl::MarlinGate both = tl::marlin_gate(100, 100, 64);  // every reason, joined
  CHECK(contains(both.reason, "K = 100"));
  CHECK(contains(both.reason, " and group size 64"));
  CHECK_FALSE(contains(both.reason, "N = 100"));  // any N: padded
}

TEST_CASE("marlin groupsize argument is -1 exactly when one group spans K") {
  CHECK(tl::marlin_groupsize_arg(4096, 4096) == -1);
  CHECK(tl::marlin_groupsize_arg(128, 128) == -1);
  CHECK(tl::marlin_groupsize_arg(4096, 128) == 128);
}

TEST_CASE("marlin_pack refuses bad weights with one clear message") {
  CHECK(pack_error(small_weight()).empty());

  auto w = small_weight();
  w.q[size_t(130 * 128 + 5)] = 16;
  std::string e = pack_error(w);
  CHECK(contains(e, "model.tinyloop: layers.0.mlp_up: "));
  CHECK(contains(e, "code 16 at [130, 5] is outside [0, 15]"));

  w = small_weight();
  w.scale[3] = tl::float_to_half(0.0f);
  CHECK(contains(pack_error(w), "scale[0, 3] = 0: expected finite and > 0"));
  w.scale[3] = tl::float_to_half(-0.5f);
  CHECK(contains(pack_error(w), "scale[0, 3] = -0.5"));
  w.scale[3] = tl::float_to_half(std::numeric_limits<float>::quiet_NaN());
  CHECK(contains(pack_error(w), "scale[0, 3] = nan"));
  w.scale[3] = tl::float_to_half(std::numeric_limits<float>::infinity());
  CHECK(contains(pack_error(w), "scale[0, 3] = inf"));

  w = small_weight();
  w.zero[130] = tl::float_to_half(std::numeric_limits<float>::infinity());
  CHECK(contains(pack_error(w), "zero[1, 2] = inf: expected finite"));

  w = small_weight();
  w.scale[0] = tl::float_to_half(9000.0f);  // 8 * 9000 > 65504: delta cannot be stored
  CHECK(contains(pack_error(w), "overflows float16"));

  w = small_weight();
  w.q.pop_back();
  CHECK(contains(pack_error(w), "expected K * N = 32768"));
  w = small_weight();
  w.zero.pop_back();
  CHECK(contains(pack_error(w), "expected G * N = 256"));
  w = small_weight();
  w.bits = 8;
  CHECK(contains(pack_error(w), "bits = 8"));
  CHECK(tl::marlin_pack(small_weight(256, 50304 - 47, 128)).padded_n == 50304);  // packed, padded
  CHECK(contains(pack_error(small_weight(256, 128, 64)), "group size 64"));
}

TEST_CASE("marlin_decode refuses a section that does not fit the weight") {
  const auto w = small_weight();
  tl::MarlinSection m = tl::marlin_pack(w);
  CHECK_THROWS_WITH_AS(tl::marlin_decode(m, 256, 128, 256), doctest::Contains("groupsize 128, expected -1"), tl::Error);
  m.layout = "something-else";
  CHECK_THROWS_AS(tl::marlin_decode(m, 256, 128, 128), tl::Error);
  m = tl::marlin_pack(w);
  m.B.pop_back();
  CHECK_THROWS_WITH_AS(tl::marlin_decode(m, 256, 128, 128), doctest::Contains("marlin/B holds"), tl::Error);
}
