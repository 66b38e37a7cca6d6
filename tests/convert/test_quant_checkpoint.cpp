// AWQ (AutoAWQ GEMM) and compressed-tensors (pack-quantized) checkpoint folders read as TinyLoop
// weights (libconvert/quant_checkpoint.h, checkpoint_layers.h).
//  - The layouts are pinned by words packed here by hand from the formats' own descriptions
//    (AutoAWQ's order {0, 2, 4, 6, 1, 3, 5, 7}; compressed-tensors' little-endian nibbles with
//    q_signed + 8, zero points packed along N), not by our packer: a packer and reader that share
//    a mistake would still agree with each other.
//  - Random layers of several shapes (one group per column, groups of 32 and 128, N not a
//    multiple of 8 for compressed-tensors, K not a multiple of 8) round-trip through folders
//    bit for bit: codes, scales, zero = fp16(-(z * scale)).
//  - Every refusal is by name: settings the tools do not model, shapes that disagree, scales
//    fp16 cannot hold.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/group_size.h"
#include "core/half.h"
#include "formats/safetensors.h"
#include "libconvert/checkpoint_layers.h"
#include "libconvert/quant_checkpoint.h"
#include "int4_layer_fixture.h"

namespace {

namespace fs = std::filesystem;
using int4_fixture::Layer;
using int4_fixture::make_tensor;
using int4_fixture::random_layer;

std::string scratch(const std::string& name) {
  const std::string d = std::string(TL_TEST_TMP) + "/quant_ckpt_" + name + "_" + std::to_string(getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void check_same(const tl::QuantWeight& w, const Layer& L) {
  CAPTURE(L.name);
  REQUIRE(w.K == L.K);
  REQUIRE(w.N == L.N);
  CHECK(w.group_size == L.eff_gs());
  CHECK(w.q == L.q);
  CHECK(w.scale == L.s);
  size_t bad = 0;
  for (size_t i = 0; i < L.s.size(); ++i)
    bad += w.zero[i] != tl::float_to_half(-(float(L.z[i]) * tl::half_to_float(L.s[i])));
  CHECK(bad == 0);
}

void write_folder(const std::string& dir, const std::vector<tl::Tensor>& ts, const nlohmann::json& qc) {
  std::vector<const tl::Tensor*> ptrs;
  for (const auto& t : ts) ptrs.push_back(&t);
  tl::write_safetensors(dir + "/model.safetensors", ptrs);
  nlohmann::json cfg = {{"model_type", "llama"}, {"quantization_config", qc}};
  std::ofstream(dir + "/config.json") << cfg.dump(2);
}

// [G, N] -> [N, G], the compressed-tensors order of scales.
std::vector<tl::half_bits> transpose(const std::vector<tl::half_bits>& v, int64_t G, int64_t N) {
  std::vector<tl::half_bits> t(v.size());
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) t[size_t(n * G + g)] = v[size_t(g * N + n)];
  return t;
}

nlohmann::json awq_config(int64_t gs, bool zero_point) {
  return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", gs}, {"zero_point", zero_point}, {"version", "gemm"}};
}

nlohmann::json ct_config(int64_t gs, bool sym) {
  nlohmann::json w = {{"num_bits", 4}, {"type", "int"}, {"symmetric", sym}, {"dynamic", false}};
  if (gs > 0) {
    w["strategy"] = "group";
    w["group_size"] = gs;
  } else {
    w["strategy"] = "channel";
    w["group_size"] = nullptr;
  }
  return {{"quant_method", "compressed-tensors"},
          {"format", "pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", w}, {"input_activations", nullptr}}}}},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", nullptr},
          {"sparsity_config", nlohmann::json::object()}};
}

