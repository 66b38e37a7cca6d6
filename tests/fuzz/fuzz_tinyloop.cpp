// .tinyloop reader (formats/tinyloop_file.h) on arbitrary bytes: the superblock checks, the
// guarded metadata walk, then everything a tool reads -- root attributes, config, every dense
// tensor and quantized weight (with its Marlin section).
#include "formats/tinyloop_file.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = tl::fuzz::write_input("in.tinyloop", data, size);
  tl::fuzz::refuse_or_read([&] {
    tl::TinyloopReader r(p);
    (void)r.root_attributes();
    if (r.has_config()) (void)r.config();
    for (const std::string& n : r.dense_names()) {
      (void)r.info(n);
      (void)r.read_dense(n);
    }
    for (const std::string& n : r.quant_names()) {
      r.check_quant(n);
      (void)r.info(n);
      (void)r.read_quant(n).dequantize();
    }
  });
  return 0;
}
