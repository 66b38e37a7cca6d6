// See bpe_tokenizer.h.
#include "text/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <queue>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/utf8.h"
#include "formats/file_check.h"
#include "text/bpe_regex.h"

#if TL_HAVE_UTF8PROC
#include <utf8proc.h>
#endif

namespace tl {
namespace {

using json = nlohmann::json;
using bpe::Regex;
using bpe::split_isolated;

// ByteLevel's own split (use_regex), as `tokenizers` spells it.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += char(0xe0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  } else {
    s += char(0xf0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3f));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  }
  return s;
}

// The code point of byte b's ByteLevel symbol.
uint32_t byte_level_cp(uint8_t b) {
  const auto kept = [](unsigned x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255); };
  if (kept(b)) return b;
  uint32_t n = 0;
  for (unsigned x = 0; x < b; ++x) n += kept(x) ? 0 : 1;
  return 256 + n;
}

// The code point of the valid n-byte UTF-8 sequence at s[i].
uint32_t code_point(const std::string& s, size_t i, size_t n) {
  const auto u = [&](size_t k) { return uint32_t(static_cast<unsigned char>(s[i + k])); };
  return n == 1   ? u(0)
         : n == 2 ? ((u(0) & 0x1f) << 6) | (u(1) & 0x3f)
         : n == 3 ? ((u(0) & 0x0f) << 12) | ((u(1) & 0x3f) << 6) | (u(2) & 0x3f)
                  : ((u(0) & 0x07) << 18) | ((u(1) & 0x3f) << 12) | ((u(2) & 0x3f) << 6) | (u(3) & 0x3f);
}

// The bytes a string of ByteLevel symbols stands for, or nothing when a character is not one.
std::optional<std::string> byte_level_decode(const std::string& token,
                                             const std::unordered_map<uint32_t, uint8_t>& byte_of) {
  std::string out;
  for (size_t i = 0; i < token.size();) {
    const size_t n = utf8_sequence(token, i);
    if (n == 0) return std::nullopt;
    const auto it = byte_of.find(code_point(token, i, n));
    if (it == byte_of.end()) return std::nullopt;
    out += char(it->second);
    i += n;
  }
  return out;
}

// ---- tokenizer.json reading ----

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

}  // namespace

std::string byte_level_symbol(uint8_t b) { return utf8_of(byte_level_cp(b)); }

struct BpeTokenizer::Impl {
  std::string path;

  // normalizer: the NFC steps (the only kind there is).
  int nfc_steps = 0;

  // pre_tokenizer: Split regexes, then ByteLevel.
  std::vector<Regex> splits;
  bool add_prefix_space = false;
  std::optional<Regex> byte_level_regex;

