// Writes the seed corpora of every fuzz target (tests/fuzz/*.cpp) into OUT/<target>/: small
// valid files made by the project's own writers (so mutation starts from inputs that pass every
// check), plus edge cases. scripts/fuzz.sh adds the reproducers of tests/repro.
//   tl_fuzz_seeds OUT
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/half.h"
#include "formats/calib_file.h"
#include "formats/safetensors.h"
#include "formats/tinyloop_file.h"
#include "fuzz_util.h"
#include "libconvert/checkpoint_layers.h"
#include "libconvert/gptq_checkpoint.h"
#include "formats/marlin_layout.h"

namespace {

std::string g_out;
std::mt19937 g_rng(20261201);

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = g_out + "/" + target;
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

tl::Tensor tensor(const std::string& name, tl::DType dt, std::vector<int64_t> shape) {
  tl::Tensor t;
  t.name = name;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data.resize(size_t(t.numel()) * tl::dtype_size(dt));
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = nd(g_rng);
    if (dt == tl::DType::F32) t.as<float>()[i] = v;
    else if (dt == tl::DType::F16) t.as<uint16_t>()[i] = tl::float_to_half(v);
    else if (dt == tl::DType::BF16) t.as<uint16_t>()[i] = tl::float_to_bf16(v);
    else if (dt == tl::DType::I32) t.as<int32_t>()[i] = int32_t(g_rng() % 1000);
    else t.data[size_t(i)] = uint8_t(g_rng());
  }
  return t;
}

tl::QuantWeight quant(const std::string& name, int64_t K, int64_t N, int64_t gs) {
  tl::QuantWeight w;
  w.name = name;
  w.K = K;
  w.N = N;
  w.group_size = gs;
  w.q.resize(size_t(K * N));
  for (auto& c : w.q) c = uint8_t(g_rng() & 15);
  w.scale.assign(size_t(w.groups() * N), tl::float_to_half(0.01f));
  w.zero.assign(w.scale.size(), tl::float_to_half(-0.08f));
  w.provenance = {{"method", "rtn"}, {"group", std::to_string(gs)}};
  return w;
}

tl::ModelConfig config() {
  tl::ModelConfig c;
  c.d_model = 128;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_head = 32;
  c.ffn = 256;
  c.vocab = 64;
  c.n_pre = 1;
  c.n_loop = 0;
  c.loops = 0;
  return c;
}

void tinyloop_seeds() {
  const std::string p = tl::fuzz::scratch() + "/seed.tinyloop";
  // variant 3: a compact weight (codes only in its Marlin section, format_version 2).
  for (int variant = 0; variant < 4; ++variant) {
    {
      tl::TinyloopWriter w(p, "tl_fuzz_seeds");
      if (variant != 2) w.write_config(config());
      w.write_dense(tensor("embed", variant == 1 ? tl::DType::BF16 : tl::DType::F16, {64, 128}));
      w.write_dense(tensor("pre.0.attn_norm", tl::DType::F32, {128}));
      w.write_dense(tensor("ids", tl::DType::I32, {5}));
      tl::QuantWeight a = quant("pre.0.mlp_up", 128, 256, 128);
      if (variant == 0 || variant == 3) a.marlin = tl::marlin_pack(a);
      w.write_quant(a, variant == 3 ? tl::CodeStorage::kMarlinOnly : tl::CodeStorage::kNative);
      w.write_quant(quant("pre.0.attn_out", 128, 128, variant == 1 ? 32 : 128));
      if (variant == 2) w.write_quant(quant("odd", 48, 7, 16));
      w.commit();
    }
    seed("tinyloop", "model" + std::to_string(variant) + ".tinyloop", slurp(p));
  }
}

void calib_seeds() {
  const std::string p = tl::fuzz::scratch() + "/seed.h5";
  {
    tl::CalibWriter w(p);
    for (const char* n : {"pre.0.attn_qkv", "pre.0.mlp_down"}) {
      tl::Hessian h;
      h.name = n;
      h.K = 24;
      h.nsamples = 4;
      h.H.assign(24 * 24, 0.0f);
      for (int i = 0; i < 24; ++i) h.H[size_t(i * 24 + i)] = 1.0f + 0.1f * float(i);
      w.write(h);
    }
    w.commit();
  }
  seed("calib", "calib.h5", slurp(p));
}

std::string safetensors_bytes(const std::vector<tl::Tensor>& ts, const std::map<std::string, std::string>& meta = {}) {
  const std::string p = tl::fuzz::scratch() + "/seed.safetensors";
  std::vector<const tl::Tensor*> ptrs;
  for (const auto& t : ts) ptrs.push_back(&t);
  tl::write_safetensors(p, ptrs, meta);
  return slurp(p);
}

nlohmann::json hf_config_json() {
  return {{"model_type", "llama"}, {"hidden_size", 128}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"intermediate_size", 256}, {"vocab_size", 64}, {"num_hidden_layers", 1}, {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0}, {"tie_word_embeddings", false}};
}

