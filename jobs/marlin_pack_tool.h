// marlin-pack, the whole tool job: read a .tinyloop (or a quantized checkpoint folder: GPTQ, AWQ, compressed-tensors), add a Marlin
// section to every quantized weight that passes the Marlin gate, write the result atomically.
//
//   marlin-pack INPUT -o OUTPUT.tinyloop | --in-place [--only REGEX] [--drop-native]
//               [--require-all] [--json] [--quiet]
//
// Streaming: one weight is in memory at a time (read, pack, write, drop); everything that is
// not packed is copied dataset by dataset, so q/scale/zero, unknown datasets and attributes
// pass through unchanged. Weights that fail the gate (K or N not a multiple of 128, an
// unsupported group size) stay unpacked and are listed with the reason.
//
// --drop-native: a packed weight is written compact (tinyloop_file.h: the Marlin section + zero,
// one copy of the codes). Before its q/scale are dropped, the fresh section is decoded back and
// compared with them bit for bit (the pack tier's check, run at the only moment both exist).
// --require-all: if any weight would stay unpacked, nothing is written and tl::GateFailed names
// the count and the reasons (the tool's boundary: exit 1, exit_code::kGateFailed).
//
// Already-packed weights: the repack is idempotent. The section is rebuilt from q/scale/zero
// and compared with the stored one; identical -> kept ("verified"), different -> refused (exit
// 2), because a stored section that disagrees with its own weight means the file is corrupt or
// was edited, and silently replacing it would hide that.
#pragma once

#include <string>

namespace tl {

struct MarlinPackOptions {
  std::string input;     // .tinyloop file or quantized checkpoint folder
  std::string output;    // target .tinyloop (empty with in_place)
  bool in_place = false; // rewrite INPUT (temporary file + rename); .tinyloop input only
  std::string only;      // ECMAScript regex searched in each quantized weight's name; "" = all
  bool drop_native = false;  // packed weights stored compact (CodeStorage::kMarlinOnly)
  bool require_all = false;  // exit 1, nothing written, when any weight would stay unpacked
  bool json = false;     // machine-readable report on stdout (the summary stays on stderr)
  bool quiet = false;    // no per-weight progress or summary on stderr
};

// Runs the job; returns the exit code (0 ok, 1 --require-all unmet). Throws tl::Error for bad input or I/O (the
// caller maps it to exit 2); on any error nothing is written at the output path.
int run_marlin_pack(const MarlinPackOptions& options);

}  // namespace tl