  // model
  bool ignore_merges = false;
  std::unordered_map<std::string, int32_t> raw_vocab;  // the bytes a token stands for -> id
  std::array<int32_t, 256> byte_id{};                  // -1 where the byte's symbol is not in the vocabulary
  int32_t unk_id = -1;
  bool fuse_unk = false;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left, right) -> (rank, merged id)

  // added tokens, raw (normalized false) and normalized ones
  struct Added {
    std::string content;
    int32_t id;
  };
  struct Matcher {
    std::array<std::vector<Added>, 256> by_first;  // longest first
    bool empty = true;
    void add(const std::string& content, int32_t id) {
      by_first[static_cast<unsigned char>(content[0])].push_back({content, id});
      empty = false;
    }
    void finish() {
      for (auto& v : by_first)
        std::stable_sort(v.begin(), v.end(),
                         [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
    }
    // The leftmost, then longest, added token in s at or after `from`: its position, or npos.
    size_t next(std::string_view s, size_t from, const Added** hit) const {
      if (empty) return std::string_view::npos;
      for (size_t i = from; i < s.size(); ++i) {
        for (const Added& a : by_first[static_cast<unsigned char>(s[i])])
          if (s.compare(i, a.content.size(), a.content) == 0) {
            *hit = &a;
            return i;
          }
      }
      return std::string_view::npos;
    }
  };
  Matcher raw_added, normalized_added;

  std::vector<int32_t> prefix;

  std::unordered_map<std::string, std::vector<int32_t>> cache;  // piece -> ids

  [[noreturn]] void fail(const std::string& key, const std::string& message) const { throw Error(message, path, key); }

  void only_keys(const json& j, const std::string& key, std::initializer_list<const char*> allowed) const {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return it.key() == a; }) == allowed.end())
        fail(key.empty() ? it.key() : key + "." + it.key(), "not supported (an unknown key)");
    }
  }
  bool flag(const json& j, const std::string& key, const char* name, bool fallback) const {
    if (!j.contains(name) || j[name].is_null()) return fallback;
    if (!j[name].is_boolean()) fail(key + "." + name, "expected true or false");
    return j[name].get<bool>();
  }

  std::string normalize(std::string s) const {
    for (int k = 0; k < nfc_steps; ++k) s = nfc(s);
    return s;
  }

  // NFC as tokenizers 0.23 computes it. Its tables (the unicode-normalization-alignments crate)
  // are Unicode 9's, utf8proc's newer: the combining marks assigned since (and U+11930, which
  // composes with U+11935 since Unicode 13) are starters that compose with nothing there, so the
  // text is normalized in stretches between them, which keeps them and their neighbours as
  // tokenizers does.
  static std::string nfc(const std::string& s) {
    if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return s;
    static constexpr std::pair<uint32_t, uint32_t> kNewer[] = {
        {0x7fd, 0x7fd},     {0x898, 0x89f},     {0x8ca, 0x8d3},     {0x9fe, 0x9fe},     {0xc3c, 0xc3c},
        {0xd3b, 0xd3c},     {0xeba, 0xeba},     {0x1715, 0x1715},   {0x1abf, 0x1ace},   {0x1df6, 0x1dfa},
        {0xa82c, 0xa82c},   {0x10d24, 0x10d27}, {0x10eab, 0x10eac}, {0x10efd, 0x10eff}, {0x10f46, 0x10f50},
        {0x10f82, 0x10f85}, {0x11070, 0x11070}, {0x1133b, 0x1133b}, {0x1145e, 0x1145e}, {0x11839, 0x1183a},
        {0x11930, 0x11930}, {0x1193d, 0x1193e}, {0x11943, 0x11943}, {0x119e0, 0x119e0}, {0x11a34, 0x11a34},
        {0x11a47, 0x11a47}, {0x11a99, 0x11a99}, {0x11d42, 0x11d42}, {0x11d44, 0x11d45}, {0x11d97, 0x11d97},
        {0x11f41, 0x11f42}, {0x16ff0, 0x16ff1}, {0x1e08f, 0x1e08f}, {0x1e130, 0x1e136}, {0x1e2ae, 0x1e2ae},
        {0x1e2ec, 0x1e2ef}, {0x1e4ec, 0x1e4ef}};
    std::string out;
    size_t from = 0;
    for (size_t i = 0; i < s.size();) {
      const size_t n = std::max<size_t>(1, utf8_sequence(s, i));
      const uint32_t cp = n >= 2 ? code_point(s, i, n) : 0;
      if (cp >= kNewer[0].first) {
        if (std::any_of(std::begin(kNewer), std::end(kNewer),
                        [&](const auto& r) { return cp >= r.first && cp <= r.second; })) {
          out += nfc_utf8proc(s.substr(from, i - from));
          out.append(s, i, n);
          from = i + n;
        }
      }
      i += n;
    }
    if (from == 0) return nfc_utf8proc(s);
    return out + nfc_utf8proc(s.substr(from));
  }

  static std::string nfc_utf8proc(const std::string& s) {
    if (s.empty()) return s;
#if TL_HAVE_UTF8PROC
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                                            &dst, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) throw Error(std::string("NFC (utf8proc): ") + utf8proc_errmsg(n));
    std::string out(reinterpret_cast<const char*>(dst), size_t(n));
    std::free(dst);
    return out;
#else
    throw Error(BpeTokenizer::nfc_unavailable_reason());
