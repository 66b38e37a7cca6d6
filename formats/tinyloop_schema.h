// Internal to libformats: the names, type mappings and Impl structs shared by the .tinyloop
// reader and writer (tinyloop_reader.cpp, tinyloop_writer.cpp). The public API is
// tinyloop_file.h; the schema is documented in docs/format.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/atomic_output.h"
#include "formats/h5_util.h"
#include "formats/h5_write.h"
#include "formats/tinyloop_file.h"

namespace tl {

namespace schema {
constexpr const char* kFormat = "tinyloop";
constexpr const char* kConfig = "config";
constexpr const char* kTensors = "tensors";
constexpr const char* kQuant = "quant";
constexpr const char* kMarlin = "marlin";
// Root attributes every writer sets itself (copy_config_and_attributes leaves them alone).
inline const std::vector<std::string> kOwnRootAttrs = {"format", "format_version", "producer",
                                                       "producer_version"};
// Attributes of /quant/<name> that describe the layout; everything else is provenance.
inline const std::vector<std::string> kQuantLayoutAttrs = {"bits", "group_size", "K", "N", "G", "codes"};
// codes = "marlin" on /quant/<name>: the compact form (tinyloop_file.h); absent: native.
constexpr const char* kCodesAttr = "codes";
constexpr const char* kCodesMarlin = "marlin";
inline const std::vector<std::string> kMarlinAttrs = {"groupsize", "layout", "K", "N"};

inline std::string dense_path(const std::string& name) { return std::string("/") + kTensors + "/" + name; }
inline std::string quant_path(const std::string& name) { return std::string("/") + kQuant + "/" + name; }

// Entry names become HDF5 link names: no '/', not "." or "..", not empty.
void check_entry_name(const std::string& name, const std::string& file);

// DType <-> HDF5 file/memory types (little-endian in the file; float16 / bfloat16 as h5py).
hid_t file_type(DType t);
hid_t mem_type(DType t);
bool dtype_of(const h5::DatasetInfo& info, DType* out);

// The q dataset's nibble packing is core/nibbles.h (pack_nibbles / unpack_nibbles).

// Checks a Marlin section against its weight (sizes, groupsize, layout tag, finite values).
void validate_marlin(const MarlinSection& m, int64_t K, int64_t N, int64_t G, int64_t group_size,
                     const std::string& file, const std::string& item);
}  // namespace schema

struct TinyloopReader::Impl {
  std::string path;
  h5::Handle file;
  int64_t version = 0;  // root format_version
};

struct TinyloopWriter::Impl {
  explicit Impl(const std::string& target) : out(target), file(out.tmp_path(), target) {}
  AtomicOutput out;  // declared first: destroyed after the file handle is closed
  h5::OutputFile file;
  std::string producer;
  bool config_written = false;
  bool compact_written = false;  // some weight is compact: commit() marks format_version 2
  bool family_written = false;   // the config uses family features: format_version 3
  bool padded_written = false;   // some Marlin section is padded: format_version 4
  bool committed = false;
  const std::string& target() const { return out.target(); }
};

}  // namespace tl
