// checkpoint_import: HF -> TinyLoop name mapping, sharded folders, BF16/F16/F32 sources
// (transposed exactly), .tinyloop inputs (quantized entries copied, fp16 linears selected),
// and the errors for incomplete q/k/v triples.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"
#include "formats/safetensors.h"
#include "formats/tinyloop_file.h"
#include "libconvert/checkpoint_import.h"
#include "jobs/gptq_quantize_tool.h"

namespace {

std::string tmp_dir(const std::string& name) {
  const std::string d = std::string(TL_TEST_TMP) + "/import_" + name + "_" + std::to_string(getpid());
  ::mkdir(TL_TEST_TMP, 0755);
  ::mkdir(d.c_str(), 0755);
  return d;
}

tl::Tensor seq_tensor(const std::string& name, std::vector<int64_t> shape, tl::DType dt, float base) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  // Small integers and halves: exact in BF16, F16 and F32, so transposes compare exactly.
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = base + float(i % 61) * 0.5f - 15.0f;
  return tl::Tensor::from_float(name, std::move(shape), v.data(), dt);
}

void write_config(const std::string& dir, int64_t D, int64_t ffn, int64_t layers, int64_t vocab) {
  const nlohmann::json cfg = {{"model_type", "llama"}, {"hidden_size", D}, {"num_attention_heads", 2},
                              {"num_key_value_heads", 1}, {"intermediate_size", ffn}, {"num_hidden_layers", layers},
                              {"vocab_size", vocab}, {"tie_word_embeddings", true}};
  std::ofstream(dir + "/config.json") << cfg.dump();
}

const tl::ImportEntry& find(const tl::CheckpointImport& ci, const std::string& name) {
  for (const auto& e : ci.entries()) if (e.name == name) return e;
  FAIL("no entry " << name);
  throw 0;
}

}  // namespace

TEST_CASE("import: HF names map to TinyLoop names") {
  const std::map<std::string, std::pair<std::string, int>> table = {
      {"model.embed_tokens.weight", {"embed", -1}},
      {"model.norm.weight", {"final_norm", -1}},
      {"lm_head.weight", {"head", -1}},
      {"model.layers.0.input_layernorm.weight", {"pre.0.attn_norm", -1}},
      {"model.layers.11.post_attention_layernorm.weight", {"pre.11.mlp_norm", -1}},
      {"model.layers.3.self_attn.q_proj.weight", {"pre.3.attn_qkv", 0}},
      {"model.layers.3.self_attn.k_proj.weight", {"pre.3.attn_qkv", 1}},
      {"model.layers.3.self_attn.v_proj.weight", {"pre.3.attn_qkv", 2}},
      {"model.layers.3.self_attn.o_proj.weight", {"pre.3.attn_out", -1}},
      {"model.layers.7.mlp.gate_proj.weight", {"pre.7.mlp_gate", -1}},
      {"model.layers.7.mlp.up_proj.weight", {"pre.7.mlp_up", -1}},
      {"model.layers.7.mlp.down_proj.weight", {"pre.7.mlp_down", -1}},
      {"model.layers.7.self_attn.q_proj.bias", {"pre.7.attn_qkv.bias", 0}},
      {"model.layers.7.self_attn.v_proj.bias", {"pre.7.attn_qkv.bias", 2}},
      {"model.layers.7.self_attn.o_proj.bias", {"pre.7.attn_out.bias", -1}},
      {"model.layers.2.mlp.down_proj.bias", {"pre.2.mlp_down.bias", -1}},
      {"model.layers.2.self_attn.q_norm.weight", {"pre.2.q_norm", -1}},
      {"model.layers.2.self_attn.k_norm.weight", {"pre.2.k_norm", -1}},
      {"model.layers.7.self_attn.rotary_emb.inv_freq", {"", -1}},
      {"model.layers.7.self_attn.sinks", {"", -1}},
  };
  for (const auto& [hf, want] : table) {
    CAPTURE(hf);
    int part = 99;
    CHECK(tl::hf_to_tinyloop_name(hf, &part) == want.first);
    CHECK(part == want.second);
  }
  CHECK(tl::is_tinyloop_linear_name("loop.0.mlp_down"));
  CHECK(tl::is_tinyloop_linear_name("head"));
  CHECK(!tl::is_tinyloop_linear_name("embed"));
  CHECK(!tl::is_tinyloop_linear_name("pre.0.attn_norm"));
}

