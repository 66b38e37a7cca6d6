// tl-export --format gptq | compressed-tensors (jobs/hf_export.h): a quantized .tinyloop
// written as an HF folder and read back with the project's importer (quant_checkpoint.h, which
// follows the AutoGPTQ / GPTQModel and compressed-tensors layouts): codes and scales bit for bit, the zero point as z * scale, every
// dense tensor unchanged under its HF name, q | k | v split, config and tokenizer carried, shards;
// and every refusal (float zero points, zero point 0 in v1, a looped model, mixed group sizes, an
// existing output, a --from of another model) leaves nothing behind.
#include <doctest/doctest.h>

#include <iostream>
#include <sstream>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "formats/tinyloop_file.h"
#include "libconvert/quant_checkpoint.h"
#include "jobs/hf_export.h"
#include "libconvert/minmax_quantizer.h"
#include "libconvert/model_weights.h"

namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  const std::string d = std::string(TL_TEST_TMP) + "/gptq_export_" + name + "_" + std::to_string(getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

tl::ModelConfig llama_config() {
  tl::ModelConfig c;
  c.architecture = "llama";
  c.d_model = 256;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_head = 64;
  c.ffn = 512;
  c.vocab = 1536;  // with it the folder is ~2.4 MB: several 1 MiB shards
  c.n_pre = 2;
  c.max_seq = 128;
  c.qkv_bias = true;
  return c;
}

void quantize(tl::LinearWeight& l, int64_t group_size, tl::ZeroMode mode) { tl::rtn_quantize_linear(l, group_size, mode); }

// Every block linear and the head RTN with integer zero points (group 32, or `gs`).
tl::ModelWeights quantized_model(uint64_t seed, int64_t gs = 32, tl::ZeroMode mode = tl::ZeroMode::kInt) {
  tl::ModelWeights w = tl::random_model_weights(llama_config(), seed);
  for (auto& b : w.pre)
    for (const char* s : tl::kBlockLinearNames) quantize(*b.linear(s), gs, mode);
  quantize(w.head, gs, mode);
  return w;
}

// An HF folder as the model came from: its config.json and a tokenizer file.
std::string hf_folder(const std::string& dir, const tl::ModelConfig& c) {
  const std::string d = dir + "/orig";
  fs::create_directories(d);
  nlohmann::json j = tl::model_config_to_hf(c);
  j["bos_token_id"] = 1;  // a key of the original that must survive
  std::ofstream(d + "/config.json") << j.dump(2);
  std::ofstream(d + "/tokenizer.json") << "{\"model\": {\"type\": \"BPE\"}}";
  return d;
}

tl::ExportOptions options(const std::string& in, const std::string& out, const std::string& from) {
  tl::ExportOptions o;
  o.input = in;
  o.output = out;
  o.from = from;
  o.quiet = true;
  return o;
}

std::string error_of(const tl::ExportOptions& o) {
  try {
    tl::run_tl_export(o);
  } catch (const tl::Error& e) {
    return e.what();
  }
  return "";
}

// Nothing at `out` and no temporary beside it.
void check_nothing_left(const std::string& dir, const std::string& out) {
  CHECK_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(dir)) CHECK_MESSAGE(e.path().filename().string().find(".tmp-") == std::string::npos, e.path());
}

}  // namespace