std::vector<tl::Tensor> ct_tensors(const Layer& L, bool sym, tl::DType scale_dtype = tl::DType::F16) {
  std::vector<tl::Tensor> ts;
  ts.push_back(make_tensor(L.name + ".weight_packed", tl::DType::I32, {L.N, (L.K + 7) / 8}, tl::ct_pack_weight(L.q, L.K, L.N)));
  const std::vector<tl::half_bits> st = transpose(L.s, L.G(), L.N);
  if (scale_dtype == tl::DType::F16) {
    ts.push_back(make_tensor(L.name + ".weight_scale", tl::DType::F16, {L.N, L.G()}, st));
  } else {
    std::vector<float> f(st.size());
    for (size_t i = 0; i < f.size(); ++i) f[i] = tl::half_to_float(st[i]);
    ts.push_back(make_tensor(L.name + ".weight_scale", tl::DType::F32, {L.N, L.G()}, f));
  }
  if (!sym)
    ts.push_back(make_tensor(L.name + ".weight_zero_point", tl::DType::I32, {(L.N + 7) / 8, L.G()},
                             tl::ct_pack_zero_points(L.z, L.G(), L.N)));
  ts.push_back(make_tensor(L.name + ".weight_shape", tl::DType::I64, {2}, std::vector<int64_t>{L.N, L.K}));
  return ts;
}

