// Writing side of the HDF5 layer (h5_util.h is the reading side): groups, checksummed chunked
// datasets, JSON-valued attributes, and the generic copies that let tools carry unknown
// datasets and attributes through a rewrite unchanged. Every failure throws tl::Error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/h5_util.h"

namespace tl::h5 {

// Target chunk size. ~1 MiB keeps the Fletcher32 overhead negligible (4 bytes per chunk), fits
// HDF5's default 1 MiB chunk cache, and lets a reader of one row block touch few chunks.
constexpr size_t kChunkBytes = size_t(1) << 20;

// Chunk extents for `shape`: trailing dimensions kept whole while they fit kChunkBytes, the
// first one that does not is split, leading ones get 1. Empty for rank 0 or zero elements.
std::vector<hsize_t> chunk_shape(const std::vector<int64_t>& shape, size_t elem_size);

// Creates (truncates) `path` for writing with checksummed metadata: library-version bounds
// V110..V110, so the superblock (v3), every object header (v2), fractal heap, B-tree and chunk
// index carries a checksum that readers verify (formats/h5_guard.h). `file` names it in errors.
Handle create_file(const std::string& path, const std::string& file);
// Flushes and closes a file created by create_file; throws tl::Error with the system's reason
// ("No space left on device") when the data cannot be written. The handle is released either
// way: a file whose close failed must not be closed again.
void close_file(Handle& f, const std::string& file);

// An HDF5 file being written (TinyloopWriter, CalibWriter). Every HDF5 call on it runs inside
// run(): the first one that throws marks the file failed, and a failed file is never touched
// again -- not closed, not flushed (libhdf5 crashes closing a file whose writes failed, e.g. on a
// full disk); its id is abandoned and the caller's AtomicOutput removes the temporary.
class OutputFile {
 public:
  OutputFile(const std::string& tmp_path, const std::string& target)
      : file_(create_file(tmp_path, target)), target_(target) {}
  ~OutputFile() {
    if (failed_) file_.release();
  }
  hid_t id() const { return file_; }
  bool failed() const { return failed_; }
  template <class F>
  auto run(F&& f) -> decltype(f()) {
    if (failed_) throw Error("an earlier write to this file failed", target_);
    try {
      return f();
    } catch (...) {
      failed_ = true;
      throw;
    }
  }
  void close() {
    run([&] { close_file(file_, target_); });
  }

 private:
  Handle file_;
  std::string target_;
  bool failed_ = false;
};

Handle create_group(hid_t loc, const std::string& name, const std::string& file);
Handle open_group(hid_t loc, const std::string& path, const std::string& file);
bool is_group(hid_t loc, const std::string& path);
bool is_dataset(hid_t loc, const std::string& path);
// Names of the links directly under `path` (sorted by name).
std::vector<std::string> list_links(hid_t loc, const std::string& path, const std::string& file);

// Creates dataset `name` under `loc` with file type `file_type` from `data` (laid out as
// `mem_type`). Chunked with the Fletcher32 filter unless it is a scalar or has no elements
// (HDF5 cannot chunk those; they are stored contiguous). Object times are not recorded, so the
// same content gives the same bytes.
void write_dataset(hid_t loc, const std::string& name, hid_t file_type, hid_t mem_type,
                   const std::vector<int64_t>& shape, const void* data, const std::string& file);

// Attribute <-> JSON. Numbers become int64 / uint64 / float64, strings fixed-length UTF-8 (no
// variable-length data: the global heap that holds it has no checksum),
// bools h5py's enum bool (int8 FALSE/TRUE); arrays, objects and null are stored as their JSON
// text, and a string attribute starting with '{' or '[' that parses as JSON reads back as JSON.
void write_attr(hid_t obj, const std::string& name, const nlohmann::json& value, const std::string& file);
nlohmann::json read_attr(hid_t obj, const std::string& name, const std::string& file);
nlohmann::json read_attrs(hid_t obj, const std::string& file);  // every attribute of obj
std::vector<std::string> attr_names(hid_t obj);

// Copies every attribute of `src` onto `dst` byte for byte (any type; a variable-length string
// becomes the same text as a fixed-length string), except those in `skip`.
void copy_attributes(hid_t src, hid_t dst, const std::vector<std::string>& skip, const std::string& file);
// Copies a dataset or a group with everything below it: groups, datasets with their type,
// shape, chunking and filters, every attribute; chunked data is copied chunk by chunk as stored
// (H5Dread_chunk / H5Dwrite_chunk: the Fletcher32 checksums travel unchanged), every write's
// status checked. (H5Ocopy is not used: its error path frees twice on a full disk.)
void copy_object(hid_t src_loc, const std::string& src_path, hid_t dst_loc, const std::string& dst_path,
                 const std::string& file);

}  // namespace tl::h5
