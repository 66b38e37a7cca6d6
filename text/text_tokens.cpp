// See text_tokens.h.
#include "text/text_tokens.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/bpe_tokenizer.h"
#include "formats/file_check.h"

#if TL_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace tl {
namespace {

// The offset of the first byte that is not part of valid UTF-8, or -1.
int64_t first_invalid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const int64_t n = int64_t(s.size());
  for (int64_t i = 0; i < n;) {
    const unsigned char c = p[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > n) return i;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    const uint32_t min_cp = len == 1 ? 0 : len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return -1;
}

// tokenizer_config.json's add_bos_token (true when the file or the key is absent).
[[maybe_unused]] bool add_bos(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  std::ifstream in(path);
  if (!in) return true;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error("not a JSON object", path);
  if (!j.contains("add_bos_token")) return true;
  if (!j["add_bos_token"].is_boolean()) throw Error("add_bos_token: expected true or false", path);
  return j["add_bos_token"].get<bool>();
}

// Every id below the model's vocabulary size.
void check_vocab(const std::vector<int32_t>& ids, int64_t vocab, const std::string& tokenizer) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw Error("token " + std::to_string(i) + " = " + std::to_string(ids[i]) + " is outside the model's vocabulary of " +
                      std::to_string(vocab) + ": not this model's tokenizer",
                  tokenizer);
}

}  // namespace

std::string tokenizer_json_unavailable_reason() { return BpeTokenizer::unavailable_reason(); }

std::string text_tokenizer_unavailable_reason() {
#if TL_HAVE_SENTENCEPIECE
  return "";
#else
  return "this build has no SentencePiece (libsentencepiece-dev was not found at configure time)";
#endif
}

TextTokens tokenize_text_file(const std::string& text_path, const std::string& tokenizer_dir, int64_t vocab) {
  require_regular_file(text_path, "a UTF-8 text file");
  std::ifstream in(text_path, std::ios::binary);
  if (!in) throw Error("cannot read", text_path);
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.empty()) throw Error("empty: no text to tokenize", text_path);
  if (const int64_t bad = first_invalid_utf8(text); bad >= 0)
    throw Error("not UTF-8 at byte " + std::to_string(bad), text_path);
  if (tokenizer_dir.empty()) throw Error("no tokenizer folder for the text (give --tokenizer DIR)", text_path);
  if (!is_directory(tokenizer_dir)) throw Error("not a folder (expected the model's tokenizer files)", tokenizer_dir);
  const std::string model = tokenizer_dir + "/tokenizer.model";
  if (!is_regular_file(model)) {
    // A byte-level BPE tokenizer.json (Llama 3, Qwen2, GPT-2); tokenizer.model comes first.
    const std::string tj = tokenizer_dir + "/tokenizer.json";
    if (!is_regular_file(tj)) throw Error("no tokenizer.model or tokenizer.json", tokenizer_dir);
    if (const std::string why = tokenizer_json_unavailable_reason(); !why.empty()) throw Error(why, tj);
    BpeTokenizer bpe(tj);
    TextTokens out;
    out.tokenizer = tj;
    out.bytes = int64_t(text.size());
    out.ids = bpe.encode(text);
    out.bos = !bpe.prefix_ids().empty();
    check_vocab(out.ids, vocab, tj);
    return out;
  }
  if (const std::string why = text_tokenizer_unavailable_reason(); !why.empty()) throw Error(why, model);
  TextTokens out;
  out.tokenizer = model;
  out.bytes = int64_t(text.size());
#if TL_HAVE_SENTENCEPIECE
  sentencepiece::SentencePieceProcessor sp;
  if (const auto st = sp.Load(model); !st.ok()) throw Error("not a SentencePiece model: " + st.ToString(), model);
  std::vector<int> ids;
  if (const auto st = sp.Encode(text, &ids); !st.ok()) throw Error("SentencePiece: " + st.ToString(), text_path);
  out.bos = add_bos(tokenizer_dir);
  if (out.bos) {
    if (sp.bos_id() < 0) throw Error("add_bos_token is set but the SentencePiece model has no BOS piece", model);
    out.ids.push_back(sp.bos_id());
  }
  out.ids.insert(out.ids.end(), ids.begin(), ids.end());
  check_vocab(out.ids, vocab, model);
#else
  (void)vocab;
#endif
  return out;
}

}  // namespace tl
