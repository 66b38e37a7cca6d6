// Shared pieces of the libFuzzer targets (docs/fuzzing.md): a scratch folder per process, the
// input written to a file there (the readers take paths, as the tools do), a small archive
// format for inputs that are several files (a checkpoint folder), and the one rule every
// target asserts -- a reader either succeeds or throws tl::Error. Anything else (a crash, a
// sanitizer report, another exception, a hang, an allocation over libFuzzer's limit) is a
// finding.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tl::fuzz {

// This process's scratch folder (created once under $TMPDIR or /tmp).
const std::string& scratch();
// Writes data to scratch()/name (replacing it) and returns the path.
std::string write_input(const std::string& name, const uint8_t* data, size_t size);

// Several files in one input: records of [u8 name length][name][u32 LE size][bytes]. Names are
// kept only when they are plain file names ([A-Za-z0-9._-], 1..64 chars, not starting with
// '.'), so no input can write outside the folder.
using Files = std::vector<std::pair<std::string, std::string>>;
Files unpack_files(const uint8_t* data, size_t size);
std::string pack_files(const Files& files);
// Empties scratch()/sub and writes the files there; returns the folder.
std::string write_folder(const std::string& sub, const Files& files);

// Everything a tool reads from a .tinyloop: root attributes, config, every dense tensor and
// quantized weight (layout check, info, data and Marlin section, dequantized).
void read_whole_tinyloop(const std::string& path);

// Runs the reader: tl::Error is the expected way to refuse an input.
template <class F>
void refuse_or_read(F&& read) {
  try {
    read();
  } catch (const tl::Error&) {
  }
}

}  // namespace tl::fuzz
