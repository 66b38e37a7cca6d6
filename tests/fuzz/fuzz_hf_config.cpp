// HF config.json (formats/hf_config.h): any bytes as the file; a ModelConfig that validates.
#include "formats/hf_config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = tl::fuzz::write_input("config.json", data, size);
  tl::fuzz::refuse_or_read([&] {
    const tl::ModelConfig c = tl::read_hf_config(p);
    c.validate();
    (void)tl::model_config_to_hf(c);
  });
  return 0;
}
