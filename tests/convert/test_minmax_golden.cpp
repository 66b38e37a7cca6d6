// Min-max RTN vs upstream quant.py (find_params + quantize, sym=False), the golden rtn/ group:
// pure min / max / divide / round of the input, so everything must match bit for bit,
// including the edge columns (all-zero: z = 7 by the float32 rule; ties: half-to-even).
#include <cstdio>
#include <string>

#include <doctest/doctest.h>

#include "core/group_size.h"
#include "libconvert/minmax_quantizer.h"
#include "test_gptq_golden.h"

namespace {

template <class A, class B>
int64_t count_mismatch(const char* what, const std::string& file, const A& ours, const B& ref, int64_t cols) {
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (double(ours[i]) != double(ref[i])) {
      if (++bad <= 5) {
        std::printf("%s: %s[%lld, %lld]: ours %.9g, upstream %.9g\n", file.c_str(), what,
                    (long long)(int64_t(i) / cols), (long long)(int64_t(i) % cols), double(ours[i]), double(ref[i]));
      }
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("minmax golden: RTN codes and parameters are bit-identical to upstream in every file") {
  const char* cases[] = {"256x128_g128_act0", "256x128_g128_act1", "256x128_g128_act1_static",
                         "256x128_gfull_act0", "256x128_gfull_act1", "512x384_g128_act0",
                         "512x384_gfull_act0", "512x384_gfull_act1"};
  for (const char* name : cases) {
    const tl_test::GptqCase g = tl_test::load_case(name);
    const tl_test::GptqCalib c = tl_test::load_calib(std::to_string(g.K) + "x" + std::to_string(g.N));
    CAPTURE(g.name);
    const tl::MinMaxResult r = tl::rtn_quantize(c.W.data(), g.K, g.N, tl::group_size_from_upstream(g.group_size, g.K),
                                                 tl::ZeroMode::kInt);
    REQUIRE(r.G == g.G);
    REQUIRE(r.group_size == g.group_size_effective);
    std::vector<float> zero_f32(r.zq.size());
    for (size_t i = 0; i < r.zq.size(); ++i) zero_f32[i] = -(r.zq[i] * r.scale[i]);
    CHECK(count_mismatch("q", g.path, r.q, g.rtn_q, g.N) == 0);
    CHECK(count_mismatch("z", g.path, r.zq, g.rtn_z, g.N) == 0);
    CHECK(count_mismatch("scale_f32", g.path, r.scale, g.rtn_scale_f32, g.N) == 0);
    CHECK(count_mismatch("zero_f32", g.path, zero_f32, g.rtn_zero_f32, g.N) == 0);
    CHECK(count_mismatch("scale", g.path, r.scale16, g.rtn_scale, g.N) == 0);
    CHECK(count_mismatch("zero", g.path, r.zero16, g.rtn_zero, g.N) == 0);

    // The edge columns the README describes, spelled out so a regression names its cause.
    for (int64_t gi = 0; gi < g.G; ++gi) {
      const size_t zc = size_t(gi * g.N + c.edge_zero);
      CHECK(r.zq[zc] == 7.0f);  // 1 / float32(2/15) = 7.4999995 -> 7 (float64 would give 8)
      CHECK(r.scale[zc] == 2.0f / 15.0f);
      const size_t tc = size_t(gi * g.N + c.edge_ties);
      if (g.group_size > 0) {
        CHECK(r.zq[tc] == 2.0f);  // -xmin/scale = 2.5 exactly -> 2 (half to even)
        CHECK(r.scale[tc] == 1.0f / 512.0f);
      }
      CHECK(r.zq[size_t(gi * g.N + c.edge_positive)] == 0.0f);
      CHECK(r.zq[size_t(gi * g.N + c.edge_negative)] == 15.0f);
    }
    if (g.group_size > 0) CHECK(int(r.q[size_t(c.edge_ties)]) == 4);  // 2.5 + 2 = 4.5 -> 4
  }
}
