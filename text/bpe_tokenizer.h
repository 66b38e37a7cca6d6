// A byte-level BPE tokenizer read from a Hugging Face tokenizer.json (the `tokenizers` format of
// Llama 3, Qwen2 / 2.5 / 3, GPT-2, SmolLM), encoding a text to ids as `tokenizers` 0.23 does with
// Tokenizer.from_file(path).encode(text) (add_special_tokens at its default, true):
//
//   1. added tokens: the added_tokens with normalized false are split out of the raw text
//      (leftmost, then longest match) and become their ids, special or not; the rest of the text
//      is normalized and the added tokens with normalized true are split out of it in turn.
//   2. normalizer: null, "NFC" (utf8proc, kept to the Unicode 9 tables of tokenizers' NFC for the
//      combining marks assigned since), or a "Sequence" of these.
//   3. pre_tokenizer: "Split" steps (a {"Regex": ...} pattern, behavior "Isolated", invert false)
//      and "Digits" steps, then one "ByteLevel" (add_prefix_space per piece; use_regex: the GPT-2
//      pattern), alone or as a "Sequence". The regexes run in PCRE2 (UTF + UCP), rewritten to mean
//      what they mean in Oniguruma with tokenizers' Unicode 16 data: \s as White_Space, \p{L},
//      \p{N}, \d with the letters and digits Unicode 15 / 16 added.
//   4. model "BPE": each piece's bytes as GPT-2's byte-to-unicode symbols, merged lowest rank
//      first (leftmost on ties); with ignore_merges a piece that is itself in the vocabulary is
//      one token. Pieces already seen come from a cache.
//   5. post_processor: null, "ByteLevel" (nothing for ids), "TemplateProcessing" whose single
//      template is [one special token] $A (its id is prepended: a BOS) or $A alone, or a
//      "Sequence" of these.
// Anything else is refused by name (tl::Error naming the file and the key): other models
// (WordPiece, Unigram), byte_fallback, dropout, a subword prefix / suffix, other normalizers or
// pre-tokenizers (Metaspace: Llama 2's tokenizer.json), other Split behaviours, invert, a String
// pattern, added tokens with lstrip / rstrip / single_word, a template that adds tokens after $A
// (an EOS), regex constructs that Oniguruma and PCRE2 read differently or whose Unicode data is not
// spelled out here (\w, \b, \h, ^, $, other \p{...}, nested classes, inline options but i, ...),
// unknown keys. truncation and padding (batch settings) and the decoder are not read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tl {

class BpeTokenizer {
 public:
  // Reads and checks `path` (a tokenizer.json). tl::Error for what is not supported, naming the
  // key, and for a build without PCRE2 (unavailable_reason()).
  explicit BpeTokenizer(const std::string& path);
  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // The ids of `text` (valid UTF-8: tl::Error otherwise), the post_processor's prefix first.
  std::vector<int32_t> encode(const std::string& text);
  // What the post_processor prepends to every text (the BOS id, or nothing).
  const std::vector<int32_t>& prefix_ids() const;
  const std::string& path() const;

  // Empty when this build reads tokenizer.json, else why not (no PCRE2 at configure time).
  static std::string unavailable_reason();
  // Empty when this build has the NFC normalizer, else why not (no utf8proc at configure time).
  static std::string nfc_unavailable_reason();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// GPT-2's byte-to-unicode table (ByteLevel): bytes 33-126, 161-172 and 174-255 stand for
// themselves, the others, in order, for U+0100 + n. The UTF-8 of byte b's symbol.
std::string byte_level_symbol(uint8_t b);

}  // namespace tl