TEST_CASE("tl-export: the folder reads back through the importer with the file's codes, scales and z") {
  for (const char* fmt : {"v1", "v2", "auto", "compressed-tensors"}) {
    CAPTURE(fmt);
    const bool ct = std::string(fmt) == "compressed-tensors";
    const std::string dir = scratch(std::string("roundtrip_") + fmt);
    const tl::ModelWeights w = quantized_model(7);
    const std::string file = dir + "/m.tinyloop";
    tl::write_model_tinyloop(w, file, tl::DType::F16);
    const std::string from = hf_folder(dir, w.config);
    tl::ExportOptions o = options(file, dir + "/out", from);
    if (ct) o.format = fmt;
    else o.gptq_format = fmt;
    o.max_shard_bytes = 1u << 20;
    REQUIRE(tl::run_tl_export(o) == 0);
    const std::string out = dir + "/out";
    CHECK(fs::exists(out + "/model.safetensors.index.json"));
    CHECK_FALSE(fs::exists(out + "/model.safetensors"));
    int shards = 0;
    for (const auto& e : fs::directory_iterator(out)) shards += e.path().filename().string().rfind("model-0000", 0) == 0;
    CHECK(shards >= 2);
    CHECK(fs::exists(out + "/tokenizer.json"));
    check_nothing_left(dir, dir + "/none");

    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out + "/config.json"));
    CHECK(cfg["bos_token_id"] == 1);
    const nlohmann::json& qc = cfg["quantization_config"];
    if (ct) {
      CHECK(qc["quant_method"] == "compressed-tensors");
      CHECK(qc["format"] == "pack-quantized");
      const nlohmann::json& wq = qc["config_groups"]["group_0"]["weights"];
      CHECK(wq["group_size"] == 32);
      CHECK(wq["strategy"] == "group");
      CHECK(wq["symmetric"] == false);
      CHECK(qc["ignore"].empty());  // the head is quantized too
    } else {
      CHECK(qc["quant_method"] == "gptq");
      CHECK(qc["group_size"] == 32);
      CHECK(qc["lm_head"] == true);
    }

    const tl::QuantCheckpoint ck(out);
    CHECK(ck.config().format == (ct ? tl::QuantFormat::kCompressedTensors : tl::QuantFormat::kGptq));
    // auto on a model whose zero points all fit v1 writes v1.
    if (!ct) CHECK(ck.config().gptq.checkpoint_format == (std::string(fmt) == "v2" ? "gptq_v2" : "gptq"));
    CHECK_FALSE(ck.config().sym);
    CHECK(ck.quant_names().size() == 2 * 7 + 1);  // q, k, v, o, gate, up, down per layer + lm_head
    const tl::TinyloopReader in(file);
    const int64_t qd = 4 * 64, kvd = 2 * 64;
    struct Part {
      const char* tl;
      const char* hf;
      int64_t n0, n1;
    };
    uint64_t moved = 0, groups = 0;
    for (int layer = 0; layer < 2; ++layer) {
      const std::string p = "pre." + std::to_string(layer) + ".", h = "model.layers." + std::to_string(layer) + ".";
      for (const Part& part : {Part{"attn_qkv", "self_attn.q_proj", 0, qd}, Part{"attn_qkv", "self_attn.k_proj", qd, qd + kvd},
                               Part{"attn_qkv", "self_attn.v_proj", qd + kvd, qd + 2 * kvd},
                               Part{"attn_out", "self_attn.o_proj", 0, 256}, Part{"mlp_gate", "mlp.gate_proj", 0, 512},
                               Part{"mlp_up", "mlp.up_proj", 0, 512}, Part{"mlp_down", "mlp.down_proj", 0, 256}}) {
        CAPTURE(part.hf);
        const tl::QuantWeight src = in.read_quant(p + part.tl, false);
        const tl::QuantWeight got = ck.read_quant(h + part.hf);
        const int64_t Np = part.n1 - part.n0;
        REQUIRE(got.K == src.K);
        REQUIRE(got.N == Np);
        CHECK(got.group_size == src.group_size);
        size_t bad_q = 0, bad_s = 0, bad_z = 0;
        for (int64_t k = 0; k < src.K; ++k)
          for (int64_t n = 0; n < Np; ++n) bad_q += got.q[size_t(k * Np + n)] != src.q[size_t(k * src.N + part.n0 + n)];
        for (int64_t g = 0; g < src.groups(); ++g)
          for (int64_t n = 0; n < Np; ++n) {
            const size_t i = size_t(g * src.N + part.n0 + n), j = size_t(g * Np + n);
            const tl::half_bits s = src.scale[i];
            bad_s += got.scale[j] != s;
            // The importer's zero is fp16(-(z * scale)) for the file's integer z; the file's own
            // is fp16(-(z * scale32)): the same, or one fp16 step away.
            const float z = std::nearbyint(-tl::half_to_float(src.zero[i]) / tl::half_to_float(s));
            bad_z += got.zero[j] != tl::float_to_half(-(z * tl::half_to_float(s)));
            const int steps = std::abs(int(got.zero[j]) - int(src.zero[i]));
            CHECK(steps <= 1);
            moved += steps != 0;
            ++groups;
          }
        CHECK(bad_q == 0);
        CHECK(bad_s == 0);
        CHECK(bad_z == 0);
      }
      // The bias split like the weight; norms under their HF names, bit for bit.
      const tl::Tensor bias = in.read_dense(p + "attn_qkv.bias");
      const tl::Tensor kb = ck.read_dense(h + "self_attn.k_proj.bias");
      REQUIRE(kb.shape == std::vector<int64_t>{kvd});
      CHECK(std::memcmp(kb.data.data(), bias.data.data() + size_t(qd) * 2, size_t(kvd) * 2) == 0);
      CHECK(ck.read_dense(h + "input_layernorm.weight").data == in.read_dense(p + "attn_norm").data);
      CHECK(ck.read_dense(h + "post_attention_layernorm.weight").data == in.read_dense(p + "mlp_norm").data);
    }
    CHECK(ck.read_dense("model.embed_tokens.weight").data == in.read_dense("embed").data);
    CHECK(ck.read_dense("model.norm.weight").data == in.read_dense("final_norm").data);
    const tl::QuantWeight head = ck.read_quant("lm_head");
    CHECK(head.q == in.read_quant("head", false).q);
    MESSAGE(fmt << ": " << moved << " of " << groups << " zero points one fp16 step from the file's");
  }
}

