// The one boundary where library errors become exit codes (bloaty/ninja style): every tool's
// main parses its flags with CLI11, then calls tl::tool_main(tool, [&] { return run(...); }).
#pragma once

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/exit_codes.h"
#include "formats/atomic_output.h"

namespace tl {

template <class Body>
int tool_main(const char* tool, Body&& body) {
  set_notice_prefix(tool);
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

// CLI11 parse errors: --help / --version print and exit 0; anything else is a usage error:
// one line on stderr, exit 2.
inline int cli_exit(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) {
    app.exit(e);
    return exit_code::kOk;
  }
  std::string name = app.get_name();  // argv[0] after parse(); print its base name
  name = name.substr(name.find_last_of('/') + 1);
  std::fprintf(stderr, "%s: usage: %s (see --help)\n", name.c_str(), e.what());
  return exit_code::kBadInput;
}

}  // namespace tl
