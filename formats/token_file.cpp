#include "formats/token_file.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "formats/atomic_output.h"
#include "core/error.h"
#include "formats/file_check.h"

namespace tl {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The element types a .npy token file may hold (little-endian only: the loader reads bytes).
struct NpyType {
  const char* descr;
  int size;
  bool is_signed;
};
constexpr NpyType kNpyTypes[] = {{"<u2", 2, false}, {"<u4", 4, false}, {"<i4", 4, true}, {"<i8", 8, true}};

uint64_t read_le(const uint8_t* p, int size) {
  uint64_t v = 0;
  for (int i = size - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Value of `key` in the header dict: the text after "'key':" up to the next top-level ',' or '}'
// (a shape tuple's commas are inside parentheses).
std::string npy_field(const std::string& header, const std::string& key, const std::string& name) {
  const std::string quoted = "'" + key + "'";
  size_t p = header.find(quoted);
  if (p == std::string::npos) throw Error("expected the key '" + key + "' in the .npy header", name, "header");
  p = header.find(':', p + quoted.size());
  if (p == std::string::npos) throw Error("expected ':' after '" + key + "' in the .npy header", name, "header");
  ++p;
  int depth = 0;
  size_t e = p;
  for (; e < header.size(); ++e) {
    const char c = header[e];
    if (c == '(') ++depth;
    else if (c == ')') --depth;
    else if ((c == ',' || c == '}') && depth == 0) break;
  }
  std::string v = header.substr(p, e - p);
  const size_t b = v.find_first_not_of(" \t");
  const size_t l = v.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : v.substr(b, l - b + 1);
}

void check_range(const std::vector<int64_t>& ids, const std::string& name, int64_t vocab,
                 std::vector<int32_t>* out) {
  out->resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t v = ids[i];
    const int64_t hi = vocab > 0 ? vocab : int64_t(std::numeric_limits<int32_t>::max()) + 1;
    if (v < 0 || v >= hi)
      throw Error("expected a token id in [0, " + std::to_string(hi) + "), got " + std::to_string(v),
                  name, "token " + std::to_string(i));
    (*out)[i] = int32_t(v);
  }
}

std::vector<int32_t> parse_raw_u32(const std::string& name, const std::vector<uint8_t>& bytes,
                                   int64_t vocab) {
  if (bytes.empty()) throw Error("expected at least one token, the file is empty", name, "size");
  if (bytes.size() % 4 != 0)
    throw Error("expected raw little-endian uint32 (a size that is a multiple of 4), got " +
                    std::to_string(bytes.size()) + " bytes", name, "size");
  std::vector<int64_t> ids(bytes.size() / 4);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(read_le(&bytes[4 * i], 4));
  std::vector<int32_t> out;
  check_range(ids, name, vocab, &out);
  return out;
}

std::vector<int32_t> parse_npy(const std::string& name, const std::vector<uint8_t>& bytes,
                               int64_t vocab) {
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
    throw Error("expected the .npy magic \\x93NUMPY", name, "magic");
  const int major = bytes[6];
  if (major < 1 || major > 3)
    throw Error("expected .npy format version 1, 2 or 3, got " + std::to_string(major), name, "version");
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + len_bytes) throw Error("expected a header length field", name, "header");
  const size_t header_len = size_t(read_le(&bytes[8], int(len_bytes)));
  const size_t data_off = 8 + len_bytes + header_len;
  if (data_off > bytes.size())
    throw Error("expected a header within the file, its length " + std::to_string(header_len) + " runs past the end",
                name, "header");
  const std::string header(bytes.begin() + 8 + len_bytes, bytes.begin() + data_off);

  std::string descr = npy_field(header, "descr", name);
  if (descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"')) descr = descr.substr(1, descr.size() - 2);
  const NpyType* type = nullptr;
  for (const NpyType& t : kNpyTypes)
    if (descr == t.descr) type = &t;
  if (!type)
    throw Error("expected dtype <u2, <u4, <i4 or <i8 (little-endian integers), got '" + descr + "'",
                name, "descr");
  if (npy_field(header, "fortran_order", name) != "False")
    throw Error("expected fortran_order False (a C-order array)", name, "fortran_order");

  const std::string shape = npy_field(header, "shape", name);
  // A 1-D shape reads "(n,)"; anything else (a scalar "()", "(a, b)") is refused.
  int64_t n = -1;
  if (shape.size() >= 4 && shape.front() == '(' && shape.back() == ')') {
    std::string inner = shape.substr(1, shape.size() - 2);
    const size_t comma = inner.find(',');
    if (comma != std::string::npos && inner.find_first_not_of(" ", comma + 1) == std::string::npos) {
      inner = inner.substr(0, comma);
      if (!inner.empty() && inner.find_first_not_of("0123456789") == std::string::npos && inner.size() < 19)
        n = std::stoll(inner);
    }
  }
  if (n < 0) throw Error("expected a 1-D shape (n,), got " + shape, name, "shape");
  if (n == 0) throw Error("expected at least one token, the array is empty", name, "shape");
  const uint64_t want = uint64_t(n) * uint64_t(type->size);
  if (bytes.size() - data_off != want)
    throw Error("expected " + std::to_string(want) + " data bytes for shape " + shape + " of " + descr +
                    ", got " + std::to_string(bytes.size() - data_off), name, "data");
  std::vector<int64_t> ids(static_cast<size_t>(n));
  const uint8_t* p = bytes.data() + data_off;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t raw = read_le(p + i * type->size, type->size);
    if (type->is_signed) {
      const int bits = 8 * type->size;
      ids[size_t(i)] = bits == 64 ? int64_t(raw) : int64_t(raw << (64 - bits)) >> (64 - bits);
    } else {
      ids[size_t(i)] = int64_t(raw);
    }
  }
  std::vector<int32_t> out;
  check_range(ids, name, vocab, &out);
  return out;
}

}  // namespace

bool looks_like_token_file(const std::string& path) {
  return ends_with(path, ".npy") || ends_with(path, ".u32") || ends_with(path, ".bin");
}

std::vector<int32_t> parse_token_bytes(const std::string& name, const std::vector<uint8_t>& bytes,
                                       int64_t vocab) {
  if (ends_with(name, ".npy")) return parse_npy(name, bytes, vocab);
  if (ends_with(name, ".u32") || ends_with(name, ".bin")) return parse_raw_u32(name, bytes, vocab);
  throw Error("expected a token file named *.u32 or *.bin (raw little-endian uint32) or *.npy",
              name, "extension");
}

std::vector<int32_t> read_token_file(const std::string& path, int64_t vocab) {
  require_regular_file(path, "a token file (.u32, .bin or .npy)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open for reading", path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("read error", path);
  return parse_token_bytes(path, bytes, vocab);
}

void write_token_file_u32(const std::string& path, const std::vector<int32_t>& tokens) {
  std::vector<uint8_t> buf(tokens.size() * 4);
  for (size_t i = 0; i < tokens.size(); ++i)
    for (int b = 0; b < 4; ++b) buf[4 * i + b] = uint8_t(uint32_t(tokens[i]) >> (8 * b));
  AtomicOutput(path, OutputSink::kStream).write([&](std::FILE* f) { std::fwrite(buf.data(), 1, buf.size(), f); });
}

}  // namespace tl
