// tl-export: a .tinyloop model -> a Hugging Face folder that transformers and vLLM load: GPTQ
// (AutoGPTQ / GPTQModel layout) or compressed-tensors pack-quantized (llm-compressor's W4A16).
// The job lives in jobs/hf_export.cpp.
#include <string>

#include "apps/tool_main.h"
#include "jobs/hf_export.h"

int main(int argc, char** argv) {
  CLI::App app{"Writes a quantized .tinyloop model as a Hugging Face checkpoint folder: GPTQ (qweight / qzeros / "
               "scales / g_idx per linear) or compressed-tensors pack-quantized (weight_packed / weight_scale / "
               "weight_zero_point / weight_shape), config.json with quantization_config, the tokenizer copied from "
               "--from.\nInteger zero points travel exactly; a weight the format cannot hold (float zero points, mixed "
               "group sizes) is refused by name."};
  tl::add_version_flag(app, "tl-export");
  tl::ExportOptions o;
  app.add_option("INPUT", o.input, "quantized .tinyloop model (gptq-quantize's output, with or without Marlin sections)")
      ->required();
  app.add_option("-o,--output", o.output, "folder to create (must not exist; built under a temporary name, then renamed)")
      ->required();
  app.add_option("--format", o.format,
                 "checkpoint format: gptq (AutoGPTQ / GPTQModel) or compressed-tensors (pack-quantized W4A16, "
                 "asymmetric: what llm-compressor writes and vLLM serves)")
      ->transform(CLI::IsMember({"gptq", "compressed-tensors"}, CLI::ignore_case))
      ->capture_default_str();
  app.add_option("--from", o.from,
                 "the original Hugging Face folder: its config.json (checked against the file's) and tokenizer files");
  app.add_option("--gptq-format", o.gptq_format,
                 "GPTQ's zero-point convention: v1 (AutoGPTQ, stored z - 1; what every GPTQ reader takes), v2 "
                 "(GPTQModel; transformers, and vLLM's gptq kernel, not its Marlin one), or auto: v1 unless a zero "
                 "point is 0, which v1 cannot hold, then v2 (said on stderr and in --json)")
      ->transform(CLI::IsMember({"auto", "v1", "v2"}, CLI::ignore_case))
      ->capture_default_str();
  app.add_option("--max-shard-bytes", o.max_shard_bytes, "safetensors shard size limit")->capture_default_str();
  app.add_flag("--json", o.json, "print a JSON summary on stdout");
  app.add_flag("-q,--quiet", o.quiet, "no progress or summary on stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tl::cli_exit(app, e, argc, argv, "tl-export takes one INPUT and -o OUT_DIR");
  }
  return tl::tool_main("tl-export", [&] { return tl::run_tl_export(o); });
}
