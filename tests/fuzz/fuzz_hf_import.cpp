// The checkpoint importer gptq-quantize uses (libconvert/checkpoint_import.h) on an HF folder:
// config.json + safetensors (+ index) as an archive; every entry read, linear or dense.
#include "fuzz_util.h"
#include "libconvert/checkpoint_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = tl::fuzz::write_folder("hf", tl::fuzz::unpack_files(data, size));
  tl::fuzz::refuse_or_read([&] {
    tl::CheckpointImport in(dir, "");
    for (const tl::ImportEntry& e : in.entries()) {
      if (e.kind == tl::ImportEntry::Kind::kLinear) (void)in.read_linear(e);
      else if (e.kind != tl::ImportEntry::Kind::kQuantized) (void)in.read_dense(e);
    }
  });
  return 0;
}
