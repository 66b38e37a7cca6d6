// GPTQ checkpoint import (AutoGPTQ "gptq" v1 with stored zeros z - 1, GPTQModel "gptq_v2"),
// sym and asym, and the whole marlin-pack path on a checkpoint written here: the packed file
// must decode back to the checkpoint's own dequantized weights scale * (q - z) within fp16
// rounding of the stored zero / delta.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <sys/stat.h>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/group_size.h"
#include "formats/safetensors.h"
#include "formats/tinyloop_file.h"
#include "libconvert/gptq_checkpoint.h"
#include "formats/marlin_layout.h"
#include "jobs/marlin_pack_tool.h"
#include "int4_layer_fixture.h"

using int4_fixture::Layer;
using int4_fixture::make_tensor;
using int4_fixture::random_layer;

namespace {

// Half an fp16 ulp, relative: the one rounding of zero = -z * s (and of delta) to fp16.
constexpr double kHalfUlpF16 = 0x1p-11;
// Absolute slack: fp16 subnormal rounding (2^-25) of zero and delta, plus fp32 sums.
constexpr double kAbsSlack = 0x1p-23;

std::string fresh_dir(const std::string& name) {
  const std::string d = std::string(TL_TEST_TMP) + "/" + name;
  std::system(("rm -rf '" + d + "' && mkdir -p '" + d + "'").c_str());
  return d;
}

// Writes a checkpoint folder: model.safetensors + quantize_config.json. For v1 a layer whose z
// is 0 would be stored as nibble 15 and read back as 16 (AutoGPTQ's kernels do the same), so
// v1 layers get z in [1, 15] and the edge case is tested separately.
void write_checkpoint(const std::string& dir, const std::vector<Layer>& layers, const std::string& format,
                      bool sym, int64_t gs, int bits = 4) {
  std::vector<tl::Tensor> ts;
  const bool v1 = format == "gptq";
  for (const Layer& L : layers) {
    ts.push_back(make_tensor(L.name + ".qweight", tl::DType::I32, {L.K / 8, L.N}, tl::gptq_pack_qweight(L.q, L.K, L.N)));
    ts.push_back(make_tensor(L.name + ".qzeros", tl::DType::I32, {L.G(), L.N / 8}, tl::gptq_pack_qzeros(L.z, L.G(), L.N, v1)));
    ts.push_back(make_tensor(L.name + ".scales", tl::DType::F16, {L.G(), L.N}, L.s));
    std::vector<int32_t> g_idx(size_t(L.K));
    for (int64_t k = 0; k < L.K; ++k) g_idx[size_t(k)] = int32_t(k / L.eff_gs());
    ts.push_back(make_tensor(L.name + ".g_idx", tl::DType::I32, {L.K}, g_idx));
    std::vector<tl::half_bits> bias(size_t(L.N), tl::float_to_half(0.25f));
    ts.push_back(make_tensor(L.name + ".bias", tl::DType::F16, {L.N}, bias));
  }
  std::vector<tl::half_bits> norm(64, tl::float_to_half(1.0f));
  ts.push_back(make_tensor("model.norm.weight", tl::DType::F16, {64}, norm));
  std::vector<const tl::Tensor*> ptrs;
  for (const auto& t : ts) ptrs.push_back(&t);
  tl::write_safetensors(dir + "/model.safetensors", ptrs);
  nlohmann::json qc = {{"bits", bits}, {"group_size", gs}, {"desc_act", false}, {"sym", sym},
                       {"quant_method", "gptq"}, {"checkpoint_format", format}};
  std::ofstream(dir + "/quantize_config.json") << qc.dump(2);
}

}  // namespace

TEST_CASE("gptq config: conventions, defaults and refusals") {
  auto cfg = [](nlohmann::json j) { return tl::gptq_config_from_json(j, "quantize_config.json"); };
  CHECK(cfg({{"bits", 4}, {"group_size", 128}}).zeros_minus_one);  // no checkpoint_format: v1
  CHECK(cfg({{"bits", 4}, {"checkpoint_format", "gptq"}}).zeros_minus_one);
  CHECK_FALSE(cfg({{"bits", 4}, {"checkpoint_format", "gptq_v2"}}).zeros_minus_one);
  CHECK(cfg({{"bits", 4}, {"group_size", -1}}).group_size == -1);
  CHECK_THROWS_WITH_AS(cfg({{"bits", 8}}), doctest::Contains("bits = 8: expected 4"), tl::Error);
  CHECK_THROWS_WITH_AS(cfg({{"bits", 4}, {"checkpoint_format", "marlin"}}),
                       doctest::Contains("checkpoint_format 'marlin'"), tl::Error);
  CHECK_THROWS_WITH_AS(cfg({{"bits", 4}, {"quant_method", "awq"}}), doctest::Contains("quant_method 'awq'"), tl::Error);
  CHECK_THROWS_WITH_AS(cfg({{"bits", 4}, {"group_size", 0}}), doctest::Contains("group_size = 0"), tl::Error);
  CHECK_THROWS_AS(cfg({{"group_size", 128}}), tl::Error);  // bits is required
}

