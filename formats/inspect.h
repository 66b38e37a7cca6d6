// The library side of tl-inspect: what a .tinyloop, safetensors (file, folder or index) or
// calibration file holds, as JSON or as a table, a full read-back check, and extraction of one
// weight's arrays to a safetensors file (names and orientations documented in docs/format.md).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tl {

enum class FileKind { Tinyloop, Safetensors, Calibration };
const char* file_kind_name(FileKind k);

// Sniffs the path: a folder or *.json -> safetensors; HDF5 with format "tinyloop" -> .tinyloop;
// HDF5 calibration layouts -> calibration; any other file -> safetensors (whose strict header
// check then says what is wrong). Throws tl::Error for missing / empty paths and other HDF5.
FileKind detect_file_kind(const std::string& path);

// Summary of the whole file; reads metadata only (no tensor data).
nlohmann::json inspect_summary(const std::string& path);
// Human-readable rendering of inspect_summary().
std::string format_inspect_table(const nlohmann::json& summary);
// Reads every tensor back (checksums, dtypes, shapes, finite values); throws on the first
// problem. Returns the number of entries read.
int check_all_entries(const std::string& path);

// Writes the arrays of entry `name` to a safetensors file at `out` (atomic). A .tinyloop dense
// tensor or a safetensors tensor is written as stored under its own name; a quantized weight as
// q (U8 [K, N]), scale, zero (F16 [G, N]), w_hat (F32 [K, N]) and, with a Marlin section,
// marlin.B (I32 [K/16, 2N]), marlin.s (F16 [G, N], permuted as stored), marlin.delta (F16 [G, N]);
// a Hessian as H (F32 [K, K]). Returns a JSON description of what was written.
nlohmann::json extract_entry(const std::string& path, const std::string& name, const std::string& out);

// What tl-inspect was asked to do (the flags of its main).
struct InspectOptions {
  std::string path;
  std::string extract;  // entry name; empty = list
  std::string output;   // required with extract
  bool json = false;    // JSON on stdout instead of the table
  bool check = false;   // also read every entry back (checksums, shapes, finite values)
  bool quiet = false;   // nothing on stdout (with --check: validate only); no notes on stderr
};
// Runs one tl-inspect invocation; results on stdout, notes on stderr; throws tl::Error.
int run_inspect(const InspectOptions& o);

}  // namespace tl
