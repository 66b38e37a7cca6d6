// Token files (formats/token_file.h): raw uint32 and .npy of every accepted dtype read back
// exactly; every malformed input is refused with a message naming the file, the item and what
// was expected.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"
#include "formats/token_file.h"

namespace {

std::vector<uint8_t> npy(const std::string& descr, const std::string& shape, const std::vector<uint8_t>& data,
                         bool fortran = false, int version = 1) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': " + shape + ", }";
  const size_t pre = version == 1 ? 10 : 12;
  h += std::string((64 - (pre + h.size() + 1) % 64) % 64, ' ') + "\n";
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(version), 0};
  if (version == 1) {
    b.push_back(uint8_t(h.size() & 0xff));
    b.push_back(uint8_t(h.size() >> 8));
  } else {
    for (int i = 0; i < 4; ++i) b.push_back(uint8_t(h.size() >> (8 * i)));
  }
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

template <class T>
std::vector<uint8_t> le_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());  // x86-64: little-endian
  return b;
}

// The error's message must name the file and the item.
void expect_error(const std::string& name, const std::vector<uint8_t>& bytes, const std::string& item,
                  int64_t vocab = 0) {
  try {
    tl::parse_token_bytes(name, bytes, vocab);
    FAIL("expected an error for item " << item);
  } catch (const tl::Error& e) {
    INFO(std::string(e.what()));
    CHECK(e.file() == name);
    CHECK(e.item() == item);
    CHECK(std::string(e.what()).find("expected") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("token file: accepted encodings read back exactly") {
  const std::vector<int32_t> want = {0, 1, 255, 7, 65535, 3};
  CHECK(tl::parse_token_bytes("a.u32", le_bytes(std::vector<uint32_t>(want.begin(), want.end()))) == want);
  CHECK(tl::parse_token_bytes("a.bin", le_bytes(std::vector<uint32_t>(want.begin(), want.end()))) == want);
  CHECK(tl::parse_token_bytes("a.npy", npy("<u2", "(6,)", le_bytes(std::vector<uint16_t>(want.begin(), want.end())))) == want);
  CHECK(tl::parse_token_bytes("a.npy", npy("<u4", "(6,)", le_bytes(std::vector<uint32_t>(want.begin(), want.end())))) == want);
  CHECK(tl::parse_token_bytes("a.npy", npy("<i4", "(6,)", le_bytes(want))) == want);
  CHECK(tl::parse_token_bytes("a.npy", npy("<i8", "(6,)", le_bytes(std::vector<int64_t>(want.begin(), want.end())), false, 2)) == want);
  // Through the file system, with a vocabulary check that passes.
  const std::string dir = std::string(TL_TEST_TMP) + "/perplexity_tokens";
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  tl::write_token_file_u32(dir + "/t.u32", want);
  CHECK(tl::read_token_file(dir + "/t.u32", 65536) == want);
  CHECK_THROWS_AS(tl::read_token_file(dir + "/t.u32", 256), tl::Error);  // 65535 >= 256
  CHECK_THROWS_AS(tl::read_token_file(dir + "/missing.u32"), tl::Error);
  CHECK_THROWS_AS(tl::read_token_file(dir), tl::Error);  // a directory
}

TEST_CASE("token file: malformed inputs are refused naming the item") {
  const auto four = le_bytes(std::vector<uint32_t>{1, 2, 3, 4});
  expect_error("t.u32", {}, "size");
  expect_error("t.u32", {1, 2, 3, 4, 5}, "size");
  expect_error("t.txt", four, "extension");
  expect_error("t.u32", le_bytes(std::vector<uint32_t>{1, 0x80000000u}), "token 1");  // > int32 max
  expect_error("t.u32", four, "token 3", 4);                                         // id 4 >= vocab 4
  expect_error("t.npy", {1, 2, 3}, "magic");
  expect_error("t.npy", npy("<f4", "(4,)", four), "descr");
  expect_error("t.npy", npy(">u4", "(4,)", four), "descr");           // big-endian
  expect_error("t.npy", npy("<u4", "(2, 2)", four), "shape");         // 2-D
  expect_error("t.npy", npy("<u4", "()", four), "shape");             // scalar
  expect_error("t.npy", npy("<u4", "(0,)", {}), "shape");             // empty
  expect_error("t.npy", npy("<u4", "(4,)", four, true), "fortran_order");
  expect_error("t.npy", npy("<u4", "(5,)", four), "data");            // truncated
  expect_error("t.npy", npy("<i4", "(4,)", le_bytes(std::vector<int32_t>{1, -2, 3, 4})), "token 1");
  auto v9 = npy("<u4", "(4,)", four);
  v9[6] = 9;
  expect_error("t.npy", v9, "version");
  auto cut = npy("<u4", "(4,)", four);
  cut.resize(12);  // header length points past the end
  expect_error("t.npy", cut, "header");
}