TEST_CASE("gptq layer -> TinyLoop: q, scale exact; zero = fp16(-z * scale); both zero conventions") {
  std::mt19937 rng(4242);
  for (const std::string format : {"gptq", "gptq_v2"}) {
    for (bool sym : {false, true}) {
      CAPTURE(format);
      CAPTURE(sym);
      const tl::GptqCheckpointConfig c = tl::gptq_config_from_json(
          {{"bits", 4}, {"group_size", 64}, {"sym", sym}, {"checkpoint_format", format}}, "qc.json");
      Layer L = random_layer(rng, "layer", 192, 48, 64, sym);
      if (c.zeros_minus_one && !sym)
        for (auto& z : L.z) z = std::max(z, 1);  // v1 cannot store z = 0 (see the edge case below)
      const auto qw = tl::gptq_pack_qweight(L.q, L.K, L.N);
      const auto qz = tl::gptq_pack_qzeros(L.z, L.G(), L.N, c.zeros_minus_one);
      tl::GptqLayerView v{L.K, L.N, L.G(), qw.data(), qz.data(), L.s.data(), nullptr};
      const tl::QuantWeight w = tl::gptq_layer_to_tinyloop("layer", v, c, "ckpt");
      CHECK(w.group_size == 64);
      CHECK(w.q == L.q);
      CHECK(w.scale == L.s);
      size_t bad = 0;
      for (size_t i = 0; i < L.z.size(); ++i) {
        const tl::half_bits want = tl::float_to_half(-(float(L.z[i]) * tl::half_to_float(L.s[i])));
        if (w.zero[i] != want && bad++ < 5)
          std::printf("  zero[%zu]: got 0x%04x want 0x%04x (z %d)\n", i, w.zero[i], want, L.z[i]);
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("gptq v1 edge: stored nibble 15 reads as z = 16, as AutoGPTQ's kernels add 1 per nibble") {
  const tl::GptqCheckpointConfig c = tl::gptq_config_from_json({{"bits", 4}, {"sym", false}}, "qc.json");
  std::vector<uint8_t> q(size_t(8 * 8), 3);
  std::vector<tl::half_bits> s(8, tl::float_to_half(0.5f));
  const auto qw = tl::gptq_pack_qweight(q, 8, 8);
  std::vector<int32_t> qz = {int32_t(0xF)};  // column 0: nibble 15; the others 0 -> z = 1
  tl::GptqLayerView v{8, 8, 1, qw.data(), qz.data(), s.data(), nullptr};
  const tl::QuantWeight w = tl::gptq_layer_to_tinyloop("l", v, c, "ckpt");
  CHECK(tl::half_to_float(w.zero[0]) == -8.0f);  // -16 * 0.5
  CHECK(tl::half_to_float(w.zero[1]) == -0.5f);  // -1 * 0.5
  CHECK(w.group_size == 8);                      // group_size -1 (default) -> per row
}

TEST_CASE("gptq layer refusals: act-order g_idx, wrong sym zero points, bad scales, shapes") {
  std::mt19937 rng(7);
  const tl::GptqCheckpointConfig v2 = tl::gptq_config_from_json(
      {{"bits", 4}, {"group_size", 32}, {"sym", true}, {"desc_act", true}, {"checkpoint_format", "gptq_v2"}}, "qc.json");
  Layer L = random_layer(rng, "layer", 64, 16, 32, true);
  const auto qw = tl::gptq_pack_qweight(L.q, L.K, L.N);
  auto qz = tl::gptq_pack_qzeros(L.z, L.G(), L.N, false);
  std::vector<int32_t> g_idx(64);
  for (int k = 0; k < 64; ++k) g_idx[size_t(k)] = k / 32;
  tl::GptqLayerView v{L.K, L.N, L.G(), qw.data(), qz.data(), L.s.data(), g_idx.data()};
  CHECK_NOTHROW(tl::gptq_layer_to_tinyloop("layer", v, v2, "ckpt"));  // desc_act with static groups is fine

  std::swap(g_idx[3], g_idx[40]);  // a real act-order g_idx
  CHECK_THROWS_WITH_AS(tl::gptq_layer_to_tinyloop("layer", v, v2, "ckpt"),
                       doctest::Contains("ckpt: layer: act-order checkpoint (desc_act = true): g_idx[3] = 1, expected"),
                       tl::Error);
  std::swap(g_idx[3], g_idx[40]);

  // A v1 sym checkpoint (nibbles 7) read as v2 gives z = 7: refused, pointing at the format.
  const auto qz_v1 = tl::gptq_pack_qzeros(L.z, L.G(), L.N, true);
  tl::GptqLayerView v_wrong = v;
  v_wrong.qzeros = qz_v1.data();
  CHECK_THROWS_WITH_AS(tl::gptq_layer_to_tinyloop("layer", v_wrong, v2, "ckpt"),
                       doctest::Contains("is checkpoint_format right?"), tl::Error);

  L.s[5] = tl::float_to_half(0.0f);
  CHECK_THROWS_WITH_AS(tl::gptq_layer_to_tinyloop("layer", v, v2, "ckpt"),
                       doctest::Contains("scales[0, 5] = 0"), tl::Error);
  tl::GptqLayerView v_bad = v;
  v_bad.G = 3;
  CHECK_THROWS_WITH_AS(tl::gptq_layer_to_tinyloop("layer", v_bad, v2, "ckpt"),
                       doctest::Contains("expected K / group_size"), tl::Error);
}

TEST_CASE("marlin-pack on a GPTQ checkpoint: packs (the head padded), decodes back within fp16 rounding") {
  for (const std::string format : {"gptq", "gptq_v2"}) {
    for (bool sym : {false, true}) {
      CAPTURE(format);
      CAPTURE(sym);
      const bool v1 = format == "gptq";
      std::mt19937 rng(sym ? 11u : 12u);
      // One group size per checkpoint (it is a checkpoint-wide setting): 128 here, and a
      // per-row (-1) checkpoint below.
      for (int64_t gs : {int64_t(128), int64_t(-1)}) {
        CAPTURE(gs);
        std::vector<Layer> layers = {random_layer(rng, "model.layers.0.self_attn.q_proj", 256, 256, gs, sym),
                                     random_layer(rng, "model.layers.0.mlp.down_proj", 512, 128, gs, sym),
                                     random_layer(rng, "lm_head", 256, 200, gs, sym)};  // N = 200: padded to 256
        if (v1 && !sym)
          for (Layer& L : layers)
            for (auto& z : L.z) z = std::max(z, 1);  // v1 cannot store z = 0
        const std::string name = "marlin_gptq_" + format + (sym ? "_sym" : "_asym") + (gs < 0 ? "_row" : "_g128");
        const std::string dir = fresh_dir(name);
        write_checkpoint(dir, layers, format, sym, gs);
        tl::MarlinPackOptions o;
        o.input = dir;
        o.output = dir + ".tinyloop";
        o.quiet = true;
        REQUIRE(tl::run_marlin_pack(o) == 0);

        tl::TinyloopReader r(o.output);
        CHECK(r.has_dense("model.norm.weight"));
        CHECK(r.has_dense("lm_head.bias"));
        for (const Layer& L : layers) {
          CAPTURE(L.name);
          const tl::QuantWeight w = r.read_quant(L.name);
          CHECK(w.q == L.q);
          CHECK(w.scale == L.s);
          CHECK(w.group_size == L.eff_gs());
          REQUIRE(w.marlin.has_value());
          const int64_t NP = w.marlin->columns(L.N);
          CHECK(NP == tl::marlin_padded_n(L.N));  // the head: 256 columns, the others their own
          CHECK(w.marlin->groupsize == (gs == -1 ? -1 : 128));
          const tl::MarlinDecoded d = tl::marlin_decode(*w.marlin, w.K, w.N, w.group_size);
          CHECK(d.q == L.q);
          CHECK(d.scale == L.s);
          // Marlin's view (q - 8) * s + delta against the checkpoint's s * (q - z).
          double worst = 0;
          int64_t wk = -1, wn = -1;
          for (int64_t k = 0; k < L.K; ++k)
            for (int64_t n = 0; n < L.N; ++n) {
              const size_t g = size_t((k / L.eff_gs()) * L.N + n);
              const double s = tl::half_to_float(d.scale[g]);
              const size_t gd = size_t((k / L.eff_gs()) * NP + n);  // delta: the section's columns
              const double got = (double(d.q[size_t(k * L.N + n)]) - 8.0) * s + tl::half_to_float(w.marlin->delta[gd]);
              const double zs = double(L.z[g]) * s;
              const double bound = kHalfUlpF16 * (zs + std::fabs(8.0 * s - zs)) + kAbsSlack;
              const double ratio = std::fabs(got - L.w(k, n)) / bound;
              if (ratio > worst) { worst = ratio; wk = k; wn = n; }
            }
          if (worst > 1.0) std::printf("  worst at [%lld, %lld]: %.3f x bound\n", (long long)wk, (long long)wn, worst);
          CHECK(worst <= 1.0);
        }
      }
    }
  }
}
