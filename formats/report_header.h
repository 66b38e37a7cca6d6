// The first keys of every JSON a tool prints or writes (gptq-quantize --json, marlin-pack --json,
// tl-inspect --json, tl-verify's reports): which tool, which release, which schema. A consumer
// checks schema_version before it reads anything else; each document's schema_version is owned
// by the code that writes it and bumped when a key changes meaning or goes away.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/version.h"

namespace tl {

inline nlohmann::json report_header(const std::string& tool, int schema_version) {
  return {{"tool", tool}, {"version", kVersion}, {"schema_version", schema_version}};
}

}  // namespace tl
