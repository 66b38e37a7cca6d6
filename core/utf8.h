// Strings read from files go into JSON (reports, tl-inspect --json, error messages), and
// nlohmann::json refuses to serialize invalid UTF-8 by throwing. Text from an HDF5 attribute
// is therefore checked and, where it is not UTF-8, shown with U+FFFD in place of each bad byte.
#pragma once

#include <string>

namespace tl {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when there is none
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
inline size_t utf8_sequence(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned cp = 0;
  if ((c & 0xe0) == 0xc0) n = 2, cp = c & 0x1fu;
  else if ((c & 0xf0) == 0xe0) n = 3, cp = c & 0x0fu;
  else if ((c & 0xf8) == 0xf0) n = 4, cp = c & 0x07u;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3fu);
  }
  const unsigned min[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

inline bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// s with every byte that does not start a valid sequence replaced by U+FFFD.
inline std::string sanitize_utf8(const std::string& s) {
  if (valid_utf8(s)) return s;
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) {
      out += "\xef\xbf\xbd";
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace tl
