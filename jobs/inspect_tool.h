// The tl-inspect job (its main is apps/tl_inspect.cpp): what a .tinyloop, safetensors (file,
// folder or index) or calibration file holds, as JSON or as a table, a full read-back check, and
// extraction of one weight's arrays to a safetensors file (names and orientations documented in
// docs/format.md). It sits above formats/ (it reads every file kind) beside the other tools'
// jobs, so it maps checkpoint names with checkpoint import's own rule (hf_to_tinyloop_name).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace tl {

enum class FileKind { Tinyloop, Safetensors, Calibration };
const char* file_kind_name(FileKind k);

// Sniffs the path: a folder or *.json -> safetensors; HDF5 with format "tinyloop" -> .tinyloop;
// HDF5 calibration layouts -> calibration; any other file -> safetensors (whose strict header
// check then says what is wrong). Throws tl::Error for missing / empty paths and other HDF5.
FileKind detect_file_kind(const std::string& path);

// The one order of every list tl-inspect prints (tensors, quantized weights, safetensors
// tensors, Hessians): runs of digits compare as numbers, so pre.2 comes before pre.10 and a
// model's layers read top to bottom; anything else compares byte by byte.
bool natural_less(const std::string& a, const std::string& b);

// The schema_version of tl-inspect's --json documents (listing and --extract), after the
// tl::report_header keys; bump it when a key changes meaning or goes away.
constexpr int kInspectSchemaVersion = 1;

// Summary of the whole file; reads metadata only (no tensor data). Lists in natural_less
// order; "summary" holds the totals (parameters, counts, bytes by kind, bits per weight).
nlohmann::json inspect_summary(const std::string& path);
// Human-readable rendering of inspect_summary(): lines stay readable (provenance is shortened;
// the full values are in the JSON).
std::string format_inspect_table(const nlohmann::json& summary);
// Reads back every entry a listing (inspect_summary's, of the same file) names: checksums,
// dtypes, shapes, finite values; throws on the first problem. Returns the number of entries read. progress: one tl::Progress line per entry on
// stderr, for files large enough that the read-back takes a while (kCheckProgressMinBytes).
constexpr uint64_t kCheckProgressMinBytes = uint64_t(64) << 20;
int check_all_entries(const nlohmann::json& summary, bool progress = false);

// The entry --extract NAME means: NAME itself, else NAME + ".weight", else their mapping by
// checkpoint import (hf_to_tinyloop_name: a Hugging Face name to the TinyLoop entry it is
// stored under, q/k/v parts to the fused weight). `note` (if given) says how a foreign name was resolved ("... is stored fused as
// pre.0.attn_qkv (q, k, v along N)"), empty when NAME is stored as is. An unknown NAME throws
// tl::Error naming the closest stored name (edit distance).
std::string resolve_entry_name(const std::string& path, const std::string& name, std::string* note = nullptr);

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
