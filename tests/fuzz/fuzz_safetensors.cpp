// safetensors reader on one file: the header validation, then every tensor by view and copy.
#include "formats/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = tl::fuzz::write_input("model.safetensors", data, size);
  tl::fuzz::refuse_or_read([&] {
    tl::SafetensorsReader r(p);
    (void)r.metadata();
    for (const std::string& n : r.names()) {
      (void)r.entry(n);
      (void)r.data(n);
      (void)r.read(n).to_float();
    }
  });
  return 0;
}