TEST_CASE("import: sharded HF folder, mixed dtypes, q|k|v fused and transposed exactly") {
  const std::string dir = tmp_dir("hf");
  const int64_t D = 8, F = 12;
  std::vector<tl::Tensor> s1, s2;
  s1.push_back(seq_tensor("model.embed_tokens.weight", {10, D}, tl::DType::F32, 0));
  s1.push_back(seq_tensor("model.layers.0.self_attn.q_proj.weight", {D, D}, tl::DType::BF16, 1));
  s1.push_back(seq_tensor("model.layers.0.self_attn.k_proj.weight", {4, D}, tl::DType::BF16, 2));
  s2.push_back(seq_tensor("model.layers.0.self_attn.v_proj.weight", {4, D}, tl::DType::BF16, 3));
  s2.push_back(seq_tensor("model.layers.0.self_attn.o_proj.weight", {D, D}, tl::DType::F16, 4));
  s2.push_back(seq_tensor("model.layers.0.mlp.down_proj.weight", {D, F}, tl::DType::F32, 5));
  std::vector<const tl::Tensor*> p1, p2;
  for (auto& t : s1) p1.push_back(&t);
  for (auto& t : s2) p2.push_back(&t);
  tl::write_safetensors(dir + "/model-00001-of-00002.safetensors", p1);
  tl::write_safetensors(dir + "/model-00002-of-00002.safetensors", p2);
  nlohmann::json idx = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  for (auto& t : s1) idx["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (auto& t : s2) idx["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << idx.dump();
  write_config(dir, D, F, 1, 10);

  tl::CheckpointImport ci(dir, "");
  CHECK(ci.kind() == tl::CheckpointKind::kHfFolder);
  CHECK(ci.config().d_model == D);
  const tl::ImportEntry& qkv = find(ci, "pre.0.attn_qkv");
  CHECK(qkv.kind == tl::ImportEntry::Kind::kLinear);
  CHECK(qkv.shape == std::vector<int64_t>{D, D + 8});
  const std::vector<float> W = ci.read_linear(qkv);
  int64_t bad = 0, n0 = 0;
  for (const char* part : {"q", "k", "v"}) {
    const tl::Tensor& src = (std::string(part) == "v") ? s2[0] : s1[std::string(part) == "q" ? 1 : 2];
    const std::vector<float> v = src.to_float();
    for (int64_t r = 0; r < src.shape[0]; ++r)
      for (int64_t k = 0; k < D; ++k) bad += W[size_t(k * (D + 8) + n0 + r)] != v[size_t(r * D + k)];
    n0 += src.shape[0];
  }
  CHECK(bad == 0);
  const tl::ImportEntry& down = find(ci, "pre.0.mlp_down");
  CHECK(down.shape == std::vector<int64_t>{F, D});  // [K, N] from PyTorch [N=D, K=F]
  CHECK(find(ci, "embed").kind == tl::ImportEntry::Kind::kDense);

  // --only: the rest of the linears stay dense, transposed, in their own dtype.
  tl::CheckpointImport only(dir, "mlp_down");
  const tl::ImportEntry& o = find(only, "pre.0.attn_out");
  CHECK(o.kind == tl::ImportEntry::Kind::kDenseLinear);
  const tl::Tensor t = only.read_dense(o);
  CHECK(t.dtype == tl::DType::F16);
  CHECK(t.shape == std::vector<int64_t>{D, D});
  const std::vector<float> tv = t.to_float(), sv = s2[1].to_float();
  for (int64_t k = 0; k < D; ++k)
    for (int64_t n = 0; n < D; ++n) bad += tv[size_t(k * D + n)] != sv[size_t(n * D + k)];
  CHECK(bad == 0);
}

TEST_CASE("import: a q/k/v triple with a missing part or mismatched K is refused") {
  const std::string dir = tmp_dir("qkv");
  std::vector<tl::Tensor> ts;
  ts.push_back(seq_tensor("model.layers.0.self_attn.q_proj.weight", {8, 8}, tl::DType::F16, 0));
  ts.push_back(seq_tensor("model.layers.0.self_attn.k_proj.weight", {4, 8}, tl::DType::F16, 0));
  std::vector<const tl::Tensor*> p;
  for (auto& t : ts) p.push_back(&t);
  tl::write_safetensors(dir + "/model.safetensors", p);
  write_config(dir, 8, 12, 1, 10);
  CHECK_THROWS_WITH_AS(tl::CheckpointImport(dir, ""), doctest::Contains("missing v_proj weight for pre.0.attn_qkv"), tl::Error);
  ts.push_back(seq_tensor("model.layers.0.self_attn.v_proj.weight", {4, 6}, tl::DType::F16, 0));
  p.clear();
  for (auto& t : ts) p.push_back(&t);
  tl::write_safetensors(dir + "/model.safetensors", p);
  CHECK_THROWS_WITH_AS(tl::CheckpointImport(dir, ""), doctest::Contains("in_features 6 differs"), tl::Error);
}

TEST_CASE("import: .tinyloop input -- fp16 linears quantized, quantized entries and config copied") {
  const std::string dir = tmp_dir("tl");
  const std::string src = dir + "/in.tinyloop", out = dir + "/out.tinyloop";
  {
    tl::TinyloopWriter w(src, "test");
    tl::ModelConfig c;
    c.architecture = "tinyloop";
    c.d_model = 64; c.n_heads = 2; c.n_kv_heads = 2; c.d_head = 32; c.ffn = 128; c.vocab = 32;
    c.n_pre = 1; c.n_loop = 1; c.loops = 2;
    w.write_config(c);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    std::vector<float> v(64 * 128);
    for (float& x : v) x = nd(rng);
    w.write_dense(tl::Tensor::from_float("loop.0.mlp_up", {64, 128}, v.data(), tl::DType::F16));
    w.write_dense(tl::Tensor::from_float("embed", {32, 64}, v.data(), tl::DType::F16));
    tl::QuantWeight q;
    q.name = "pre.0.mlp_up";
    q.K = 64; q.N = 128; q.group_size = 64;
    q.q.assign(64 * 128, 3);
    q.scale.assign(128, tl::float_to_half(0.5f));
    q.zero.assign(128, tl::float_to_half(-1.0f));
    q.provenance = {{"method", "elsewhere"}};
    w.write_quant(q);
    w.commit();
  }
  tl::GptqQuantizeOptions o;
  o.input = src;
  o.output = out;
  o.method = "rtn";
  o.group_size = tl::GroupSize::rows(32);
  o.quiet = true;
  REQUIRE(tl::run_gptq_quantize(o) == 0);
  tl::TinyloopReader r(out);
  CHECK(r.quant_names() == std::vector<std::string>{"loop.0.mlp_up", "pre.0.mlp_up"});
  CHECK(r.read_quant("pre.0.mlp_up").provenance["method"] == "elsewhere");
  const tl::QuantWeight lq = r.read_quant("loop.0.mlp_up");
  CHECK(lq.group_size == 32);
  CHECK(lq.provenance["method"] == "rtn");
  CHECK(r.dense_names() == std::vector<std::string>{"embed"});
  CHECK(r.config().n_loop == 1);
  CHECK(r.config().loops == 2);
}
