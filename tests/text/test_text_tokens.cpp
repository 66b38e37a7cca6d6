// Text inputs (text/text_tokens.h): the shipped SentencePiece fixture (tests/data/spm) gives the
// ids the Python sentencepiece package gives for the same whole-file text, with BOS once as
// tokenizer_config.json says; the byte-level BPE fixtures (tests/data/bpe: Llama 3, Qwen2, GPT-2
// and SmolLM layouts) give the ids HF `tokenizers` gives, each feature of theirs shown to matter by
// switching it off; bad text and unsupported tokenizers are errors naming the file (and the key).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/fixtures.h"
#include "text/bpe_tokenizer.h"
#include "text/text_tokens.h"

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

// ---- the byte-level BPE fixtures (tests/data/bpe, written by its make_fixtures.py) ----

std::string bpe_dir(const std::string& fixture) { return std::string(TL_SPM_DIR) + "/../bpe/" + fixture; }
std::string bpe_sample() { return std::string(TL_SPM_DIR) + "/../bpe/sample.txt"; }

struct Edge {
  std::string text;
  std::vector<int32_t> ids;
};

// What HF tokenizers gave: <fixture>/expected_ids.json.
struct Expected {
  int64_t vocab = 0;
  std::vector<int32_t> sample;
  std::vector<Edge> edges;
  nlohmann::json all;
};

Expected expected(const std::string& fixture) {
  Expected e;
  e.all = nlohmann::json::parse(std::ifstream(bpe_dir(fixture) + "/expected_ids.json"));
  e.vocab = e.all["vocab_size"].get<int64_t>();
  e.sample = e.all["sample"]["ids"].get<std::vector<int32_t>>();
  for (const auto& x : e.all["edges"])
    e.edges.push_back({x["text"].get<std::string>(), x["ids"].get<std::vector<int32_t>>()});
  return e;
}

const Edge& edge(const Expected& e, const std::string& text) {
  for (const Edge& x : e.edges)
    if (x.text == text) return x;
  throw std::runtime_error("no edge text " + text);
}

std::string slurp_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

nlohmann::json fixture_json(const std::string& fixture) {
  return nlohmann::json::parse(std::ifstream(bpe_dir(fixture) + "/tokenizer.json"));
}

// A folder holding `fixture`'s tokenizer.json as `edit` changes it.
std::string variant(const std::string& fixture, const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const std::string dir = scratch("bpe_" + fixture + "_" + name);
  nlohmann::json j = fixture_json(fixture);
  edit(j);
  std::ofstream(dir + "/tokenizer.json") << j.dump(1);
  return dir;
}

std::vector<int32_t> encode(const std::string& dir, const std::string& text) {
  tl::BpeTokenizer t(dir + "/tokenizer.json");
  return t.encode(text);
}

std::string load_error(const std::string& dir) {
  try {
    tl::BpeTokenizer t(dir + "/tokenizer.json");
  } catch (const tl::Error& e) {
    return e.what();
  }
  return "";
}

// This build reads tokenizer.json (and NFC, for Qwen2); where it does not, the refusal by name.
bool bpe_available(const std::string& fixture) {
  const std::string why = tl::tokenizer_json_unavailable_reason();
  if (!why.empty()) {
    MESSAGE("tokenizer.json " << fixture << ": not run in this build (" << why << "); its refusal checked");
    CHECK(error_of(bpe_sample(), bpe_dir(fixture), 1 << 20).find("no PCRE2") != std::string::npos);
    return false;
  }
  if (fixture == "qwen2" && !tl::BpeTokenizer::nfc_unavailable_reason().empty()) {
    MESSAGE("tokenizer.json qwen2: not run in this build (no utf8proc); its refusal checked");
    CHECK(error_of(bpe_sample(), bpe_dir(fixture), 1 << 20).find("normalizer: this build has no utf8proc") !=
          std::string::npos);
    return false;
  }
  MESSAGE("tokenizer.json " << fixture << ": ran");
  return true;
}

}  // namespace