#endif
  }

  void read_normalizer(const json& j, const std::string& key) {
    if (j.is_null()) return;
    const std::string t = type_of(j);
    if (t == "Sequence") {
      only_keys(j, key, {"type", "normalizers"});
      if (!j.contains("normalizers") || !j["normalizers"].is_array()) fail(key + ".normalizers", "expected a list");
      for (size_t i = 0; i < j["normalizers"].size(); ++i)
        read_normalizer(j["normalizers"][i], key + ".normalizers[" + std::to_string(i) + "]");
    } else if (t == "NFC") {
      only_keys(j, key, {"type"});
      if (const std::string why = nfc_unavailable_reason(); !why.empty()) fail(key, why);
      ++nfc_steps;
    } else {
      fail(key, (t.empty() ? std::string("a normalizer without a type") : "the " + t + " normalizer") +
                    " is not supported (null, NFC or a Sequence of these)");
    }
  }

  // Flattens Sequences into `steps`.
  void collect_pre_tokenizers(const json& j, const std::string& key,
                              std::vector<std::pair<const json*, std::string>>& steps) {
    if (type_of(j) == "Sequence") {
      only_keys(j, key, {"type", "pretokenizers"});
      if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) fail(key + ".pretokenizers", "expected a list");
      for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
        collect_pre_tokenizers(j["pretokenizers"][i], key + ".pretokenizers[" + std::to_string(i) + "]", steps);
    } else {
      steps.emplace_back(&j, key);
    }
  }

  void read_pre_tokenizer(const json& j) {
    if (j.is_null()) fail("pre_tokenizer", "null: not a byte-level BPE (expected ByteLevel, after Split steps)");
    std::vector<std::pair<const json*, std::string>> steps;
    collect_pre_tokenizers(j, "pre_tokenizer", steps);
    for (size_t i = 0; i < steps.size(); ++i) {
      const json& s = *steps[i].first;
      const std::string& key = steps[i].second;
      const std::string t = type_of(s);
      const bool last = i + 1 == steps.size();
      if (t == "Split") {
        if (last) fail(key, "Split last: not a byte-level BPE (expected ByteLevel after the Split steps)");
        only_keys(s, key, {"type", "pattern", "behavior", "invert"});
        if (!s.contains("pattern") || !s["pattern"].is_object() || s["pattern"].size() != 1)
          fail(key + ".pattern", "expected {\"Regex\": ...}");
        if (!s["pattern"].contains("Regex") || !s["pattern"]["Regex"].is_string())
          fail(key + ".pattern", "only a {\"Regex\": ...} pattern is supported (not a String pattern)");
        if (!s.contains("behavior") || s["behavior"] != "Isolated")
          fail(key + ".behavior",
               "only Isolated is supported (got " + (s.contains("behavior") ? s["behavior"].dump() : "none") + ")");
        if (flag(s, key, "invert", false)) fail(key + ".invert", "true is not supported");
        splits.emplace_back(s["pattern"]["Regex"].get<std::string>(), path, key + ".pattern.Regex");
      } else if (t == "Digits") {
        // Each numeric character alone (individual_digits), or runs of them (Contiguous).
        if (last) fail(key, "Digits last: not a byte-level BPE (expected ByteLevel after it)");
        only_keys(s, key, {"type", "individual_digits"});
        const std::string numeric = bpe::numeric_class();
        splits.emplace_back(flag(s, key, "individual_digits", false) ? numeric : numeric + "+", path, key, true);
      } else if (t == "ByteLevel") {
        if (!last) fail(key, "ByteLevel before another pre-tokenizer: not supported (ByteLevel last)");
        only_keys(s, key, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
        add_prefix_space = flag(s, key, "add_prefix_space", true);
        flag(s, key, "trim_offsets", true);  // offsets only
        if (flag(s, key, "use_regex", true)) byte_level_regex.emplace(kGpt2Pattern, path, key + ".use_regex");
      } else {
        fail(key, (t.empty() ? std::string("a pre-tokenizer without a type") : "the " + t + " pre-tokenizer") +
                      " is not supported (byte-level BPE: Split / Digits steps, then ByteLevel)");
      }
    }
  }

  void read_model(const json& m) {
    if (!m.is_object()) fail("model", "expected an object");
    const std::string t = type_of(m);
    if (t != "BPE") fail("model.type", (t.empty() ? std::string("missing") : t) + ": not supported (byte-level BPE only)");
    only_keys(m, "model",
              {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
               "byte_fallback", "ignore_merges", "vocab", "merges"});
    if (m.contains("dropout") && !m["dropout"].is_null()) fail("model.dropout", "not supported (expected null)");
    if (flag(m, "model", "byte_fallback", false))
      fail("model.byte_fallback", "true is not supported (a SentencePiece-style BPE, not a byte-level one)");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
        fail(std::string("model.") + k, "not supported (expected null or \"\")");
    ignore_merges = flag(m, "model", "ignore_merges", false);
    fuse_unk = flag(m, "model", "fuse_unk", false);

    if (!m.contains("vocab") || !m["vocab"].is_object()) fail("model.vocab", "expected an object (token -> id)");
    std::unordered_map<uint32_t, uint8_t> byte_of;
    for (int b = 0; b < 256; ++b) byte_of[byte_level_cp(uint8_t(b))] = uint8_t(b);
    std::unordered_map<std::string, int32_t> vocab;
    vocab.reserve(m["vocab"].size() * 2);
    raw_vocab.reserve(m["vocab"].size() * 2);
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX)
        fail("model.vocab", it.key() + ": expected an id >= 0");
      const int32_t id = it.value().get<int32_t>();
      vocab.emplace(it.key(), id);
      if (auto raw = byte_level_decode(it.key(), byte_of)) raw_vocab.emplace(std::move(*raw), id);
    }
    for (int b = 0; b < 256; ++b) {
      const auto it = raw_vocab.find(std::string(1, char(b)));
      byte_id[size_t(b)] = it == raw_vocab.end() ? -1 : it->second;
    }
    if (m.contains("unk_token") && !m["unk_token"].is_null()) {
      if (!m["unk_token"].is_string()) fail("model.unk_token", "expected a string or null");
      const auto it = vocab.find(m["unk_token"].get<std::string>());
      if (it == vocab.end()) fail("model.unk_token", m["unk_token"].get<std::string>() + " is not in model.vocab");
      unk_id = it->second;
    }

    if (!m.contains("merges") || !m["merges"].is_array()) fail("model.merges", "expected a list");
    const json& ms = m["merges"];
    merges.reserve(ms.size() * 2);
    for (size_t r = 0; r < ms.size(); ++r) {
      const json& e = ms[r];
      std::string a, b;
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          fail("model.merges", "merge " + std::to_string(r) + " \"" + s + "\": expected two tokens separated by one space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        fail("model.merges", "merge " + std::to_string(r) + ": expected \"a b\" or [\"a\", \"b\"]");
      }
      const auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
      const auto missing = [&](const std::string& tok) {
        fail("model.merges", "merge " + std::to_string(r) + " (" + a + " " + b + "): " + tok + " is not in model.vocab");
      };
      if (ia == vocab.end()) missing(a);
      if (ib == vocab.end()) missing(b);
      if (iab == vocab.end()) missing(a + b);
      const uint64_t k = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
      merges[k] = {int32_t(r), iab->second};  // a repeated pair takes its last rank, as tokenizers does
    }
  }

  void read_added_tokens(const json& j) {
    if (j.is_null()) return;
    if (!j.is_array()) fail("added_tokens", "expected a list");
    std::set<std::string> seen;
    for (size_t i = 0; i < j.size(); ++i) {
      const json& a = j[i];
      const std::string key = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object()) fail(key, "expected an object");
      only_keys(a, key, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
      if (!a.contains("content") || !a["content"].is_string() || a["content"].get<std::string>().empty())
        fail(key + ".content", "expected a non-empty string");
      const std::string content = a["content"].get<std::string>();
      if (!a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
          a["id"].get<int64_t>() > INT32_MAX)
        fail(key + ".id", "expected an id >= 0");
      for (const char* f : {"single_word", "lstrip", "rstrip"})
        if (flag(a, key, f, false)) fail(key + "." + f, "true is not supported (" + content + ")");
      if (!a.contains("normalized") || !a["normalized"].is_boolean()) fail(key + ".normalized", "expected true or false");
      flag(a, key, "special", false);
      if (!seen.insert(content).second) fail(key + ".content", content + " is added twice");
      if (a["normalized"].get<bool>()) {
        const std::string n = normalize(content);
        if (!n.empty()) normalized_added.add(n, a["id"].get<int32_t>());
      } else {
        raw_added.add(content, a["id"].get<int32_t>());
      }
    }
    raw_added.finish();
    normalized_added.finish();
  }

  // The ids a TemplateProcessing's single template puts before $A; nothing may come after it.
  void read_template(const json& t, const std::string& key) {
    only_keys(t, key, {"type", "single", "pair", "special_tokens"});
    if (!t.contains("single") || !t["single"].is_array()) fail(key + ".single", "expected a list of template pieces");
    if (!t.contains("special_tokens") || !t["special_tokens"].is_object())
      fail(key + ".special_tokens", "expected an object");
    bool seen_a = false;
    for (size_t i = 0; i < t["single"].size(); ++i) {
      const json& p = t["single"][i];
      const std::string pk = key + ".single[" + std::to_string(i) + "]";
      if (p.is_object() && p.size() == 1 && p.contains("Sequence")) {
        if (!p["Sequence"].is_object() || p["Sequence"].value("id", "") != "A")
          fail(pk, "expected the sequence $A (a single text)");
        if (seen_a) fail(pk, "$A twice");
        seen_a = true;
      } else if (p.is_object() && p.size() == 1 && p.contains("SpecialToken")) {
        const json& s = p["SpecialToken"];
        if (!s.is_object() || !s.contains("id") || !s["id"].is_string())
          fail(pk, "expected {\"SpecialToken\": {\"id\": ...}}");
        const std::string name = s["id"].get<std::string>();
        if (seen_a)
          fail(pk, "the template adds " + name +
                       " after $A (an EOS at the end of the text): not supported (the text is scored as one stream)");
        const json& st = t["special_tokens"];
        if (!st.contains(name) || !st[name].is_object() || !st[name].contains("ids") || !st[name]["ids"].is_array())
          fail(key + ".special_tokens", name + ": expected {\"ids\": [...]}");
        const json& ids = st[name]["ids"];
        for (const json& id : ids)
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            fail(key + ".special_tokens", name + ": expected ids >= 0");
        for (const json& id : ids) prefix.push_back(id.get<int32_t>());
      } else {
        fail(pk, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
      }
    }
    if (!seen_a) fail(key + ".single", "no $A (the text)");
    if (prefix.size() > 1)
      fail(key + ".single", "prepends " + std::to_string(prefix.size()) + " ids: one BOS at most is supported");
  }

  void read_post_processor(const json& j, const std::string& key, bool* had_template) {
    if (j.is_null()) return;
    const std::string t = type_of(j);
    if (t == "Sequence") {
      only_keys(j, key, {"type", "processors"});
      if (!j.contains("processors") || !j["processors"].is_array()) fail(key + ".processors", "expected a list");
      for (size_t i = 0; i < j["processors"].size(); ++i)
        read_post_processor(j["processors"][i], key + ".processors[" + std::to_string(i) + "]", had_template);
    } else if (t == "ByteLevel") {
      only_keys(j, key, {"type", "add_prefix_space", "trim_offsets", "use_regex"});  // offsets only
    } else if (t == "TemplateProcessing") {
      if (*had_template) fail(key, "a second TemplateProcessing: not supported");
      *had_template = true;
      read_template(j, key);
    } else {
      fail(key, (t.empty() ? std::string("a post-processor without a type") : "the " + t + " post-processor") +
                    " is not supported (null, ByteLevel, TemplateProcessing or a Sequence of these)");
    }
  }

  // ---- encoding ----

  void bpe(std::string_view piece, std::vector<int32_t>& out) {
    if (piece.empty()) return;
    std::string key(piece);
    if (ignore_merges) {
      if (const auto it = raw_vocab.find(key); it != raw_vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    if (const auto it = cache.find(key); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
    struct Symbol {
      int32_t id, prev, next;
      bool alive;
    };
    std::vector<Symbol> sym;
    sym.reserve(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) {
      const uint8_t b = static_cast<uint8_t>(piece[i]);
      int32_t id = byte_id[b];
      if (id < 0) {
        if (unk_id < 0)
          throw Error("no symbol for byte 0x" + std::string(1, "0123456789abcdef"[b >> 4]) + "0123456789abcdef"[b & 15] +
                          " (" + byte_level_symbol(b) + ") and no unk_token: the text cannot be encoded",
                      path, "model.vocab");
        if (fuse_unk && !sym.empty() && sym.back().id == unk_id) continue;
        id = unk_id;
      }
      const int32_t n = int32_t(sym.size());
      sym.push_back({id, n - 1, n + 1, true});
    }
    sym.back().next = -1;
    struct Cand {
      int32_t rank, pos, id;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
    const auto lookup = [&](int32_t a, int32_t b) -> const std::pair<int32_t, int32_t>* {
      const auto it = merges.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
      return it == merges.end() ? nullptr : &it->second;
    };
    for (int32_t i = 0; i + 1 < int32_t(sym.size()); ++i)
      if (const auto* m = lookup(sym[size_t(i)].id, sym[size_t(i) + 1].id)) queue.push({m->first, i, m->second});
    while (!queue.empty()) {
      const Cand c = queue.top();
      queue.pop();
      Symbol& left = sym[size_t(c.pos)];
      if (!left.alive || left.next < 0) continue;
      Symbol& right = sym[size_t(left.next)];
      const auto* m = lookup(left.id, right.id);
      if (!m || m->second != c.id) continue;  // a stale candidate: one side has merged since
      left.id = c.id;
      right.alive = false;
      left.next = right.next;
      if (left.next >= 0) sym[size_t(left.next)].prev = c.pos;
      if (left.prev >= 0)
        if (const auto* pm = lookup(sym[size_t(left.prev)].id, left.id)) queue.push({pm->first, left.prev, pm->second});
      if (left.next >= 0)
        if (const auto* nm = lookup(left.id, sym[size_t(left.next)].id)) queue.push({nm->first, c.pos, nm->second});
    }
    const size_t start = out.size();
    for (const Symbol& s : sym)
      if (s.alive) out.push_back(s.id);
    if (piece.size() <= 256) {
      if (cache.size() >= (1u << 20)) cache.clear();
      cache.emplace(std::move(key), std::vector<int32_t>(out.begin() + long(start), out.end()));
    }
  }

  // Split step `step` (then the next ones) on piece; past the Splits, ByteLevel and the model.
  void pre_tokenize(size_t step, std::string_view piece, std::vector<int32_t>& out) {
    if (step < splits.size()) {
      split_isolated(splits[step], piece, [&](std::string_view p) { pre_tokenize(step + 1, p, out); });
      return;
    }
    if (piece.empty()) return;
    std::string prefixed;
    if (add_prefix_space && piece.front() != ' ') {
      prefixed = " " + std::string(piece);
      piece = prefixed;
    }
    if (byte_level_regex)
      split_isolated(*byte_level_regex, piece, [&](std::string_view p) { bpe(p, out); });
    else
      bpe(piece, out);
  }

  // A stretch of text between added tokens: normalized, its normalized added tokens split out.
  void encode_normalized(std::string_view raw, std::vector<int32_t>& out) {
    const std::string s = normalize(std::string(raw));
    std::string_view v = s;
    size_t at = 0;
    while (at < v.size()) {
      const Added* hit = nullptr;
      const size_t pos = normalized_added.next(v, at, &hit);
      const size_t end = pos == std::string_view::npos ? v.size() : pos;
      if (end > at) pre_tokenize(0, v.substr(at, end - at), out);
      if (pos == std::string_view::npos) break;
      out.push_back(hit->id);
      at = pos + hit->content.size();
    }
  }
};

BpeTokenizer::BpeTokenizer(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  if (const std::string why = unavailable_reason(); !why.empty()) throw Error(why, path);
  require_regular_file(path, "a tokenizer.json");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(std::string("not valid JSON: ") + e.what(), path);
  }
  if (!j.is_object()) throw Error("not a JSON object", path);
  m.only_keys(j, "",
              {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "model", "post_processor",
               "decoder"});
  if (!j.contains("model")) throw Error("missing", path, "model");
  try {
    m.read_model(j["model"]);
    m.read_normalizer(j.value("normalizer", json()), "normalizer");
    m.read_pre_tokenizer(j.value("pre_tokenizer", json()));
    m.read_added_tokens(j.value("added_tokens", json()));
    bool had_template = false;
    m.read_post_processor(j.value("post_processor", json()), "post_processor", &had_template);
  } catch (const json::exception& e) {  // a value of an unexpected JSON type the checks above missed
    throw Error(std::string("unexpected JSON: ") + e.what(), path);
  }
}

BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) {
  Impl& m = *impl_;
  if (!valid_utf8(text)) throw Error("the text is not UTF-8", m.path);
  std::vector<int32_t> out = m.prefix;
  std::string_view v = text;
  size_t at = 0;
  while (at < v.size()) {
    const Impl::Added* hit = nullptr;
    const size_t pos = m.raw_added.next(v, at, &hit);
    const size_t end = pos == std::string_view::npos ? v.size() : pos;
    if (end > at) m.encode_normalized(v.substr(at, end - at), out);
    if (pos == std::string_view::npos) break;
    out.push_back(hit->id);
    at = pos + hit->content.size();
  }
  return out;
}

const std::vector<int32_t>& BpeTokenizer::prefix_ids() const { return impl_->prefix; }
const std::string& BpeTokenizer::path() const { return impl_->path; }

std::string BpeTokenizer::unavailable_reason() {
#if TL_HAVE_PCRE2
  return "";
#else
  return "this build has no PCRE2 (libpcre2-dev was not found at configure time): tokenizer.json is not supported";
#endif
}

std::string BpeTokenizer::nfc_unavailable_reason() {
#if TL_HAVE_UTF8PROC
  return "";
#else
  return "this build has no utf8proc (libutf8proc-dev was not found at configure time): the NFC normalizer is not "
         "supported";
#endif
}

}  // namespace tl
