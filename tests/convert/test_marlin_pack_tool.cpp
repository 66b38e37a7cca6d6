// run_marlin_pack on .tinyloop inputs: packed sections equal marlin_pack of the stored weight,
// q/scale/zero and dense tensors pass through, the gate's rejects stay unpacked, a stored
// section is verified on repack and a mismatching one is refused with nothing written.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <sys/stat.h>

#include <doctest/doctest.h>

#include "core/error.h"
#include "formats/tinyloop_file.h"
#include "formats/marlin_layout.h"
#include "jobs/marlin_pack_tool.h"

namespace {

tl::QuantWeight random_weight(std::mt19937& rng, const std::string& name, int64_t K, int64_t N, int64_t gs) {
  tl::QuantWeight w;
  w.name = name;
  w.K = K;
  w.N = N;
  w.group_size = gs;
  w.q.resize(static_cast<size_t>(K * N));
  for (auto& v : w.q) v = uint8_t(rng() & 15u);
  w.scale.resize(static_cast<size_t>(w.groups() * N));
  w.zero.resize(w.scale.size());
  for (size_t i = 0; i < w.scale.size(); ++i) {
    w.scale[i] = tl::float_to_half(0.001f * float(1 + rng() % 100));
    w.zero[i] = tl::float_to_half(-float(rng() % 16u) * tl::half_to_float(w.scale[i]));
  }
  w.provenance = {{"method", "rtn"}};
  return w;
}

std::string tmp_path(const std::string& name) {
  const std::string dir = std::string(TL_TEST_TMP) + "/marlin_pack_tool";
  std::system(("mkdir -p '" + dir + "'").c_str());
  const std::string p = dir + "/" + name;
  std::remove(p.c_str());
  return p;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// An input with a packable weight, a per-row one, a head of N = 200 (packed padded to 256), a
// weight that fails the gate (K = 200) and a dense tensor.
std::string write_input(const std::string& name, std::mt19937& rng, bool tamper_existing_section) {
  const std::string path = tmp_path(name);
  tl::TinyloopWriter w(path, "test");
  tl::Tensor norm = tl::Tensor::from_float("norm", {4}, std::vector<float>{1, 2, 3, 4}.data(), tl::DType::F16);
  w.write_dense(norm);
  tl::QuantWeight a = random_weight(rng, "blk.mlp_up", 256, 384, 128);
  if (tamper_existing_section) {
    a.marlin = tl::marlin_pack(a);
    a.marlin->B[5] ^= 1 << 8;  // one nibble of B[0, 5] off by one
  }
  w.write_quant(a);
  w.write_quant(random_weight(rng, "blk.mlp_down", 384, 256, 384));
  w.write_quant(random_weight(rng, "head", 256, 200, 128));
  w.write_quant(random_weight(rng, "blk.attn_k200", 200, 128, 200));
  w.commit();
  return path;
}

}  // namespace

TEST_CASE("marlin-pack .tinyloop: packs what passes the gate, copies the rest unchanged") {
  std::mt19937 rng(99);
  const std::string in = write_input("in.tinyloop", rng, false);
  tl::MarlinPackOptions o;
  o.input = in;
  o.output = tmp_path("out.tinyloop");
  o.quiet = true;
  REQUIRE(tl::run_marlin_pack(o) == 0);

  tl::TinyloopReader src(in), dst(o.output);
  CHECK(dst.has_dense("norm"));
  CHECK(dst.read_dense("norm").data == src.read_dense("norm").data);
  for (const std::string name : {"blk.mlp_up", "blk.mlp_down", "head", "blk.attn_k200"}) {
    CAPTURE(name);
    const tl::QuantWeight a = src.read_quant(name), b = dst.read_quant(name);
    CHECK(a.q == b.q);
    CHECK(a.scale == b.scale);
    CHECK(a.zero == b.zero);
    if (name == std::string("blk.attn_k200")) {
      CHECK_FALSE(b.marlin.has_value());
      continue;
    }
    REQUIRE(b.marlin.has_value());
    const tl::MarlinSection want = tl::marlin_pack(a);
    CHECK(b.marlin->padded_n == (name == std::string("head") ? 256 : 0));
    CHECK(b.marlin->groupsize == (name == std::string("blk.mlp_down") ? -1 : 128));
    CHECK(b.marlin->B == want.B);
    CHECK(b.marlin->s == want.s);
    CHECK(b.marlin->delta == want.delta);
  }

  // Repacking the packed file (in place) verifies and keeps every section.
  tl::MarlinPackOptions again;
  again.input = o.output;
  again.in_place = true;
  again.quiet = true;
  REQUIRE(tl::run_marlin_pack(again) == 0);
  tl::TinyloopReader re(o.output);
  CHECK(re.read_quant("blk.mlp_up").marlin->B == dst.read_quant("blk.mlp_up").marlin->B);
}

TEST_CASE("marlin-pack .tinyloop: a stored section that disagrees with q/scale/zero is refused") {
  std::mt19937 rng(100);
  const std::string in = write_input("tampered.tinyloop", rng, true);
  const std::string original = slurp(in);
  tl::MarlinPackOptions o;
  o.input = in;
  o.output = tmp_path("tampered_out.tinyloop");
  o.quiet = true;
  CHECK_THROWS_WITH_AS(tl::run_marlin_pack(o),
                       doctest::Contains("blk.mlp_up: already packed, but the stored marlin section differs "
                                         "from a fresh pack of q/scale/zero (first difference: B[0, 5])"),
                       tl::Error);
  CHECK_FALSE(exists(o.output));

  tl::MarlinPackOptions inplace;
  inplace.input = in;
  inplace.in_place = true;
  inplace.quiet = true;
  CHECK_THROWS_AS(tl::run_marlin_pack(inplace), tl::Error);
  CHECK(slurp(in) == original);  // the input is untouched by the failed run
}