TEST_CASE("text tokens: SentencePiece ids as the sentencepiece package gives them, BOS once") {
  const std::string spm = TL_SPM_DIR;
  if (!tl::text_tokenizer_unavailable_reason().empty()) {
    MESSAGE("SentencePiece: not run in this build (" << tl::text_tokenizer_unavailable_reason() << "); its refusal checked");
    CHECK(error_of(spm + "/sample.txt", spm, 400).find("no SentencePiece") != std::string::npos);
    return;
  }
  MESSAGE("SentencePiece: ran");
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
  CHECK(error_of(dir + "/ok.txt", dir + "/bpe", 400)
            .find(tl::tokenizer_json_unavailable_reason().empty() ? "bpe/tokenizer.json: model: missing" : "no PCRE2") !=
        std::string::npos);
  fs::create_directories(dir + "/none");
  CHECK(error_of(dir + "/ok.txt", dir + "/none", 400).find("no tokenizer.model or tokenizer.json") != std::string::npos);
  CHECK(error_of(dir + "/ok.txt", "", 400).find("give --tokenizer DIR") != std::string::npos);
  CHECK(error_of(dir + "/missing.txt", spm, 400).find("missing.txt") != std::string::npos);
}

TEST_CASE("text tokens: tokenizer.json (byte-level BPE) ids as HF tokenizers gives them, sample and edge texts") {
  for (const std::string fixture : {"llama3", "qwen2", "gpt2", "smollm"}) {
    CAPTURE(fixture);
    if (!bpe_available(fixture)) continue;
    const Expected want = expected(fixture);
    const tl::TextTokens t = tl::tokenize_text_file(bpe_sample(), bpe_dir(fixture), want.vocab);
    CHECK(t.ids == want.sample);
    CHECK(t.ids.size() > 700);
    CHECK(t.bos == (fixture == "llama3"));  // Llama 3's template prepends <|begin_of_text|>; the others nothing
    CHECK(t.tokenizer == bpe_dir(fixture) + "/tokenizer.json");
    CHECK(t.bytes == int64_t(fs::file_size(bpe_sample())));
    tl::BpeTokenizer tok(bpe_dir(fixture) + "/tokenizer.json");
    for (const Edge& e : want.edges) {
      CAPTURE(e.text);
      CHECK(tok.encode(e.text) == e.ids);
    }
    // The same text again (from the cache) gives the same ids.
    CHECK(tok.encode(slurp_text(bpe_sample())) == want.sample);
    // An edge text through the file path too.
    const std::string dir = scratch("bpe_edge_" + fixture);
    std::ofstream(dir + "/space.txt") << " hello world";
    CHECK(tl::tokenize_text_file(dir + "/space.txt", bpe_dir(fixture), want.vocab).ids == edge(want, " hello world").ids);
    // A vocabulary that lacks the sample's largest id: refused, naming tokenizer.json.
    const int64_t small = *std::max_element(want.sample.begin(), want.sample.end());
    const std::string msg = error_of(bpe_sample(), bpe_dir(fixture), small);
    CHECK(msg.find("tokenizer.json: token ") != std::string::npos);
    CHECK(msg.find("is outside the model's vocabulary of " + std::to_string(small)) != std::string::npos);
  }
}

