// gptq-quantize --calib-tokens: the sequential calibration on the CPU forward.
//
// On a tiny random TinyLoop model (GQA, two distinct blocks, one loop block run twice) the
// Hessians written by --save-calib are recomputed independently in fp64:
//   pre.0.attn_qkv from rms(embed(tokens)) * attn_norm (the first block's input);
//   pre.1.attn_qkv from the output of pre.0 run with the *quantized* weights read back from the
//   output file (and shown to differ from the fp-weight version, so the order matters);
//   loop.0 counts one sample per window per iteration.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>

#include <unistd.h>

#include <cmath>
#include <random>
#include <string>
#include <sys/stat.h>

#include "formats/calib_file.h"
#include "formats/tinyloop_file.h"
#include "text/text_tokens.h"
#include "formats/token_file.h"
#include "jobs/gptq_quantize_tool.h"
#include "libconvert/model_forward.h"
#include "libconvert/model_weights.h"

namespace {

// H accumulated in float32 (running mean) vs the fp64 recomputation: the relative max-norm
// difference is a few float32 eps times sqrt(rows); 1e-4 leaves ample margin and still fails
// on any wrong input (a missing norm, an unquantized previous block moves H by > 1e-2).
constexpr double kHessianRelTol = 1e-4;

tl::ModelConfig tiny_config() {
  tl::ModelConfig c;
  c.architecture = "tinyloop";
  c.d_model = 128; c.n_heads = 4; c.n_kv_heads = 2; c.d_head = 32; c.ffn = 256; c.vocab = 64;
  c.n_pre = 2; c.n_loop = 1; c.loops = 2; c.max_seq = 64;
  return c;
}

// 2/n sum x x^T over the rows of X (fp64), n = samples.
std::vector<double> hessian64(const tl::ActMatrix& X, int64_t samples) {
  const int64_t K = X.cols();
  std::vector<double> H(size_t(K * K), 0.0);
  for (int64_t r = 0; r < X.rows(); ++r)
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < K; ++j) H[size_t(i * K + j)] += double(X(r, i)) * double(X(r, j));
  for (double& v : H) v *= 2.0 / double(samples);
  return H;
}

double rel_maxdiff(const std::vector<float>& a, const std::vector<double>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d = std::max(d, std::abs(double(a[i]) - b[i]));
    m = std::max(m, std::abs(b[i]));
  }
  return d / m;
}

// The input of a block's attn_qkv: rms(x) * attn_norm.
tl::ActMatrix qkv_input(const tl::ModelConfig& c, const tl::BlockWeights& b, const tl::ActMatrix& x) {
  tl::ActMatrix h;
  tl::rms_norm_rows(x, b.attn_norm, c.norm_eps, h);
  return h;
}

}  // namespace

TEST_CASE("gptq-quantize --calib-tokens calibrates block i+1 on the quantized outputs of block i") {
  const std::string dir = std::string(TL_TEST_TMP) + "/token_calib_" + std::to_string(getpid());
  ::mkdir(TL_TEST_TMP, 0755);
  ::mkdir(dir.c_str(), 0755);
  const tl::ModelConfig cfg = tiny_config();
  const tl::ModelWeights fp = tl::random_model_weights(cfg, 20261129);
  const std::string model = dir + "/model.tinyloop", tokens_path = dir + "/calib.u32";
  tl::write_model_tinyloop(fp, model, tl::DType::F32);
  const int64_t seq = 32, n_seq = 4;
  std::mt19937 rng(7);
  std::vector<int32_t> tokens(size_t(seq * n_seq + 5));  // a ragged tail is ignored
  for (int32_t& t : tokens) t = int32_t(rng() % uint32_t(cfg.vocab));
  tl::write_token_file_u32(tokens_path, tokens);

  tl::GptqQuantizeOptions o;
  o.input = model;
  o.output = dir + "/out.tinyloop";
  o.calib_tokens = tokens_path;
  o.calib_seq = seq;
  o.save_calib = dir + "/hessians.h5";
  o.group_size = tl::GroupSize::rows(64);
  o.quiet = true;
  REQUIRE(tl::run_gptq_quantize(o) == 0);

  tl::CalibReader calib(o.save_calib);
  tl::TinyloopReader out(o.output);
  REQUIRE(out.quant_names().size() == 15);

  // Block 0's input: the embedding, normed.
  tl::ActMatrix x0 = tl::embed_tokens(fp, tokens.data(), seq * n_seq);
  const tl::Hessian h0 = calib.read("pre.0.attn_qkv");
  CHECK(h0.nsamples == n_seq);
  const double e0 = rel_maxdiff(h0.H, hessian64(qkv_input(cfg, fp.pre[0], x0), n_seq));
  INFO("pre.0.attn_qkv H rel diff " << e0);
  CHECK(e0 < kHessianRelTol);

  // Block 1's input: block 0 run with the weights as quantized in the output file.
  const tl::ModelWeights q = tl::load_model_weights(o.output, false);
  tl::ActMatrix xq = x0, xf = x0;
  tl::run_block(cfg, q.pre[0], xq, seq);
  tl::run_block(cfg, fp.pre[0], xf, seq);
  const tl::Hessian h1 = calib.read("pre.1.attn_qkv");
  const double e1q = rel_maxdiff(h1.H, hessian64(qkv_input(cfg, fp.pre[1], xq), n_seq));
  const double e1f = rel_maxdiff(h1.H, hessian64(qkv_input(cfg, fp.pre[1], xf), n_seq));
  INFO("pre.1.attn_qkv H rel diff vs quantized-input " << e1q << ", vs fp-input " << e1f);
  CHECK(e1q < kHessianRelTol);
  CHECK(e1f > 10 * kHessianRelTol);  // the sequential order is visible in H

  // mlp_up shares mlp_gate's input; the loop block counts every iteration.
  CHECK(calib.read("pre.1.mlp_up").H == calib.read("pre.1.mlp_gate").H);
  CHECK(calib.read("loop.0.mlp_down").nsamples == n_seq * cfg.loops);

  // GPTQ's calibrated loss beats RTN's on every weight.
  for (const std::string& name : out.quant_names()) {
    const tl::QuantWeight w = out.read_quant(name, false);
    INFO(name << " gptq " << w.provenance["gptq_loss"] << " rtn " << w.provenance["rtn_loss"]);
    CHECK(w.provenance["gptq_loss"].get<double>() < w.provenance["rtn_loss"].get<double>());
  }
}