TEST_CASE("tl-export gptq: refusals name the weight or the reason and leave nothing behind") {
  const std::string dir = scratch("refuse");
  const std::string out = dir + "/out";
  SUBCASE("float zero points") {
    const tl::ModelWeights w = quantized_model(8, 32, tl::ZeroMode::kFloat);
    tl::write_model_tinyloop(w, dir + "/f.tinyloop", tl::DType::F16);
    const std::string e = error_of(options(dir + "/f.tinyloop", out, ""));
    CHECK(e.find("is not an integer zero point") != std::string::npos);
    CHECK(e.find(": head: ") != std::string::npos);  // the first quantized weight in name order
    check_nothing_left(dir, out);
  }
  SUBCASE("zero point 0: refused in v1, written in v2 and by auto (as v2, saying why)") {
    tl::ModelWeights w = tl::random_model_weights(llama_config(), 9);
    for (auto& b : w.pre)
      for (const char* s : tl::kBlockLinearNames) {
        tl::LinearWeight& l = *b.linear(s);
        for (int64_t k = 0; k < l.K; ++k) l.W[size_t(k * l.N + 3)] = std::fabs(l.W[size_t(k * l.N + 3)]);  // column 3 >= 0: z = 0
        quantize(l, 32, tl::ZeroMode::kInt);
      }
    tl::write_model_tinyloop(w, dir + "/z.tinyloop", tl::DType::F16);
    tl::ExportOptions v1 = options(dir + "/z.tinyloop", out, "");
    v1.gptq_format = "v1";
    const std::string e = error_of(v1);
    CHECK(e.find("zero point 0, which the v1 layout") != std::string::npos);
    CHECK(e.find("use --gptq-format v2 or auto") != std::string::npos);
    check_nothing_left(dir, out);
    // auto (the default): the v1 attempt is discarded, v2 written, the reason in --json.
    tl::ExportOptions a = options(dir + "/z.tinyloop", dir + "/auto", "");
    a.json = true;
    std::ostringstream json;
    std::streambuf* was = std::cout.rdbuf(json.rdbuf());
    const int rc = tl::run_tl_export(a);
    std::cout.rdbuf(was);
    CHECK(rc == 0);
    const nlohmann::json r = nlohmann::json::parse(json.str());
    CHECK(r["checkpoint_format"] == "gptq_v2");
    CHECK(r["checkpoint_format_reason"].get<std::string>().find("has zero point 0, which v1 (stored z - 1) cannot hold") !=
          std::string::npos);
    CHECK(tl::QuantCheckpoint(dir + "/auto").config().gptq.checkpoint_format == "gptq_v2");
    check_nothing_left(dir, dir + "/none");
    tl::ExportOptions v2 = options(dir + "/z.tinyloop", out, "");
    v2.gptq_format = "v2";
    CHECK(tl::run_tl_export(v2) == 0);
    const tl::QuantCheckpoint ck(out);
    const tl::QuantWeight g = ck.read_quant("model.layers.0.mlp.up_proj");
    CHECK(g.zero[3] == tl::float_to_half(-0.0f));  // z = 0 read back: zero = -(0 * scale)
  }
  SUBCASE("compressed-tensors: a ragged last group is refused by name") {
    const tl::ModelWeights w = quantized_model(13, 96);  // K = 256 and 512: not multiples of 96
    tl::write_model_tinyloop(w, dir + "/r.tinyloop", tl::DType::F16);
    tl::ExportOptions o = options(dir + "/r.tinyloop", out, "");
    o.format = "compressed-tensors";
    const std::string e = error_of(o);
    CHECK(e.find("a ragged last group") != std::string::npos);
    CHECK(e.find("is not a multiple of the group size 96") != std::string::npos);
    check_nothing_left(dir, out);
  }
  SUBCASE("a looped model, mixed group sizes, an existing output, another model's --from") {
    tl::ModelConfig lc = llama_config();
    lc.architecture = "tinyloop";
    lc.n_pre = 1;
    lc.n_loop = 1;
    lc.loops = 2;
    tl::ModelWeights loop = tl::random_model_weights(lc, 10);
    quantize(*loop.pre[0].linear("mlp_up"), 32, tl::ZeroMode::kInt);
    tl::write_model_tinyloop(loop, dir + "/loop.tinyloop", tl::DType::F16);
    CHECK(error_of(options(dir + "/loop.tinyloop", out, "")).find("a looped model") != std::string::npos);

    tl::ModelWeights mixed = quantized_model(11);
    quantize(*mixed.pre[1].linear("mlp_down"), 128, tl::ZeroMode::kInt);
    tl::write_model_tinyloop(mixed, dir + "/mixed.tinyloop", tl::DType::F16);
    const std::string em = error_of(options(dir + "/mixed.tinyloop", out, ""));
    CHECK(em.find("a GPTQ config holds one group size") != std::string::npos);
    CHECK(em.find("pre.1.mlp_down") != std::string::npos);

    const tl::ModelWeights w = quantized_model(12);
    tl::write_model_tinyloop(w, dir + "/m.tinyloop", tl::DType::F16);
    tl::ModelConfig other = w.config;
    other.ffn = 768;
    const std::string wrong = hf_folder(dir + "/w", other);
    CHECK(error_of(options(dir + "/m.tinyloop", out, wrong)).find("intermediate_size is 768") != std::string::npos);
    check_nothing_left(dir, out);

    fs::create_directories(out);
    std::ofstream(out + "/keep.txt") << "mine";
    CHECK(error_of(options(dir + "/m.tinyloop", out, "")).find("exists") != std::string::npos);
    CHECK(fs::exists(out + "/keep.txt"));
  }
}
