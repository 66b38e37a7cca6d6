// The one boundary where library errors become exit codes (bloaty/ninja style): every tool's
// main parses its flags with CLI11, then calls tl::tool_main(tool, [&] { return run(...); }).
#pragma once

#include <cstdio>
#include <exception>
#include <new>

#include <CLI/CLI.hpp>

#include "formats/error.h"
#include "formats/exit_codes.h"

namespace tl {

template <class Body>
int tool_main(const char* tool, Body&& body) {
  try {
    return body();
  } catch (const tl::Error& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return exit_code::kBadInput;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: out of memory\n", tool);
    return exit_code::kBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
    return exit_code::kBadInput;
  }
}

// CLI11 parse errors: --help / --version print and exit 0; anything else is usage (exit 2).
inline int cli_exit(const CLI::App& app, const CLI::ParseError& e) {
  const int rc = app.exit(e);
  return rc == 0 ? exit_code::kOk : exit_code::kBadInput;
}

}  // namespace tl