void safetensors_seeds() {
  seed("safetensors", "mixed.safetensors",
       safetensors_bytes({tensor("a", tl::DType::F32, {3, 5}), tensor("b", tl::DType::F16, {7}),
                          tensor("c", tl::DType::BF16, {2, 2, 2}), tensor("empty", tl::DType::F32, {0})},
                         {{"format", "pt"}}));
  const std::string s1 = safetensors_bytes({tensor("model.embed_tokens.weight", tl::DType::BF16, {64, 128})});
  const std::string s2 = safetensors_bytes({tensor("model.norm.weight", tl::DType::BF16, {128})});
  const nlohmann::json idx = {{"metadata", {{"total_size", s1.size() + s2.size()}}},
                              {"weight_map", {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
                                              {"model.norm.weight", "model-00002-of-00002.safetensors"}}}};
  seed("safetensors_index", "sharded.bin",
       tl::fuzz::pack_files({{"model.safetensors.index.json", idx.dump()},
                             {"model-00001-of-00002.safetensors", s1},
                             {"model-00002-of-00002.safetensors", s2}}));
}

void hf_seeds() {
  nlohmann::json c = hf_config_json();
  seed("hf_config", "llama.json", c.dump());
  c["model_type"] = "qwen2";
  c["head_dim"] = 64;
  seed("hf_config", "qwen2_head_dim.json", c.dump());
  c = hf_config_json();
  c["model_type"] = "tinyloop";
  c["n_pre"] = 1;
  c["n_loop"] = 1;
  c["loops"] = 4;
  seed("hf_config", "tinyloop.json", c.dump());
  c = hf_config_json();
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  seed("hf_config", "rope_scaling.json", c.dump());

  // An HF folder for the importer: every block weight of one layer, [N, K] as PyTorch stores it.
  std::vector<tl::Tensor> ts = {tensor("model.embed_tokens.weight", tl::DType::F16, {64, 128}),
                                tensor("model.norm.weight", tl::DType::F16, {128}),
                                tensor("lm_head.weight", tl::DType::F16, {64, 128})};
  const std::string L = "model.layers.0.";
  for (auto [n, r, k] : std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"self_attn.q_proj", 128, 128}, {"self_attn.k_proj", 64, 128}, {"self_attn.v_proj", 64, 128},
           {"self_attn.o_proj", 128, 128}, {"mlp.gate_proj", 256, 128}, {"mlp.up_proj", 256, 128},
           {"mlp.down_proj", 128, 256}})
    ts.push_back(tensor(L + n + ".weight", tl::DType::F16, {r, k}));
  ts.push_back(tensor(L + "input_layernorm.weight", tl::DType::F16, {128}));
  ts.push_back(tensor(L + "post_attention_layernorm.weight", tl::DType::F16, {128}));
  seed("hf_import", "llama_folder.bin",
       tl::fuzz::pack_files({{"config.json", hf_config_json().dump()}, {"model.safetensors", safetensors_bytes(ts)}}));
}

void token_seeds() {
  std::string u32;
  for (uint32_t t : {1u, 5u, 63u, 0u, 7u, 8u}) for (int b = 0; b < 4; ++b) u32.push_back(char(uint8_t(t >> (8 * b))));
  seed("tokens", "raw.u32", std::string(1, char(0 | (6 << 2))) + u32);
  std::string header = "{'descr': '<u4', 'fortran_order': False, 'shape': (6,), }";
  header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
  std::string npy = "\x93NUMPY";
  npy += '\x01';
  npy += '\x00';
  npy += char(header.size() & 0xff);
  npy += char(header.size() >> 8);
  seed("tokens", "tokens.npy", std::string(1, char(2 | (6 << 2))) + npy + header + u32);
}

