// See bpe_regex.h.
#include "text/bpe_regex.h"

#include <algorithm>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/utf8.h"
#include "text/bpe_tokenizer.h"

#if TL_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace tl::bpe {
namespace {

// Character classes as tokenizers 0.23 sees them. Its regexes run in Oniguruma with Unicode 16
// data; PCRE2 10.42 has Unicode 14's. The code points that Unicode 15 / 16 made letters or numbers
// are added to PCRE2's \p{L} / \p{N} / \p{Nd} (there are no removals), and \s is spelled out as
// Oniguruma's: the White_Space characters (PCRE2's \s holds U+180E too).
constexpr const char* kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000})";
constexpr const char* kLetterSince14 =
    R"(\x{1c89}-\x{1c8a}\x{a7cb}-\x{a7cd}\x{a7da}-\x{a7dc}\x{105c0}-\x{105f3}\x{10d4a}-\x{10d65}\x{10d6f}-\x{10d85})"
    R"(\x{10ec2}-\x{10ec4}\x{1123f}-\x{11240}\x{11380}-\x{11389}\x{1138b}\x{1138e}\x{11390}-\x{113b5}\x{113b7})"
    R"(\x{113d1}\x{113d3}\x{11bc0}-\x{11be0}\x{11f02}\x{11f04}-\x{11f10}\x{11f12}-\x{11f33}\x{1342f})"
    R"(\x{13441}-\x{13446}\x{13460}-\x{143fa}\x{16100}-\x{1611d}\x{16d40}-\x{16d6c}\x{18cff}\x{1b132}\x{1b155})"
    R"(\x{1df25}-\x{1df2a}\x{1e030}-\x{1e06d}\x{1e4d0}-\x{1e4eb}\x{1e5d0}-\x{1e5ed}\x{1e5f0}\x{2b739})"
    R"(\x{2ebf0}-\x{2ee5d}\x{31350}-\x{323af})";
constexpr const char* kDecimalSince14 =
    R"(\x{10d40}-\x{10d49}\x{116d0}-\x{116e3}\x{11bf0}-\x{11bf9}\x{11f50}-\x{11f59}\x{16130}-\x{16139})"
    R"(\x{16d70}-\x{16d79}\x{1ccf0}-\x{1ccf9}\x{1e4f0}-\x{1e4f9}\x{1e5f1}-\x{1e5fa})";
constexpr const char* kOtherNumberSince14 = R"(\x{1d2c0}-\x{1d2d3})";
// The Digits pre-tokenizer's char::is_numeric (Rust's Unicode data): \p{N} as above and 13 more.
constexpr const char* kNumericSince16 = R"(\x{11de0}-\x{11de9}\x{16ff4}-\x{16ff6})";

// The members of a class (to go inside [...]) for \s, \p{L}, \p{N} and \d / \p{Nd}.
std::string class_members(char what) {
  switch (what) {
    case 's':
      return kWhiteSpace;
    case 'L':
      return std::string(R"(\p{L})") + kLetterSince14;
    case 'N':
      return std::string(R"(\p{N})") + kDecimalSince14 + kOtherNumberSince14;
    default:
      return std::string(R"(\p{Nd})") + kDecimalSince14;  // 'd'
  }
}

