// The one boundary where library errors become exit codes (bloaty/ninja style): every tool's
// main parses its flags with CLI11, then calls tl::tool_main(tool, [&] { return run(...); }).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <malloc.h>

#include <CLI/CLI.hpp>

#include "core/version.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "formats/atomic_output.h"

namespace tl {

template <class Body>
int tool_main(const char* tool, Body&& body) {
  set_notice_prefix(tool);
  // Buffers of 32 MiB and more are mapped on their own, and go back to the system when freed;
  // free heap above 16 MiB is given back. glibc starts lower and raises the mapping threshold to
  // each mapped buffer's size as it is freed (and the trim threshold to twice that): from then on
  // the buffers a tool streams block by block land in whichever heap arena the thread has, and
  // the resident set grew with every block (the CPU e2e tier, 67 M parameters a layer: +19 MB a
  // layer; 0-1 MB with these, tests/cli/memory_flat.sh). A trim threshold below ~16 MiB re-grows
  // the heap on every window of the CPU forward (the demo's e2e 11.4 s at 16 MiB, 12.8 s at 8).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 16 << 20);
  try {
    return body();
  } catch (const tl::GateFailed& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return exit_code::kGateFailed;
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

// Every tool's --version prints "<tool> <version>", and its --help ends with its exit codes
// (core/exit_codes.h; a tool's own footer goes before them, through add_footer).
inline void add_version_flag(CLI::App& app, const char* tool) {
  app.set_version_flag("--version", std::string(tool) + " " + kVersion);
  app.footer("\n" + exit_code::exit_codes_help(tool));
}
inline void add_footer(CLI::App& app, const std::string& text) { app.footer(text + "\n" + app.get_footer()); }

// Levenshtein distance, for "did you mean".
inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest of `known` to `word` (case and '_' vs '-' ignored), or "" when nothing is close
// enough to be a plausible typo (at most a third of the word's letters, at least 2, differ).
inline std::string closest_name(const std::string& word, const std::vector<std::string>& known) {
  auto norm = [](std::string s) {
    for (char& c : s) c = c == '_' ? '-' : char(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string w = norm(word);
  std::string best;
  size_t best_d = std::max<size_t>(2, w.size() / 3) + 1;
  for (const std::string& k : known) {
    const size_t d = edit_distance(w, norm(k));
    if (d < best_d) best_d = d, best = k;
  }
  return best;
}

// "--group-size", "-o", ... of every option of `app`.
inline std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
    for (const std::string& s : o->get_snames()) out.push_back("-" + s);
  }
  return out;
}

// What CLI11 did not take, in command-line order (its own message lists them reversed): the
// first unknown option with the closest known one, else the first extra positional with the
// tool's hint ("the output goes after -o").
inline std::string describe_extras(const CLI::App& app, int argc, char** argv, const std::string& positional_hint) {
  const std::vector<std::string> extra = app.remaining();
  auto is_extra = [&](const std::string& a) { return std::find(extra.begin(), extra.end(), a) != extra.end(); };
  std::string unknown;
  size_t n_unknown = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.size() < 2 || a[0] != '-' || !is_extra(a)) continue;
    const std::string flag = a.substr(0, a.find('='));
    const std::string near = closest_name(flag, option_names(app));
    unknown += (unknown.empty() ? "" : ", ") + flag + (near.empty() ? "" : " (did you mean " + near + "?)");
    ++n_unknown;
  }
  if (n_unknown > 0) return (n_unknown == 1 ? "unknown option " : "unknown options ") + unknown;
  for (int i = 1; i < argc; ++i)
    if (is_extra(argv[i]))
      return std::string("unexpected argument '") + argv[i] + "'" + (positional_hint.empty() ? "" : "; " + positional_hint);
  return "";
}

// CLI11 parse errors: --help / --version print and exit 0; anything else is a usage error:
// one line on stderr, exit 2. positional_hint: said after an unexpected extra argument.
inline int cli_exit(const CLI::App& app, const CLI::ParseError& e, int argc = 0, char** argv = nullptr,
                    const std::string& positional_hint = "") {
  if (e.get_exit_code() == 0) {
    app.exit(e);
    return exit_code::kOk;
  }
  std::string name = app.get_name();  // argv[0] after parse(); print its base name
  name = name.substr(name.find_last_of('/') + 1);
  std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    const std::string d = describe_extras(app, argc, argv, positional_hint);
    if (!d.empty()) what = d;
  }
  std::fprintf(stderr, "%s: usage: %s (see --help)\n", name.c_str(), what.c_str());
  return exit_code::kBadInput;
}

}  // namespace tl