TEST_CASE("gptq-quantize --calib-text: the file --calib-tokens writes for the ids the tokenizer gives the text") {
  if (!tl::text_tokenizer_unavailable_reason().empty()) return;  // test_text_tokens.cpp checks the refusal
  const std::string dir = std::string(TL_TEST_TMP) + "/token_calib_text_" + std::to_string(getpid());
  ::mkdir(TL_TEST_TMP, 0755);
  ::mkdir(dir.c_str(), 0755);
  tl::ModelConfig cfg = tiny_config();
  cfg.vocab = 512;  // the fixture tokenizer has 400 pieces
  const std::string model = dir + "/model.tinyloop", text = dir + "/calib.txt", ids = dir + "/calib.u32";
  tl::write_model_tinyloop(tl::random_model_weights(cfg, 20261204), model, tl::DType::F32);
  {
    std::ifstream in(std::string(TL_SPM_DIR) + "/sample.txt");
    const std::string one((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(text);
    for (int i = 0; i < 3; ++i) out << one;
  }
  const tl::TextTokens t = tl::tokenize_text_file(text, TL_SPM_DIR, cfg.vocab);
  tl::write_token_file_u32(ids, t.ids);
  tl::GptqQuantizeOptions o;
  o.input = model;
  o.calib_seq = 64;
  o.group_size = tl::GroupSize::rows(64);
  o.quiet = true;
  o.output = dir + "/from_ids.tinyloop";
  o.calib_tokens = ids;
  REQUIRE(tl::run_gptq_quantize(o) == 0);
  o.output = dir + "/from_text.tinyloop";
  o.calib_tokens.clear();
  o.calib_text = text;
  o.tokenizer = TL_SPM_DIR;
  REQUIRE(tl::run_gptq_quantize(o) == 0);
  const tl::TinyloopReader a(dir + "/from_ids.tinyloop"), b(dir + "/from_text.tinyloop");
  REQUIRE(a.quant_names() == b.quant_names());
  for (const std::string& n : a.quant_names()) {
    const tl::QuantWeight qa = a.read_quant(n, false), qb = b.read_quant(n, false);
    CHECK(qa.q == qb.q);
    CHECK(qa.scale == qb.scale);
    CHECK(qa.zero == qb.zero);
  }
  // A folder without a tokenizer, or none given for a .tinyloop input: refused by name.
  o.tokenizer.clear();
  o.output = dir + "/none.tinyloop";
  CHECK_THROWS_WITH_AS(tl::run_gptq_quantize(o), doctest::Contains("give --tokenizer DIR"), tl::Error);
}

TEST_CASE("gptq-quantize --calib-tokens: bad combinations are errors") {
  tl::GptqQuantizeOptions o;
  o.input = "x";
  o.output = std::string(TL_TEST_TMP) + "/never.tinyloop";
  o.calib_tokens = "t.u32";
  o.calib = "c.h5";
  CHECK_THROWS_WITH(tl::run_gptq_quantize(o), doctest::Contains("exclude each other"));
  o.calib.clear();
  o.method = "rtn";
  CHECK_THROWS_WITH(tl::run_gptq_quantize(o), doctest::Contains("--method gptq only"));
  o.method = "gptq";
  o.calib_tokens.clear();
  o.save_calib = "h.h5";
  o.calib = "c.h5";
  CHECK_THROWS_WITH(tl::run_gptq_quantize(o), doctest::Contains("--save-calib needs --calib-tokens"));
}
