// The e2e tier's inputs beyond a .tinyloop and token ids. A GPTQ checkpoint folder as a model
// (load_model_weights, tl-verify --tiers e2e FILE=folder): the folder tl-export writes from a quantized .tinyloop reads back as the same model (codes and
// scales bit for bit, q | k | v joined, zero points within one fp16 step, Marlin-packed on the way
// in), scores the same perplexity on the CPU, and the kernel tiers refuse the folder by name; and a
// text input (--text, tokenizer.model or tokenizer.json) scores what its token ids score.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "core/error.h"
#include "text/text_tokens.h"
#include "formats/token_file.h"
#include "jobs/hf_export.h"
#include "libconvert/minmax_quantizer.h"
#include "libconvert/model_weights.h"
#include "libverify/e2e_tier.h"
#include "verify/verify_test_util.h"

namespace {

using namespace tl::verify;
using namespace tl::verify::testing;

tl::ModelWeights quantized_llama(uint64_t seed) {
  tl::ModelConfig c;
  c.architecture = "llama";
  c.d_model = 128;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_head = 32;
  c.ffn = 256;
  c.vocab = 96;
  c.n_pre = 2;
  c.max_seq = 128;
  tl::ModelWeights w = tl::random_model_weights(c, seed);
  for (auto& b : w.pre)
    for (const char* s : tl::kBlockLinearNames) tl::rtn_quantize_linear(*b.linear(s), 128);
  return w;
}

struct Case {
  std::string dir, file, folder, tokens;
};

Case make_case(const std::string& name) {
  Case c;
  c.dir = scratch_dir(name);
  c.file = c.dir + "/m.tinyloop";
  c.folder = c.dir + "/gptq";
  c.tokens = c.dir + "/t.u32";
  tl::write_model_tinyloop(quantized_llama(5), c.file, tl::DType::F16);
  tl::ExportOptions o;
  o.input = c.file;
  o.output = c.folder;
  o.quiet = true;
  REQUIRE(tl::run_tl_export(o) == 0);
  std::vector<int32_t> tok(512);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 13 + i / 7) % 96);
  tl::write_token_file_u32(c.tokens, tok);
  return c;
}

}  // namespace

TEST_CASE("a GPTQ folder read as a model: the exported file's weights, q | k | v joined, Marlin-packed") {
  const Case c = make_case("gptq_folder_model");
  const tl::ModelWeights a = tl::load_model_weights(c.file, false);
  const tl::ModelWeights b = tl::load_model_weights(c.folder, /*with_marlin=*/true);
  CHECK(b.config.d_model == a.config.d_model);
  CHECK(b.config.n_pre == 2);
  for (const std::string& n : a.linear_names()) {
    CAPTURE(n);
    const tl::LinearWeight* la = a.find_linear(n);
    const tl::LinearWeight* lb = b.find_linear(n);
    REQUIRE(lb != nullptr);
    REQUIRE(bool(la->quant) == bool(lb->quant));
    if (!la->quant) {
      CHECK(la->W == lb->W);  // the dense head, transposed out and back
      continue;
    }
    const tl::QuantWeight& qa = *la->quant;
    const tl::QuantWeight& qb = *lb->quant;
    CHECK(qb.q == qa.q);
    CHECK(qb.scale == qa.scale);
    size_t far = 0;
    for (size_t i = 0; i < qa.zero.size(); ++i) far += std::abs(int(qa.zero[i]) - int(qb.zero[i])) > 1;
    CHECK(far == 0);
    CHECK(qb.marlin.has_value());  // K, N multiples of 128, one group per row: the gate passes
  }
  CHECK(b.embed == a.embed);
  CHECK(b.final_norm == a.final_norm);
}

