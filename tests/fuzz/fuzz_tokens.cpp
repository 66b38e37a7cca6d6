// Token files (formats/token_file.h): the first byte picks the encoding (.u32 / .bin / .npy)
// and a vocabulary bound; the rest is the file.
#include "formats/token_file.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const char* kNames[] = {"t.u32", "t.bin", "t.npy", "t.npy"};
  const std::string p = tl::fuzz::write_input(kNames[data[0] & 3], data + 1, size - 1);
  const int64_t vocab = (data[0] >> 2) == 0 ? 0 : int64_t(1) << (data[0] >> 2);
  tl::fuzz::refuse_or_read([&] { (void)tl::read_token_file(p, vocab); });
  return 0;
}
