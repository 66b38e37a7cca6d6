// gptq-quantize INPUT -o OUTPUT.tinyloop [options]: asymmetric min-max GPTQ (or RTN) of every
// selected linear weight of a checkpoint. Flags (jobs/gptq_options.h) -> tl::run_gptq_quantize (jobs/).
#include <memory>
#include <string>

#include "apps/kernel_env.h"
#include "apps/tool_main.h"
#include "jobs/gptq_options.h"
#include "libgpu/gptq_device.h"

int main(int argc, char** argv) {
  tl::run_with_huge_pages(argv);  // first: glibc reads the tunable at startup
  tl::GptqCli cli;
  CLI::App app{"gptq-quantize: quantize a checkpoint's linear weights to 4 bits (asymmetric min-max GPTQ or RTN)\n"
               "and write a .tinyloop with codes, float16 scale/zero and provenance. Docs: docs/gptq.md"};
  tl::add_version_flag(app, "gptq-quantize");
  tl::add_gptq_quantize_options(app, cli);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tl::cli_exit(app, e, argc, argv);
  }
  return tl::tool_main("gptq-quantize", [&] {
    tl::install_fault_injection_from_env();
    const std::unique_ptr<tl::GptqDevice> gpu = tl::gpu::make_gptq_device();
    cli.o.gpu = gpu.get();
    tl::finish_gptq_options(cli);
    return tl::run_gptq_quantize(cli.o);
  });
}
