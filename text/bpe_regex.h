// The pre-tokenizer regexes of a byte-level BPE tokenizer.json (bpe_tokenizer.h), as `tokenizers`
// runs them: its patterns are Oniguruma's, translated to PCRE2's syntax with Unicode 16's letter
// and number classes (PCRE2 10.42 has Unicode 14's), matched with Oniguruma's iteration. Without
// PCRE2 in the build a Regex refuses to be made, naming why.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tl::bpe {

// A compiled pattern; find() lists its matches as `tokenizers` does (Oniguruma's iteration: an
// empty match right where the previous match ended is skipped, and the search moves on by one
// character). Errors are tl::Error naming the file and the JSON key the pattern came from.
class Regex {
 public:
  // `pattern` in tokenizers' (Oniguruma's) syntax, or in PCRE2's when `pcre2_syntax`.
  Regex(const std::string& pattern, const std::string& path, const std::string& key, bool pcre2_syntax = false);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // [begin, end) of each match in s, in order.
  void find(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The numeric characters as a PCRE2 bracket expression, "[...]": PCRE2's \p{N} and the code points
// Unicode 15 / 16 made numbers (the Digits pre-tokenizer's class, in PCRE2 syntax).
std::string numeric_class();

// The pieces of s that the Isolated behaviour gives: each match and each stretch between matches,
// empty ones left out.
template <typename F>
void split_isolated(const Regex& re, std::string_view s, F&& piece) {
  std::vector<std::pair<size_t, size_t>> matches;
  re.find(s, matches);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev < b) piece(s.substr(prev, b - prev));
    if (b < e) piece(s.substr(b, e - b));
    prev = e;
  }
  if (prev < s.size()) piece(s.substr(prev));
}

}  // namespace tl::bpe
