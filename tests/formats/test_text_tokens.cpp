// Text inputs (formats/text_tokens.h): the shipped SentencePiece fixture (tests/data/spm) gives the
// ids the Python sentencepiece package gives for the same whole-file text, with BOS once as
// tokenizer_config.json says; bad text and unsupported tokenizers are errors naming the file.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fixtures.h"
#include "formats/text_tokens.h"

namespace {

using tl::test::scratch;
namespace fs = std::filesystem;

std::string error_of(const std::string& text, const std::string& dir, int64_t vocab) {
  try {
    tl::tokenize_text_file(text, dir, vocab);
  } catch (const tl::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("text tokens: SentencePiece ids as the sentencepiece package gives them, BOS once") {
  const std::string spm = TL_SPM_DIR;
  if (!tl::text_tokenizer_unavailable_reason().empty()) {
    CHECK(error_of(spm + "/sample.txt", spm, 400).find("no SentencePiece") != std::string::npos);
    return;
  }
  const nlohmann::json want = nlohmann::json::parse(std::ifstream(spm + "/sample.ids.json"));
  const std::vector<int32_t> ids = want["ids"].get<std::vector<int32_t>>();
  const tl::TextTokens t = tl::tokenize_text_file(spm + "/sample.txt", spm, 400);
  CHECK(t.bos);
  REQUIRE(t.ids.size() == ids.size() + 1);
  CHECK(t.ids[0] == want["bos_id"].get<int32_t>());
  CHECK(std::vector<int32_t>(t.ids.begin() + 1, t.ids.end()) == ids);
  CHECK(t.bytes == int64_t(fs::file_size(spm + "/sample.txt")));

  // add_bos_token false: the ids alone; a vocabulary smaller than the tokenizer's: refused.
  const std::string dir = scratch("text_tokens");
  fs::copy_file(spm + "/tokenizer.model", dir + "/tokenizer.model");
  std::ofstream(dir + "/tokenizer_config.json") << R"({"add_bos_token": false, "add_eos_token": false})";
  CHECK(tl::tokenize_text_file(spm + "/sample.txt", dir, 400).ids == ids);
  CHECK(error_of(spm + "/sample.txt", dir, 300).find("outside the model's vocabulary of 300") != std::string::npos);
}

TEST_CASE("text tokens: bad text and unsupported tokenizers are errors naming the file") {
  const std::string spm = TL_SPM_DIR, dir = scratch("text_tokens_bad");
  std::ofstream(dir + "/latin1.txt") << "caf\xe9 au lait";
  CHECK(error_of(dir + "/latin1.txt", spm, 400).find("latin1.txt: not UTF-8 at byte 3") != std::string::npos);
  std::ofstream(dir + "/overlong.txt") << "ok \xc0\xaf";
  CHECK(error_of(dir + "/overlong.txt", spm, 400).find("not UTF-8 at byte 3") != std::string::npos);
  std::ofstream(dir + "/empty.txt");
  CHECK(error_of(dir + "/empty.txt", spm, 400).find("empty") != std::string::npos);
  std::ofstream(dir + "/ok.txt") << "text";
  fs::create_directories(dir + "/bpe");
  std::ofstream(dir + "/bpe/tokenizer.json") << "{}";
  CHECK(error_of(dir + "/ok.txt", dir + "/bpe", 400).find("only tokenizer.json") != std::string::npos);
  fs::create_directories(dir + "/none");
  CHECK(error_of(dir + "/ok.txt", dir + "/none", 400).find("no tokenizer.model or tokenizer.json") != std::string::npos);
  CHECK(error_of(dir + "/ok.txt", "", 400).find("give --tokenizer DIR") != std::string::npos);
  CHECK(error_of(dir + "/missing.txt", spm, 400).find("missing.txt") != std::string::npos);
}
