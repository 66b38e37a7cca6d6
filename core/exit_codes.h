// Exit codes shared by every tinyloop binary. A CI gate reads these.
//
// tool_exit_codes() is the one list of which tool returns which code and when: every tool's
// --help ends with its rows (apps/tool_main.h), and tests/cli/exit_codes.sh reads them back from
// --help and runs one case per row, so a row added later without a case fails there.
#pragma once

#include <string>
#include <vector>

namespace tl::exit_code {
constexpr int kOk = 0;            // everything that ran passed
constexpr int kVerifyFailed = 1;  // a verification tier failed
constexpr int kGateFailed = 1;    // a requirement the user asked for was not met (marlin-pack
                                  // --require-all: a weight stayed unpacked); nothing written
constexpr int kBadInput = 2;      // usage error, bad input file, I/O error
constexpr int kSkipped = 77;      // everything requested was skipped (CTest SKIP_RETURN_CODE)

struct ToolExitCode {
  const char* tool;
  int code;
  const char* when;
};

inline const std::vector<ToolExitCode>& tool_exit_codes() {
  static const std::vector<ToolExitCode> rows = {
      {"gptq-quantize", kOk, "the output was written"},
      {"gptq-quantize", kBadInput, "usage, bad input, a refused admission or --for marlin misfit; nothing written"},
      {"marlin-pack", kOk, "the output was written"},
      {"marlin-pack", kGateFailed, "--require-all and a weight would stay unpacked; nothing written"},
      {"marlin-pack", kBadInput, "usage or bad input; nothing written"},
      {"tl-verify", kOk, "everything that ran passed"},
      {"tl-verify", kVerifyFailed, "a tier failed (named on stderr)"},
      {"tl-verify", kBadInput, "usage or bad input; no report written"},
      {"tl-verify", kSkipped, "everything requested was skipped (each reason on stderr)"},
      {"tl-inspect", kOk, "listed, checked or extracted"},
      {"tl-inspect", kBadInput, "usage or bad input"},
      {"tl-export", kOk, "the folder was written"},
      {"tl-export", kBadInput, "usage or bad input; nothing written"},
  };
  return rows;
}

// "Exit codes:" and one "  N  when" line per row of `tool`, for --help.
inline std::string exit_codes_help(const std::string& tool) {
  std::string s = "Exit codes:\n";
  for (const ToolExitCode& r : tool_exit_codes())
    if (tool == r.tool) s += "  " + std::to_string(r.code) + (r.code < 10 ? "   " : "  ") + r.when + "\n";
  return s;
}
}  // namespace tl::exit_code
