// Sharded safetensors (model.safetensors.index.json + shards): the input is a small archive of
// files (fuzz_util.h) written into a folder, which is opened like a checkpoint folder.
#include "formats/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = tl::fuzz::write_folder("sharded", tl::fuzz::unpack_files(data, size));
  tl::fuzz::refuse_or_read([&] {
    tl::SafetensorsReader r(dir);
    for (const std::string& n : r.names()) (void)r.read(n);
  });
  return 0;
}