// A `tokenizers` pattern (Oniguruma, Ruby syntax) rewritten for PCRE2 (UTF + UCP) so that it
// means the same: \s, \S, \p{L}, \p{N}, \d and their negations spelled out as classes (above);
// \uHHHH is PCRE2's \x{HHHH}; \v is a vertical tab. Constructs whose meaning differs, or that
// depend on Unicode data not spelled out here (other properties), are refused.
std::string onig_to_pcre2(const std::string& p, const std::string& path, const std::string& key) {
  const auto refuse = [&](const std::string& what) {
    throw Error("the regex uses " + what +
                    ", which Oniguruma (what tokenizers runs) and PCRE2 (what this build runs) read differently: "
                    "not supported",
                path, key);
  };
  std::string out;
  bool in_class = false;
  // A class (what) or its negation where the escape stands.
  const auto put = [&](char what, bool negated, const std::string& escape) {
    if (in_class && negated) refuse(escape + " inside a character class");
    out += in_class ? class_members(what) : (negated ? "[^" : "[") + class_members(what) + "]";
  };
  const size_t n = p.size();
  for (size_t i = 0; i < n;) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= n) refuse("a trailing backslash");
      const char e = p[i + 1];
      if (!std::isalnum(static_cast<unsigned char>(e))) {  // an escaped symbol: itself
        out.append(p, i, 2);
        i += 2;
        continue;
      }
      switch (e) {
        case 's':
        case 'S':
          put('s', e == 'S', p.substr(i, 2));
          i += 2;
          break;
        case 'd':
        case 'D':
          put('d', e == 'D', p.substr(i, 2));
          i += 2;
          break;
        case 'r':
        case 'n':
        case 't':
        case 'f':
          out.append(p, i, 2);
          i += 2;
          break;
        case 'v':
          out += "\\x{0b}";
          i += 2;
          break;
        case 'p':
        case 'P': {
          const size_t close = i + 2 < n && p[i + 2] == '{' ? p.find('}', i + 2) : std::string::npos;
          if (close == std::string::npos) refuse("\\" + std::string(1, e) + " without {...}");
          const std::string name = p.substr(i + 3, close - i - 3), escape = p.substr(i, close + 1 - i);
          if (name == "L" || name == "N" || name == "Nd")
            put(name == "Nd" ? 'd' : name[0], e == 'P', escape);
          else
            refuse(escape + " (only \\p{L}, \\p{N} and \\p{Nd} are spelled out with tokenizers' Unicode data)");
          i = close + 1;
          break;
        }
        case 'x': {
          if (i + 2 < n && p[i + 2] == '{') {
            const size_t close = p.find('}', i + 2);
            if (close == std::string::npos) refuse("an unclosed \\x{");
            out.append(p, i, close + 1 - i);
            i = close + 1;
          } else {
            size_t k = i + 2;
            while (k < n && k < i + 4 && std::isxdigit(static_cast<unsigned char>(p[k]))) ++k;
            out.append(p, i, k - i);
            i = k;
          }
          break;
        }
        case 'u': {
          if (i + 6 > n || !std::all_of(p.begin() + long(i) + 2, p.begin() + long(i) + 6,
                                        [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; }))
            refuse("\\u without four hex digits");
          out += "\\x{" + p.substr(i + 2, 4) + "}";
          i += 6;
          break;
        }
        default:
          refuse("\\" + std::string(1, e));
      }
      continue;
    }
    if (in_class) {
      if (c == '[') refuse("a nested character class or POSIX bracket");
      if (c == '&' && i + 1 < n && p[i + 1] == '&') refuse("a class intersection (&&)");
      if (c == ']') in_class = false;
      out += c;
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < n && p[i] == '^') out += p[i++];
      if (i < n && p[i] == ']') out += p[i++];  // a leading ] is literal in both
      continue;
    }
    if (c == '^' || c == '$') refuse("a line anchor (^ or $)");
    if (c == '.') {  // any character but \n, in both
      out += "[^\\n]";
      ++i;
      continue;
    }
    if (c == '(' && i + 1 < n && p[i + 1] == '?') {
      // Inline options: only (?i) / (?-i) (Oniguruma's (?m) is PCRE2's (?s), for one).
      size_t k = i + 2;
      while (k < n && (std::isalpha(static_cast<unsigned char>(p[k])) || p[k] == '-')) ++k;
      for (size_t m = i + 2; m < k; ++m)
        if (p[m] != 'i' && p[m] != '-') refuse("the inline option (?" + p.substr(i + 2, k - i - 2) + ")");
      if (k > i + 2 && (k >= n || (p[k] != ':' && p[k] != ')'))) refuse("the group (?" + p.substr(i + 2, k - i - 2));
    }
    out += c;
    ++i;
  }
  return out;
}

#if TL_HAVE_PCRE2
struct Pcre2CodeFree {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct Pcre2MatchDataFree {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}
#endif

}  // namespace

std::string numeric_class() { return "[" + class_members('N') + kNumericSince16 + "]"; }

struct Regex::Impl {
  std::string key, path;
#if TL_HAVE_PCRE2
  std::unique_ptr<pcre2_code, Pcre2CodeFree> code;
  std::unique_ptr<pcre2_match_data, Pcre2MatchDataFree> match;
#endif
};

Regex::Regex(const std::string& pattern, const std::string& path, const std::string& key, bool pcre2_syntax)
    : impl_(std::make_unique<Impl>()) {
  impl_->key = key;
  impl_->path = path;
  const std::string translated = pcre2_syntax ? pattern : onig_to_pcre2(pattern, path, key);
#if TL_HAVE_PCRE2
  int err = 0;
  PCRE2_SIZE at = 0;
  impl_->code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                  PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr));
  if (!impl_->code)
    throw Error("the regex does not compile (PCRE2: " + pcre2_message(err) + " at offset " + std::to_string(at) + " of " +
                    translated + ")",
                path, key);
  pcre2_jit_compile(impl_->code.get(), PCRE2_JIT_COMPLETE);  // where JIT is missing, the interpreter runs
  impl_->match.reset(pcre2_match_data_create_from_pattern(impl_->code.get(), nullptr));
  if (!impl_->match) throw Error("out of memory for the regex", path, key);
#else
  (void)translated;
  throw Error(BpeTokenizer::unavailable_reason(), path, key);
#endif
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
#if TL_HAVE_PCRE2
  const size_t n = s.size();
  size_t from = 0;
  std::optional<size_t> last_match_end;
  while (from <= n) {
    const int rc = pcre2_match(impl_->code.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), n, from, PCRE2_NO_UTF_CHECK,
                               impl_->match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw Error("the regex failed on the text (PCRE2: " + pcre2_message(rc) + ")", impl_->path, impl_->key);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(impl_->match.get());
    const size_t b = ov[0], e = ov[1];
    if (b == e && last_match_end && *last_match_end == e) {
      if (from >= n) break;
      from += std::max<size_t>(1, utf8_sequence(std::string(s.substr(from, 4)), 0));
      continue;
    }
    from = e;
    last_match_end = e;
    out.emplace_back(b, e);
  }
#else
  (void)s;
#endif
}

}  // namespace tl::bpe
