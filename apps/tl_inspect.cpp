// tl-inspect: list what a .tinyloop, safetensors (file, folder, index) or calibration file
// holds, check it end to end, or extract one weight's arrays to safetensors for numpy/PyTorch.
// The job lives in jobs/inspect_tool.cpp.
#include <string>

#include "apps/tool_main.h"
#include "jobs/inspect_tool.h"

int main(int argc, char** argv) {
  CLI::App app{"Lists the tensors, quantized weights (group size, provenance), Marlin sections and "
               "config of a .tinyloop file, a safetensors checkpoint (file, folder or "
               "model.safetensors.index.json) or a calibration file.\n"
               "--extract NAME -o OUT.safetensors writes one entry's arrays; a quantized weight "
               "becomes q (U8 [K, N]), scale, zero (F16 [G, N]), w_hat (F32 [K, N]) and, if packed, "
               "marlin.B (I32 [K/16, 2N]), marlin.s, marlin.delta (F16 [G, N]). See docs/format.md."};
  tl::add_version_flag(app, "tl-inspect");
  tl::InspectOptions o;
  app.add_option("FILE", o.path, ".tinyloop, .safetensors, index .json, checkpoint folder or calibration .h5")
      ->required();
  auto* ex = app.add_option("--extract", o.extract,
                            "entry to write out (see the listing for names; HF names such as "
                            "model.layers.0.mlp.up_proj.weight are mapped to the stored ones)");
  app.add_option("-o,--output", o.output, "output .safetensors for --extract (written atomically)")->needs(ex);
  ex->needs(app.get_option("--output"));
  app.add_flag("--json", o.json, "machine-readable JSON on stdout");
  app.add_flag("--check", o.check,
               "read every entry back: checksums, dtypes, shapes, finite values (progress on stderr "
               "for files of 64 MiB and more)");
  app.add_flag("-q,--quiet", o.quiet, "print nothing on stdout (use the exit code)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tl::cli_exit(app, e, argc, argv);
  }
  return tl::tool_main("tl-inspect", [&] { return tl::run_inspect(o); });
}