TEST_CASE("tl-verify on a GPTQ folder: the e2e tier scores it as the file it came from; kernel tiers refuse it") {
  const Case c = make_case("gptq_folder_e2e");
  E2eOptions o;
  o.tokens = c.tokens;
  o.ctx = 64;
  o.device = E2eDevice::kCpu;
  o.file = c.file;
  const E2eResult from_file = run_e2e_tier(o);
  o.file = c.folder;
  const E2eResult from_folder = run_e2e_tier(o);
  REQUIRE(from_file.status == Status::kPassed);
  REQUIRE(from_folder.status == Status::kPassed);
  REQUIRE(from_folder.main.rows.size() == 1);
  const double a = from_file.main.rows[0].s.ppl, b = from_folder.main.rows[0].s.ppl;
  MESSAGE("PPL: file " << a << ", exported GPTQ folder " << b << " (relative " << (b / a - 1) << ")");
  // The folder's weights are the file's with some zero terms one fp16 step away (2^-11 of a zero
  // of at most 15 scales: < 1 % of one quantization step, random in sign); measured 6e-5 relative
  // here. 1e-3 is the agreement an exported model owes tl-verify's figure for the file.
  CHECK(std::fabs(b / a - 1) <= 1e-3);
  CHECK(b != a);  // the folder really was read (its zero points differ from the file's)

  VerifyOptions v;
  v.file = c.folder;
  CHECK_THROWS_WITH_AS(run_verify(v), doctest::Contains("a quantized checkpoint folder: the pack tier reads .tinyloop files"),
                       tl::Error);
  v.tiers = {TierId::kE2e};
  v.e2e = o;
  v.e2e.device = E2eDevice::kCpu;
  const RunOutput e2e = run_verify(v);
  INFO(e2e.out << e2e.err);
  CHECK(e2e.rc == 0);
  CHECK(e2e.out.find("e2e: passed") != std::string::npos);
  CHECK(e2e.out.find(", device: CPU (") != std::string::npos);  // the e2e tier's device, not "none"
}

TEST_CASE("e2e --text: the figures of --tokens on the ids the model's tokenizer gives the text") {
  // SentencePiece (tokenizer.model) and byte-level BPE (tokenizer.json, the Llama 3 fixture with
  // its BOS template and special tokens): each tokenizer's ids, scored as --tokens, give the
  // figures --text gives.
  struct Tok {
    std::string dir, why_not;
    int64_t vocab;
  };
  const std::string spm = TL_SPM_DIR;
  std::vector<Tok> toks = {{spm, tl::text_tokenizer_unavailable_reason(), 512},
                           {spm + "/../bpe/llama3", tl::tokenizer_json_unavailable_reason(), 2048}};
  const Case c = make_case("e2e_text");
  std::string text;
  {
    std::ifstream in(spm + "/sample.txt");
    const std::string one((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (int i = 0; i < 6; ++i) text += one;
  }
  text += "<|end_of_text|> and a special token written in the text.\n";
  std::ofstream(c.dir + "/eval.txt") << text;
  E2eOptions o;
  for (const Tok& tok : toks) {
    CAPTURE(tok.dir);
    if (!tok.why_not.empty()) continue;  // test_text_tokens.cpp checks the refusal
    // The case's model has 96 tokens; the tokenizers 400 and 1517: a model of `vocab` tokens.
    tl::ModelConfig cfg = quantized_llama(5).config;
    cfg.vocab = tok.vocab;
    tl::ModelWeights big = tl::random_model_weights(cfg, 6);
    for (auto& b : big.pre) tl::rtn_quantize_linear(b.mlp_up, 128);
    const std::string file = c.dir + "/v" + std::to_string(tok.vocab) + ".tinyloop";
    tl::write_model_tinyloop(big, file, tl::DType::F16);
    const tl::TextTokens t = tl::tokenize_text_file(c.dir + "/eval.txt", tok.dir, tok.vocab);
    tl::write_token_file_u32(c.dir + "/eval.u32", t.ids);
    o = E2eOptions();
    o.file = file;
    o.ctx = 64;
    o.device = E2eDevice::kCpu;
    o.tokens = c.dir + "/eval.u32";
    const E2eResult ids = run_e2e_tier(o);
    o.tokens.clear();
    o.text = c.dir + "/eval.txt";
    o.tokenizer = tok.dir;
    const E2eResult from_text = run_e2e_tier(o);
    REQUIRE(ids.status == Status::kPassed);
    REQUIRE(from_text.status == Status::kPassed);
    CHECK(from_text.n_tokens == int64_t(t.ids.size()));
    CHECK(from_text.scored == ids.scored);
    CHECK(from_text.main.rows[0].s.ppl == ids.main.rows[0].s.ppl);
  }
  if (o.text.empty()) return;
  // Both inputs at once: refused.
  o.tokens = c.dir + "/eval.u32";
  CHECK_THROWS_WITH_AS(run_e2e_tier(o), doctest::Contains("give one of --tokens and --text"), tl::Error);
}