TEST_CASE("text tokens: each tokenizer.json feature matters: switched off, the ids differ from HF's") {
  const std::string sample = slurp_text(bpe_sample());
  if (bpe_available("llama3")) {
    const Expected want = expected("llama3");
    // The BOS template dropped: the ids lose their first, nothing else changes.
    const std::string no_bos = variant("llama3", "no_bos", [](nlohmann::json& j) {
      j["post_processor"] =
          nlohmann::json{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
    });
    const tl::TextTokens t = tl::tokenize_text_file(bpe_sample(), no_bos, want.vocab);
    CHECK_FALSE(t.bos);
    CHECK(t.ids != want.sample);
    CHECK(t.ids == std::vector<int32_t>(want.sample.begin() + 1, want.sample.end()));
    // Specials as plain text (no added tokens): <|end_of_text|> etc. become many pieces.
    const std::string plain =
        variant("llama3", "plain_specials", [](nlohmann::json& j) { j["added_tokens"] = nlohmann::json::array(); });
    CHECK(encode(plain, sample) != want.sample);
    CHECK(encode(plain, "<|end_of_text|>") != edge(want, "<|end_of_text|>").ids);
    CHECK(edge(want, "<|end_of_text|>").ids.size() == 2);  // BOS, the special
    // Qwen2's regex in place of Llama 3's (digits one by one, not in threes).
    const std::string qwen_regex = variant("llama3", "qwen_regex", [](nlohmann::json& j) {
      j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
          fixture_json("qwen2")["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"];
    });
    CHECK(encode(qwen_regex, sample) != want.sample);
    CHECK(encode(qwen_regex, "1234567") != edge(want, "1234567").ids);
    // ignore_merges off: the vocabulary word that no merge builds comes out in pieces.
    const std::string word = want.all["ignore_merges_word"].get<std::string>();
    const std::string merged =
        variant("llama3", "no_ignore_merges", [](nlohmann::json& j) { j["model"]["ignore_merges"] = false; });
    CHECK(edge(want, word).ids.size() == 2);  // BOS, the word
    CHECK(encode(merged, word) != edge(want, word).ids);
    CHECK(encode(merged, sample) != want.sample);
    // The merges' order is their rank: reversed, other ids.
    const std::string reversed = variant("llama3", "reversed_merges", [](nlohmann::json& j) {
      std::reverse(j["model"]["merges"].begin(), j["model"]["merges"].end());
    });
    CHECK(encode(reversed, sample) != want.sample);
    // Merges as [a, b] arrays (Llama 3 ships "a b" strings): the same ids.
    const std::string arrays = variant("llama3", "merge_arrays", [](nlohmann::json& j) {
      for (auto& m : j["model"]["merges"]) {
        const std::string s = m.get<std::string>();
        m = nlohmann::json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
      }
    });
    CHECK(encode(arrays, sample) == want.sample);
    // truncation / padding (batch settings) are not read: the whole text, the same ids.
    const std::string truncated = variant("llama3", "truncation", [](nlohmann::json& j) {
      j["truncation"] = {{"direction", "Right"}, {"max_length", 16}, {"strategy", "LongestFirst"}, {"stride", 0}};
    });
    CHECK(encode(truncated, sample) == want.sample);
  }
  if (bpe_available("qwen2")) {
    const Expected want = expected("qwen2");
    // Without NFC, decomposed text stays decomposed: other ids.
    const std::string no_nfc = variant("qwen2", "no_nfc", [](nlohmann::json& j) { j["normalizer"] = nullptr; });
    CHECK(encode(no_nfc, sample) != want.sample);
    const Edge& accents = edge(want, "cafe\u0301 caf\u00e9");
    CHECK(encode(no_nfc, accents.text) != accents.ids);
    // NFC composes "cafe\u0301" into "caf\u00e9": both give the same ids.
    CHECK(encode(bpe_dir("qwen2"), "cafe\u0301") == encode(bpe_dir("qwen2"), "caf\u00e9"));
    CHECK(encode(no_nfc, "cafe\u0301") != encode(no_nfc, "caf\u00e9"));
    // NFC inside a Sequence: the same.
    const std::string seq = variant("qwen2", "nfc_sequence", [](nlohmann::json& j) {
      j["normalizer"] = {{"type", "Sequence"}, {"normalizers", nlohmann::json::array({{{"type", "NFC"}}})}};
    });
    CHECK(encode(seq, sample) == want.sample);
    // Specials as plain text.
    const std::string plain =
        variant("qwen2", "plain_specials", [](nlohmann::json& j) { j["added_tokens"] = nlohmann::json::array(); });
    CHECK(encode(plain, "<|im_start|>") != edge(want, "<|im_start|>").ids);
    CHECK(edge(want, "<|im_start|>").ids.size() == 1);
    // Merges as "a b" strings (Qwen2's are [a, b] arrays here): the same ids.
    const std::string strings = variant("qwen2", "merge_strings", [](nlohmann::json& j) {
      for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
    });
    CHECK(encode(strings, sample) == want.sample);
    // GPT-2's regex in place of Qwen2's.
    const std::string gpt2_regex = variant("qwen2", "gpt2_regex", [](nlohmann::json& j) {
      j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
          R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    });
    CHECK(encode(gpt2_regex, sample) != want.sample);
  }
  if (bpe_available("gpt2")) {
    const Expected want = expected("gpt2");
    // ByteLevel without its regex (one piece per text): other ids.
    const std::string no_regex =
        variant("gpt2", "no_regex", [](nlohmann::json& j) { j["pre_tokenizer"]["use_regex"] = false; });
    CHECK(encode(no_regex, sample) != want.sample);
    // add_prefix_space: a space before each piece that has none.
    const std::string prefix =
        variant("gpt2", "prefix_space", [](nlohmann::json& j) { j["pre_tokenizer"]["add_prefix_space"] = true; });
    CHECK(encode(prefix, "hello world") == edge(want, " hello world").ids);
    CHECK(encode(prefix, "a") != edge(want, "a").ids);
    // <|endoftext|> is matched after normalization (normalized true); as plain text it splits.
    const std::string plain =
        variant("gpt2", "plain_specials", [](nlohmann::json& j) { j["added_tokens"] = nlohmann::json::array(); });
    CHECK(encode(plain, "<|endoftext|>") != edge(want, "<|endoftext|>").ids);
    CHECK(edge(want, "<|endoftext|>").ids.size() == 1);
    // A template that prepends <|endoftext|> as a BOS is honoured.
    const int32_t eot = edge(want, "<|endoftext|>").ids[0];
    const std::string bos = variant("gpt2", "bos_template", [&](nlohmann::json& j) {
      j["post_processor"] = {
          {"type", "TemplateProcessing"},
          {"single", nlohmann::json::parse(R"([{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                                                  {"Sequence": {"id": "A", "type_id": 0}}])")},
          {"pair", nlohmann::json::array()},
          {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {eot}}, {"tokens", {"<|endoftext|>"}}}}}}};
    });
    const tl::TextTokens t = tl::tokenize_text_file(bpe_sample(), bos, want.vocab);
    CHECK(t.bos);
    REQUIRE(t.ids.size() == want.sample.size() + 1);
    CHECK(t.ids[0] == eot);
    CHECK(std::vector<int32_t>(t.ids.begin() + 1, t.ids.end()) == want.sample);
    // U+180E is no space to tokenizers (Oniguruma's \s), though it is to PCRE2's \s.
    CHECK(encode(bpe_dir("gpt2"), "  \u180e<") == edge(want, "  \u180e<").ids);
  }
  if (bpe_available("smollm")) {
    const Expected want = expected("smollm");
    // Digits in runs (individual_digits false), or no Digits step: other ids.
    const std::string runs = variant("smollm", "digit_runs", [](nlohmann::json& j) {
      j["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false;
    });
    CHECK(encode(runs, sample) != want.sample);
    CHECK(encode(runs, "1234567") != edge(want, "1234567").ids);
    CHECK(edge(want, "1234567").ids.size() == 7);
    const std::string none = variant("smollm", "no_digits",
                                     [](nlohmann::json& j) { j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][1]; });
    CHECK(encode(none, sample) != want.sample);
  }
}