void gptq_seeds() {
  const int64_t K = 128, N = 64, gs = 64, G = K / gs;
  std::vector<uint8_t> q(size_t(K * N));
  for (auto& c : q) c = uint8_t(g_rng() & 15);
  std::vector<int32_t> z(size_t(G * N), 8);
  auto i32 = [](const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
    tl::Tensor t;
    t.name = name;
    t.dtype = tl::DType::I32;
    t.shape = std::move(shape);
    t.data.assign(reinterpret_cast<const uint8_t*>(v.data()), reinterpret_cast<const uint8_t*>(v.data() + v.size()));
    return t;
  };
  std::vector<int32_t> g_idx(static_cast<size_t>(K), 0);
  for (int64_t k = 0; k < K; ++k) g_idx[size_t(k)] = int32_t(k / gs);
  const std::string L = "model.layers.0.mlp.up_proj";
  std::vector<tl::Tensor> ts = {i32(L + ".qweight", {K / 8, N}, tl::gptq_pack_qweight(q, K, N)),
                                i32(L + ".qzeros", {G, N / 8}, tl::gptq_pack_qzeros(z, G, N, true)),
                                tensor(L + ".scales", tl::DType::F16, {G, N}), i32(L + ".g_idx", {K}, g_idx),
                                tensor("model.norm.weight", tl::DType::F16, {128})};
  for (size_t i = 0; i < size_t(G * N); ++i) ts[2].as<uint16_t>()[i] = tl::float_to_half(0.01f);
  const nlohmann::json qc = {{"bits", 4}, {"group_size", gs}, {"desc_act", false}, {"sym", true},
                             {"quant_method", "gptq"}, {"checkpoint_format", "gptq"}};
  seed("quant_checkpoint", "gptq_v1.bin",
       tl::fuzz::pack_files({{"quantize_config.json", qc.dump()}, {"model.safetensors", safetensors_bytes(ts)}}));

  // AWQ GEMM: qweight [K, N/8], qzeros [G, N/8], scales [G, N].
  std::vector<int32_t> codes(q.begin(), q.end());
  std::vector<tl::Tensor> awq = {i32(L + ".qweight", {K, N / 8}, tl::awq_pack(codes, K, N)),
                                 i32(L + ".qzeros", {G, N / 8}, tl::awq_pack(z, G, N)), ts[2], ts[4]};
  awq[2].name = L + ".scales";
  const nlohmann::json awq_cfg = {{"model_type", "llama"},
                                  {"quantization_config",
                                   {{"quant_method", "awq"}, {"bits", 4}, {"group_size", gs}, {"zero_point", true},
                                    {"version", "gemm"}}}};
  seed("quant_checkpoint", "awq_gemm.bin",
       tl::fuzz::pack_files({{"config.json", awq_cfg.dump()}, {"model.safetensors", safetensors_bytes(awq)}}));

  // compressed-tensors pack-quantized: weight_packed [N, K/8], weight_scale [N, G],
  // weight_zero_point [N/8, G], weight_shape [2].
  tl::Tensor scale = tensor(L + ".weight_scale", tl::DType::BF16, {N, G});
  for (size_t i = 0; i < size_t(G * N); ++i) scale.as<uint16_t>()[i] = tl::float_to_bf16(0.01f);
  tl::Tensor shape = tensor(L + ".weight_shape", tl::DType::I64, {2});
  shape.as<int64_t>()[0] = N;
  shape.as<int64_t>()[1] = K;
  std::vector<tl::Tensor> ct = {i32(L + ".weight_packed", {N, K / 8}, tl::ct_pack_weight(q, K, N)), scale,
                                i32(L + ".weight_zero_point", {N / 8, G}, tl::ct_pack_zero_points(z, G, N)), shape,
                                ts[4]};
  const nlohmann::json weights = {{"num_bits", 4}, {"type", "int"}, {"symmetric", false}, {"strategy", "group"},
                                  {"group_size", gs}, {"dynamic", false}};
  const nlohmann::json ct_cfg = {
      {"model_type", "llama"},
      {"quantization_config",
       {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"quantization_status", "compressed"},
        {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr}}}}},
        {"ignore", {"lm_head"}}}}};
  seed("quant_checkpoint", "compressed_tensors.bin",
       tl::fuzz::pack_files({{"config.json", ct_cfg.dump()}, {"model.safetensors", safetensors_bytes(ct)}}));
}

void structured_seeds() {
  for (int i = 0; i < 8; ++i) {
    std::string b(256, '\0');
    for (char& c : b) c = char(g_rng());
    seed("tinyloop_structured", "random" + std::to_string(i) + ".bin", b);
  }
}

}  // namespace

// tokenizer_json: the shipped byte-level BPE fixtures (tests/data/bpe) with the start of their
// sample text, when the source tree is given; and one written here.
void tokenizer_seeds(const std::string& root) {
  auto slurp = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  if (!root.empty()) {
    const std::string text = slurp(root + "/tests/data/bpe/sample.txt").substr(0, 600);
    for (const char* f : {"llama3", "qwen2", "gpt2", "smollm"}) {
      const std::string tj = slurp(root + "/tests/data/bpe/" + f + "/tokenizer.json");
      if (tj.empty()) continue;
      seed("tokenizer_json", std::string(f) + ".bin", tl::fuzz::pack_files({{"tokenizer.json", tj}, {"text.txt", text}}));
    }
  }
  // A Llama-3-shaped tokenizer.json in miniature: Split + ByteLevel, an added special token, the
  // BOS template, ignore_merges.
  const std::string tiny = R"({
  "version": "1.0",
  "added_tokens": [{"id": 5, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [5], "tokens": ["<s>"]}}},
  "decoder": null,
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
            "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4}, "merges": ["a b", "\u0120 ab"]}
})";
  seed("tokenizer_json", "tiny.bin", tl::fuzz::pack_files({{"tokenizer.json", tiny}, {"text.txt", "ab ab <s>ba"}}));
}

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: tl_fuzz_seeds OUT [SOURCE_ROOT]\n");
    return 2;
  }
  g_out = argv[1];
  const std::string root = argc == 3 ? argv[2] : "";
  mkdir(g_out.c_str(), 0755);
  try {
    tinyloop_seeds();
    calib_seeds();
    safetensors_seeds();
    hf_seeds();
    token_seeds();
    gptq_seeds();
    structured_seeds();
    tokenizer_seeds(root);
  } catch (const tl::Error& e) {
    std::fprintf(stderr, "tl_fuzz_seeds: %s\n", e.what());
    return 2;
  }
  return 0;
}
