// marlin-pack: add Marlin sections (B, permuted s, delta) to the quantized weights of a
// .tinyloop file or a quantized checkpoint folder. The job lives in jobs/marlin_pack_tool.cpp.
#include <string>

#include "apps/kernel_env.h"
#include "apps/tool_main.h"
#include "formats/marlin_layout.h"
#include "jobs/marlin_pack_tool.h"

int main(int argc, char** argv) {
  tl::run_with_huge_pages(argv);  // first: glibc reads the tunable at startup
  CLI::App app{"Packs 4-bit TinyLoop weights into the Marlin layout (bit-identical to "
               "IST-DASLab/marlin Layer.pack) and adds delta = zero + 8 * scale.\n"
               "Gate: " + tl::marlin_gate_text() + "; other weights stay unpacked and are listed.\n"
               "An already-packed weight is re-packed and must match its stored section."};
  tl::add_version_flag(app, "marlin-pack");
  tl::MarlinPackOptions o;
  app.add_option("INPUT", o.input, ".tinyloop file, or quantized checkpoint folder (GPTQ, AWQ GEMM, compressed-tensors pack-quantized)")
      ->required();
  auto* out = app.add_option("-o,--output", o.output, "output .tinyloop (written atomically)");
  app.add_flag("--in-place", o.in_place, "rewrite INPUT (temporary file + rename)")->excludes(out);
  app.add_option("--only", o.only, "pack only weights whose name matches this ECMAScript regex");
  app.add_flag("--drop-native", o.drop_native,
               "store packed weights compact: the Marlin section + zero only, one copy of the codes (~4.3 instead "
               "of ~8.5 bits per weight at g128); readers rebuild q/scale from it (docs/format.md)");
  app.add_flag("--require-all", o.require_all,
               "exit 1 and write nothing if any weight would stay unpacked (reasons on stderr)");
  app.add_flag("--json", o.json, "print a JSON report on stdout (per weight + totals)");
  app.add_flag("-q,--quiet", o.quiet, "no per-weight progress or summary on stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tl::cli_exit(app, e, argc, argv, "marlin-pack takes one INPUT; give the output with -o OUTPUT (or --in-place)");
  }
  return tl::tool_main("marlin-pack", [&] { return tl::run_marlin_pack(o); });
}