TEST_CASE("text tokens: what tokenizer.json support leaves out is refused by name") {
  if (!bpe_available("gpt2")) return;
  using nlohmann::json;
  struct Case {
    const char* name;
    const char* fixture;
    std::function<void(json&)> edit;
    const char* want;  // in the message, after "<dir>/tokenizer.json: "
  };
  const std::vector<Case> cases = {
      {"wordpiece", "gpt2", [](json& j) { j["model"]["type"] = "WordPiece"; }, "model.type: WordPiece: not supported"},
      {"unigram", "gpt2",
       [](json& j) {
         j["model"] = {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", json::array()}};
       },
       "model.type: Unigram: not supported"},
      {"byte_fallback", "gpt2", [](json& j) { j["model"]["byte_fallback"] = true; },
       "model.byte_fallback: true is not supported"},
      {"dropout", "gpt2", [](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout: not supported"},
      {"suffix", "gpt2", [](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; },
       "model.end_of_word_suffix: not supported"},
      {"merge_oov", "gpt2", [](json& j) { j["model"]["merges"].push_back("zzzq qqqz"); }, "model.merges: merge "},
      {"metaspace", "gpt2",
       [](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
       },
       "pre_tokenizer: the Metaspace pre-tokenizer is not supported"},
      {"whitespace", "gpt2",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       "pre_tokenizer: the Whitespace pre-tokenizer is not supported"},
      {"no_pre_tokenizer", "gpt2", [](json& j) { j["pre_tokenizer"] = nullptr; },
       "pre_tokenizer: null: not a byte-level BPE"},
      {"split_removed", "llama3", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       "pre_tokenizer.pretokenizers[0].behavior: only Isolated is supported"},
      {"split_invert", "llama3", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; },
       "pre_tokenizer.pretokenizers[0].invert: true is not supported"},
      {"split_string", "llama3",
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
       },
       "pre_tokenizer.pretokenizers[0].pattern: only a {\"Regex\": ...} pattern"},
      {"regex_w", "llama3", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+|\\s+"; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex uses \\w"},
      {"regex_property", "llama3",
       [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{Lu}+|\\s+"; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex uses \\p{Lu} (only"},
      {"regex_anchor", "llama3", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "^\\s+"; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex uses a line anchor"},
      {"regex_option", "llama3", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?m:a.b)"; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex uses the inline option (?m)"},
      {"regex_bad", "llama3", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+"; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex does not compile"},
      {"byte_level_first", "llama3",
       [](json& j) { std::swap(j["pre_tokenizer"]["pretokenizers"][0], j["pre_tokenizer"]["pretokenizers"][1]); },
       "pre_tokenizer.pretokenizers[0]: ByteLevel before another pre-tokenizer"},
      {"nfkc", "qwen2",
       [](json& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       "normalizer: the NFKC normalizer is not supported"},
      {"llama2_normalizer", "gpt2",
       [](json& j) {
         j["normalizer"] = json::parse(R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
           {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})");
       },
       "normalizer.normalizers[0]: the Prepend normalizer is not supported"},
      {"lstrip", "qwen2", [](json& j) { j["added_tokens"][1]["lstrip"] = true; },
       "added_tokens[1].lstrip: true is not supported"},
      {"single_word", "qwen2", [](json& j) { j["added_tokens"][0]["single_word"] = true; },
       "added_tokens[0].single_word: true is not supported"},
      {"eos_template", "llama3",
       [](json& j) {
         j["post_processor"]["processors"][1]["single"].push_back(
             {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}});
       },
       "post_processor.processors[1].single[2]: the template adds <|begin_of_text|> after $A"},
      {"roberta", "gpt2",
       [](json& j) {
         j["post_processor"] = {{"type", "RobertaProcessing"}};
       },
       "post_processor: the RobertaProcessing post-processor is not supported"},
      {"unknown_key", "gpt2", [](json& j) { j["model"]["new_option"] = true; },
       "model.new_option: not supported (an unknown key)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    if (!bpe_available(c.fixture)) continue;
    const std::string dir = variant(c.fixture, std::string("refuse_") + c.name, c.edit);
    const std::string msg = load_error(dir);
    CAPTURE(msg);
    CHECK(msg.find(dir + "/tokenizer.json: " + c.want) != std::string::npos);
    // Through the text path, the same refusal.
    CHECK(error_of(bpe_sample(), dir, 1 << 20) == msg);
  }
  // Malformed JSON.
  const std::string dir = scratch("bpe_malformed");
  const std::string text = slurp_text(bpe_dir("gpt2") + "/tokenizer.json");
  std::ofstream(dir + "/tokenizer.json") << text.substr(0, text.size() / 2);
  CHECK(error_of(bpe_sample(), dir, 1 << 20).find(dir + "/tokenizer.json: not valid JSON") != std::string::npos);
  std::ofstream(dir + "/tokenizer.json", std::ios::trunc) << "[1, 2]";
  CHECK(error_of(bpe_sample(), dir, 1 << 20).find(dir + "/tokenizer.json: not a JSON object") != std::string::npos);
  // A byte missing from the vocabulary (no unk_token): refused when the text needs it.
  const std::string no_a = variant("gpt2", "no_byte", [](json& j) {
    json& v = j["model"]["vocab"];
    v.erase("~");
    json kept = json::array();
    for (const auto& m : j["model"]["merges"])
      if (m.get<std::string>().find('~') == std::string::npos) kept.push_back(m);
    j["model"]["merges"] = kept;
  });
  CHECK(load_error(no_a).empty());
  CHECK(encode(no_a, "hello") == encode(bpe_dir("gpt2"), "hello"));
  try {
    tl::BpeTokenizer t(no_a + "/tokenizer.json");
    t.encode("a~b");
    FAIL("a byte outside the vocabulary was accepted");
  } catch (const tl::Error& e) {
    CHECK(std::string(e.what()).find("tokenizer.json: model.vocab: no symbol for byte 0x7e (~) and no unk_token") !=
          std::string::npos);
  }
}

TEST_CASE("text tokens: a folder with tokenizer.model and tokenizer.json uses SentencePiece") {
  const std::string spm = TL_SPM_DIR, dir = scratch("text_tokens_both");
  fs::copy_file(spm + "/tokenizer.model", dir + "/tokenizer.model");
  fs::copy_file(bpe_dir("llama3") + "/tokenizer.json", dir + "/tokenizer.json");
  if (!tl::text_tokenizer_unavailable_reason().empty()) {
    CHECK(error_of(spm + "/sample.txt", dir, 400).find("tokenizer.model: this build has no SentencePiece") !=
          std::string::npos);
    return;
  }
  const tl::TextTokens t = tl::tokenize_text_file(spm + "/sample.txt", dir, 400);
  CHECK(t.tokenizer == dir + "/tokenizer.model");
  CHECK(t.ids == tl::tokenize_text_file(spm + "/sample.txt", spm, 400).ids);
}

TEST_CASE("text tokens: GPT-2's byte-to-unicode table") {
  CHECK(tl::byte_level_symbol(' ') == "\u0120");   // Ġ
  CHECK(tl::byte_level_symbol('\n') == "\u010a");  // Ċ
  CHECK(tl::byte_level_symbol(0) == "\u0100");
  CHECK(tl::byte_level_symbol('!') == "!");
  CHECK(tl::byte_level_symbol(0xad) == "\u0143");  // the one byte between 161-172 and 174-255
  CHECK(tl::byte_level_symbol(0xff) == "\u00ff");
  CHECK(tl::byte_level_symbol(0x7f) == "\u0121");
}

TEST_CASE("text tokens: a hand-made tokenizer.json: a repeated merge takes its last rank; unk_token, fused or not") {
  if (!bpe_available("gpt2")) return;
  // The ids HF tokenizers 0.23 gives for these texts with this file.
  nlohmann::json j = nlohmann::json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "<unk>": 5}, "merges": ["b c", "a b", "b c"]}})");
  const std::string dir = scratch("bpe_hand_made");
  std::ofstream(dir + "/tokenizer.json") << j.dump();
  CHECK(encode(dir, "abc") == std::vector<int32_t>{3, 2});  // "a b" (rank 1) before "b c" (rank 2)
  CHECK(encode(dir, "addeb") == std::vector<int32_t>{0, 5, 1});
  CHECK(encode(dir, "a \u00e9") == std::vector<int32_t>{0, 5});
  j["model"]["fuse_unk"] = false;
  std::ofstream(dir + "/tokenizer.json", std::ios::trunc) << j.dump();
  CHECK(encode(dir, "addeb") == std::vector<int32_t>{0, 5, 5, 5, 1});
  CHECK(encode(dir, "a \u00e9") == std::vector<int32_t>{0, 5, 5, 5});
}
