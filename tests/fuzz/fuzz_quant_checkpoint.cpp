// Quantized checkpoint importer (libconvert/quant_checkpoint.h: GPTQ, AWQ, compressed-tensors): an
// archive of files (config.json, quantize_config.json, model.safetensors, shards) as a checkpoint
// folder; every weight read.
#include "fuzz_util.h"
#include "libconvert/quant_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = tl::fuzz::write_folder("quant", tl::fuzz::unpack_files(data, size));
  tl::fuzz::refuse_or_read([&] {
    if (!tl::is_quant_checkpoint(dir)) return;
    tl::QuantCheckpoint ck(dir);
    if (ck.has_model_config()) (void)ck.model_config();
    for (const std::string& n : ck.dense_names()) (void)ck.read_dense(n);
    for (const std::string& n : ck.quant_names()) (void)ck.read_quant(n).dequantize();
  });
  return 0;
}