std::string error_of(const std::string& dir, const std::string& layer) {
  try {
    const tl::QuantCheckpoint ck(dir);
    for (const std::string& n : ck.quant_names())
      if (layer.empty() || n == layer) (void)ck.read_quant(n);
  } catch (const tl::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("awq layout: a word packed by hand from AutoAWQ's order decodes to its columns") {
  // Row 0 of a [1, 16] weight: column n holds code (n * 5 + 3) % 16. AutoAWQ packs word c with
  // column 8c + order[i] at bits 4i, order = {0, 2, 4, 6, 1, 3, 5, 7}.
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  std::vector<int32_t> qweight(2), qzeros(2);
  auto code = [](int64_t n) { return uint32_t(n * 5 + 3) % 16u; };
  auto zero = [](int64_t n) { return uint32_t(15 - n % 16); };
  for (int c = 0; c < 2; ++c) {
    uint32_t wq = 0, wz = 0;
    for (int i = 0; i < 8; ++i) {
      wq |= code(8 * c + order[i]) << (4 * i);
      wz |= zero(8 * c + order[i]) << (4 * i);
    }
    qweight[size_t(c)] = int32_t(wq);
    qzeros[size_t(c)] = int32_t(wz);
  }
  std::vector<tl::half_bits> scales(16, tl::float_to_half(0.5f));
  tl::AwqLayerView v{1, 16, 1, 1, qweight.data(), qzeros.data(), scales.data()};
  const tl::QuantWeight w = tl::awq_layer_to_tinyloop("l", v, "f");
  for (int64_t n = 0; n < 16; ++n) {
    CAPTURE(n);
    CHECK(w.q[size_t(n)] == code(n));
    CHECK(w.zero[size_t(n)] == tl::float_to_half(-0.5f * float(zero(n))));
  }
  // Our packer writes the same words.
  std::vector<int32_t> codes(16), zs(16);
  for (int n = 0; n < 16; ++n) codes[size_t(n)] = int32_t(code(n)), zs[size_t(n)] = int32_t(zero(n));
  CHECK(tl::awq_pack(codes, 1, 16) == qweight);
  CHECK(tl::awq_pack(zs, 1, 16) == qzeros);
}

TEST_CASE("compressed-tensors layout: words packed by hand decode to their rows and columns") {
  // A [K = 12, N = 10] weight: code of (k, n) = (k + 3n) % 16; row n of weight_packed holds k at
  // bits 4 (k % 8) of word k / 8, padding nibbles 0. Zero points of the one group: z[n] = n + 2,
  // packed along N: word r holds z[8r + j] at bits 4j.
  const int64_t K = 12, N = 10;
  std::vector<int32_t> packed(size_t(N * 2), 0), zp(2, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      packed[size_t(n * 2 + k / 8)] |= int32_t(uint32_t((k + 3 * n) % 16) << (4 * (k % 8)));
  for (int64_t n = 0; n < N; ++n) zp[size_t(n / 8)] |= int32_t(uint32_t(n + 2) << (4 * (n % 8)));
  std::vector<tl::half_bits> scales(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) scales[size_t(n)] = tl::float_to_half(0.25f * float(n + 1));
  tl::CtLayerView v{K, N, 1, K, packed.data(), scales.data(), zp.data(), nullptr};
  const tl::QuantWeight w = tl::ct_layer_to_tinyloop("l", v, "f");
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) CHECK(w.q[size_t(k * N + n)] == (k + 3 * n) % 16);
  for (int64_t n = 0; n < N; ++n) {
    CHECK(w.scale[size_t(n)] == scales[size_t(n)]);
    CHECK(w.zero[size_t(n)] == tl::float_to_half(-(float(n + 2) * 0.25f * float(n + 1))));
  }
  std::vector<uint8_t> q(w.q);
  CHECK(tl::ct_pack_weight(q, K, N) == packed);
  std::vector<int32_t> z(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) z[size_t(n)] = int32_t(n + 2);
  CHECK(tl::ct_pack_zero_points(z, 1, N) == zp);
}

TEST_CASE("awq folders: random layers read back bit for bit; zero_point false is z = 8") {
  std::mt19937 rng(21);
  for (bool sym : {false, true})
    for (int64_t gs : {int64_t(128), int64_t(32), int64_t(-1)}) {
      CAPTURE(sym);
      CAPTURE(gs);
      const std::string dir = scratch("awq_" + std::to_string(sym) + "_" + std::to_string(gs));
      std::vector<Layer> layers;
      for (auto [name, K, N] : {std::tuple<const char*, int64_t, int64_t>{"model.layers.0.self_attn.q_proj", 256, 256},
                                {"model.layers.0.mlp.down_proj", 512, 136}})
        layers.push_back(random_layer(rng, name, K, N, gs, sym));
      std::vector<tl::Tensor> ts;
      for (const Layer& L : layers) {
        std::vector<int32_t> codes(L.q.begin(), L.q.end());
        ts.push_back(make_tensor(L.name + ".qweight", tl::DType::I32, {L.K, L.N / 8}, tl::awq_pack(codes, L.K, L.N)));
        if (!sym) ts.push_back(make_tensor(L.name + ".qzeros", tl::DType::I32, {L.G(), L.N / 8}, tl::awq_pack(L.z, L.G(), L.N)));
        ts.push_back(make_tensor(L.name + ".scales", tl::DType::F16, {L.G(), L.N}, L.s));
      }
      ts.push_back(make_tensor("model.norm.weight", tl::DType::F16, {4}, std::vector<tl::half_bits>(4, 0x3c00)));
      write_folder(dir, ts, awq_config(gs, !sym));
      tl::QuantFormat f{};
      REQUIRE(tl::quant_checkpoint_format(dir, &f));
      CHECK(f == tl::QuantFormat::kAwq);
      const tl::QuantCheckpoint ck(dir);
      CHECK(ck.quant_names().size() == 2);
      CHECK(ck.dense_names() == std::vector<std::string>{"model.norm.weight"});
      for (const Layer& L : layers) check_same(ck.read_quant(L.name), L);
    }
}

TEST_CASE("compressed-tensors folders: random layers read back bit for bit (group, channel, sym, ragged, bf16/fp32)") {
  std::mt19937 rng(22);
  struct Case {
    int64_t gs;
    bool sym;
    tl::DType scale_dtype;
  };
  for (const Case& c : {Case{128, false, tl::DType::F16}, Case{32, false, tl::DType::F32}, Case{-1, false, tl::DType::F16},
                        Case{64, true, tl::DType::F16}, Case{96, false, tl::DType::F16}}) {
    CAPTURE(c.gs);
    CAPTURE(c.sym);
    const std::string dir = scratch("ct_" + std::to_string(c.gs) + "_" + std::to_string(c.sym));
    // N = 36 (not a multiple of 8: the last zero-point word half full), K = 200 (not a multiple
    // of 8: padded nibbles; with groups of 96 a ragged last group of 8 rows).
    std::vector<Layer> layers;
    for (auto [name, K, N] : {std::tuple<const char*, int64_t, int64_t>{"model.layers.0.self_attn.o_proj", 256, 128},
                              {"model.layers.0.mlp.up_proj", 192, 36}, {"model.layers.1.mlp.gate_proj", 200, 64}})
      if (c.gs <= 0 || c.gs <= K) layers.push_back(random_layer(rng, name, K, N, c.gs, c.sym));
    std::vector<tl::Tensor> ts;
    for (const Layer& L : layers)
      for (tl::Tensor& t : ct_tensors(L, c.sym, c.scale_dtype)) ts.push_back(std::move(t));
    ts.push_back(make_tensor("lm_head.weight", tl::DType::F16, {8, 4}, std::vector<tl::half_bits>(32, 0x3c00)));
    write_folder(dir, ts, ct_config(c.gs, c.sym));
    const tl::QuantCheckpoint ck(dir);
    CHECK(ck.config().format == tl::QuantFormat::kCompressedTensors);
    CHECK(ck.config().sym == c.sym);
    CHECK(ck.dense_names() == std::vector<std::string>{"lm_head.weight"});
    for (const Layer& L : layers) check_same(ck.read_quant(L.name), L);
  }
}

TEST_CASE("quantized folders: what the tools do not model is refused by name") {
  std::mt19937 rng(23);
  const Layer L = random_layer(rng, "model.layers.0.mlp.up_proj", 128, 64, 64, false);
  auto ct_with = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                     std::vector<tl::Tensor> ts = {}) {
    const std::string dir = scratch("refuse_" + name);
    if (ts.empty()) ts = ct_tensors(L, false);
    nlohmann::json qc = ct_config(64, false);
    edit(qc);
    write_folder(dir, ts, qc);
    return error_of(dir, "");
  };
  auto has = [](const std::string& e, const char* what) {
    INFO(e);
    CHECK(e.find(what) != std::string::npos);
  };
  has(ct_with("w8", [](nlohmann::json& q) { q["config_groups"]["group_0"]["weights"]["num_bits"] = 8; }), "num_bits = 8: expected 4");
  has(ct_with("fp8", [](nlohmann::json& q) { q["format"] = "float-quantized"; }), "format 'float-quantized'");
  has(ct_with("a8", [](nlohmann::json& q) {
        q["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}, {"type", "int"}};
      }),
      "input_activations are quantized");
  has(ct_with("kv", [](nlohmann::json& q) { q["kv_cache_scheme"] = {{"num_bits", 8}}; }), "kv_cache_scheme is set");
  has(ct_with("rot", [](nlohmann::json& q) { q["transform_config"] = {{"config_groups", {{"u", {}}}}}; }),
      "transform_config is set");
  has(ct_with("tensor", [](nlohmann::json& q) { q["config_groups"]["group_0"]["weights"]["strategy"] = "tensor"; }),
      "strategy 'tensor'");
  has(ct_with("frozen", [](nlohmann::json& q) { q["quantization_status"] = "frozen"; }), "quantization_status 'frozen'");
  has(ct_with("mixed", [](nlohmann::json& q) {
        q["config_groups"]["group_1"] = q["config_groups"]["group_0"];
        q["config_groups"]["group_1"]["weights"]["group_size"] = 128;
      }),
      "config groups with different weight settings");
  has(ct_with("symzp", [](nlohmann::json& q) { q["config_groups"]["group_0"]["weights"]["symmetric"] = true; }),
      "weight_zero_point present but the scheme is symmetric");
  {
    std::vector<tl::Tensor> ts = ct_tensors(L, false, tl::DType::F32);
    ts[1].as<float>()[5] = 0.1f;  // no exact fp16 value
    has(ct_with("fp32", [](nlohmann::json&) {}, ts), "has no exact fp16 value");
  }
  {
    std::vector<tl::Tensor> ts = ct_tensors(L, false);
    ts[3].as<int64_t>()[1] = 136;  // weight_shape K disagrees with weight_packed
    has(ct_with("shape", [](nlohmann::json&) {}, ts), "inconsistent shapes");
  }
  {
    std::vector<tl::Tensor> ts = ct_tensors(L, false);
    std::vector<int32_t> g_idx(128);
    for (int k = 0; k < 128; ++k) g_idx[size_t(k)] = k % 2;  // act-order groups: not contiguous
    ts.push_back(make_tensor(L.name + ".weight_g_idx", tl::DType::I32, {128}, g_idx));
    has(ct_with("gidx", [](nlohmann::json&) {}, ts), "TinyLoop groups are contiguous row blocks");
  }
  // AWQ: other kernels' layouts, and zero points that disagree with the config.
  const std::string dir = scratch("refuse_awq");
  std::vector<int32_t> codes(L.q.begin(), L.q.end());
  std::vector<tl::Tensor> ts = {make_tensor(L.name + ".qweight", tl::DType::I32, {L.K, L.N / 8}, tl::awq_pack(codes, L.K, L.N)),
                                make_tensor(L.name + ".scales", tl::DType::F16, {L.G(), L.N}, L.s)};
  nlohmann::json qc = awq_config(64, true);
  qc["version"] = "gemv";
  write_folder(dir, ts, qc);
  has(error_of(dir, ""), "version 'gemv'");
  write_folder(dir, ts, awq_config(64, true));
  has(error_of(dir, ""), "qzeros missing but zero_point is true");
  // Another quant_method is still a quantized folder, refused by name (never read as fp16).
  write_folder(dir, ts, {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}});
  CHECK(tl::is_quant_checkpoint(dir));
  has(error_of(dir, ""), "quant_method 'bitsandbytes'");
}

TEST_CASE("interop fixture: an AWQ folder and compressed-tensors' own conversion of it read to the same weights") {
  // tests/data/interop (tools/make_interop_fixtures.py): the compressed-tensors package's
  // AutoAWQConverter unpacked the AWQ words with its own reverse order and repacked them with
  // pack_to_int32; the two folders must give the same codes, scales and zeros bit for bit, and
  // the zero points 0 and 15 planted in group 0 must come out where they were put.
  const std::string base = TL_INTEROP_DIR;
  const tl::QuantCheckpoint awq(base + "/awq"), ct(base + "/ct");
  CHECK(awq.config().format == tl::QuantFormat::kAwq);
  CHECK(ct.config().format == tl::QuantFormat::kCompressedTensors);
  REQUIRE(awq.quant_names() == ct.quant_names());
  REQUIRE(awq.quant_names().size() == 2);
  CHECK(ct.dense_names() == std::vector<std::string>{"model.norm.weight"});
  for (const std::string& n : awq.quant_names()) {
    CAPTURE(n);
    const tl::QuantWeight a = awq.read_quant(n), c = ct.read_quant(n);
    CHECK(a.K == c.K);
    CHECK(a.N == c.N);
    CHECK(a.group_size == 128);
    CHECK(c.group_size == 128);
    CHECK(a.q == c.q);
    CHECK(a.scale == c.scale);
    CHECK(a.zero == c.zero);
    // Group 0: z = 0 in column 0 (zero = -0) and z = 15 in column 1.
    CHECK(a.zero[0] == tl::float_to_half(-0.0f));
    CHECK(a.zero[1] == tl::float_to_half(-(15.0f * tl::half_to_float(a.scale[1]))));
  }
}
