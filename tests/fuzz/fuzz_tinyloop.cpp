// .tinyloop reader (formats/tinyloop_file.h) on arbitrary bytes: the superblock checks, the
// guarded metadata walk, then everything a tool reads -- root attributes, config, every dense
// tensor and quantized weight (with its Marlin section).
#include "formats/tinyloop_file.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = tl::fuzz::write_input("in.tinyloop", data, size);
  tl::fuzz::refuse_or_read([&] { tl::fuzz::read_whole_tinyloop(p); });
  return 0;
}
