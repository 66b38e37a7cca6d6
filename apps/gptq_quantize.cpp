// gptq-quantize INPUT -o OUTPUT.tinyloop [options]: asymmetric min-max GPTQ (or RTN) of every
// selected linear weight of a checkpoint. Flags -> tl::run_gptq_quantize (libconvert).
#include <memory>
#include <string>

#include "apps/kernel_env.h"
#include "apps/tool_main.h"
#include "formats/memory_budget.h"
#include "libconvert/gptq_quantize_tool.h"
#include "libgpu/gptq_device.h"

int main(int argc, char** argv) {
  tl::run_with_huge_pages(argv);  // first: glibc reads the tunable at startup
  tl::GptqQuantizeOptions o;
  std::string group = "128", zero = "int";
  CLI::App app{"gptq-quantize: quantize a checkpoint's linear weights to 4 bits (asymmetric min-max GPTQ or RTN)\n"
               "and write a .tinyloop with codes, float16 scale/zero and provenance. Docs: docs/gptq.md"};
  tl::add_version_flag(app, "gptq-quantize");
  app.add_option("input", o.input, "HF folder (config.json + safetensors), .safetensors, or fp16 .tinyloop")
      ->required();
  app.add_option("-o,--output", o.output, "output .tinyloop (written atomically)")->required();
  app.add_option("--calib", o.calib, "calibration .h5 with /hessian/<weight> (required by --method gptq)");
  auto* calib_tokens = app.add_option("--calib-tokens", o.calib_tokens,
                                      "token file (.u32 / .npy): run the model and calibrate block by block (GPTQ's "
                                      "sequential mode)")
                           ->check(CLI::ExistingFile);
  app.add_option("--calib-text", o.calib_text,
                 "a UTF-8 text instead, tokenized with the model's own tokenizer: tokenizer.model (SentencePiece; "
                 "BOS once, as tokenizer_config.json says) or else tokenizer.json (byte-level BPE; BOS as its "
                 "post_processor says)")
      ->excludes(calib_tokens);
  app.add_option("--tokenizer", o.tokenizer, "the folder of tokenizer.model / tokenizer.json for --calib-text (default: INPUT when a folder)");
  app.add_option("--calib-seq", o.calib_seq, "tokens per calibration window")->capture_default_str();
  app.add_option("--calib-samples", o.calib_samples, "calibration windows (at most)")->capture_default_str();
  app.add_option("--save-calib", o.save_calib, "with --calib-tokens: also write the Hessians (.h5)");
  app.add_flag("--resume", o.resume,
               "continue an interrupted --calib-tokens / --calib-text run (CPU or GPU) from its journal (OUTPUT.journal) "
               "at the last completed block: the same arguments and inputs, the same output bytes");
  // Enum values are case-insensitive (RTN, Row): IsMember with ignore_case rewrites them to
  // the canonical spelling before anything reads them.
  app.add_option("--method", o.method, "gptq or rtn (round-to-nearest, no calibration)")
      ->transform(CLI::IsMember({"gptq", "rtn"}, CLI::ignore_case))->capture_default_str();
  app.add_option("--group-size", group, "rows per group along K: " + tl::group_size_choices() +
                                            " (-1 = row, as GPTQ writes it); the Marlin kernel runs 128 and row")
      ->check([](const std::string& s) {
        tl::GroupSize g;
        return tl::parse_group_size(s, &g) ? std::string() : "must be one of " + tl::group_size_choices();
      })->capture_default_str();
  app.add_option("--zero", zero, "zero point: int (upstream GPTQ, zero = -z*scale) or float (exact minimum)")
      ->transform(CLI::IsMember({"int", "float"}, CLI::ignore_case))->capture_default_str();
  std::string target = "any";
  app.add_option("--for", target, "what the file is for: marlin (every weight must be runnable by the Marlin "
                                  "kernel, else exit 2 before any work) or any (a warning names the misfits)")
      ->transform(CLI::IsMember({"any", "marlin"}, CLI::ignore_case))->capture_default_str();
  app.add_option("--damp", o.damp, "Hessian damping, fraction of the mean diagonal")->capture_default_str();
  app.add_option("--block-size", o.block_size, "rows per lazy-update block")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--act-order", o.act_order, "quantize rows by decreasing Hessian diagonal (static groups: stays contiguous)");
  app.add_flag("--range-search", o.range_search,
               "search each group's range (shrink min-max over 80 steps, keep the least |W_hat - W|^2.4; upstream "
               "GPTQ's mse option) inside GPTQ's sweep or for RTN; integer zero points, CPU only");
  app.add_option("--only", o.only, "regex over weight names selecting what to quantize (default: block linears); "
                                  "the rest is copied unchanged");
  app.add_flag("--drop-unselected", o.drop_unselected,
               "write only the quantized weights and the config, not the rest (e.g. one layer of a 7B model)");
  app.add_option("--device", o.device, "where GPTQ runs: cuda (the GPU; none usable: exit 2), cpu, or auto "
                                       "(the GPU when one is usable, else the CPU, said on stderr)")
      ->transform(CLI::IsMember({"auto", "cpu", "cuda"}, CLI::ignore_case))->capture_default_str();
  app.add_option("--threads", o.threads, "worker threads (0 = all cores)")->check(CLI::NonNegativeNumber)->capture_default_str();
  std::string max_memory;
  app.add_option("--max-memory", max_memory, "refuse to start when the estimated peak exceeds this (e.g. 16G; "
                                             "default: the available memory)");
  app.add_flag("--json", o.json, "print a JSON summary on stdout");
  app.add_flag("-q,--quiet", o.quiet, "no progress or summary on stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tl::cli_exit(app, e, argc, argv);
  }
  return tl::tool_main("gptq-quantize", [&] {
    tl::install_fault_injection_from_env();
    const std::unique_ptr<tl::GptqDevice> gpu = tl::gpu::make_gptq_device();
    o.gpu = gpu.get();
    tl::parse_group_size(group, &o.group_size);
    o.for_marlin = target == "marlin";
    tl::zero_mode_from_name(zero, &o.zero_mode);
    if (!max_memory.empty()) o.max_memory = tl::parse_memory_size(max_memory, "--max-memory");
    return tl::run_gptq_quantize(o);
  });
}
