// Writing side of the HDF5 layer (h5_util.h is the reading side): groups, checksummed chunked
// datasets, JSON-valued attributes, and the generic copies that let tools carry unknown
// datasets and attributes through a rewrite unchanged. Every failure throws tl::Error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/h5_util.h"

namespace tl::h5 {

// Target chunk size. ~1 MiB keeps the Fletcher32 overhead negligible (4 bytes per chunk), fits
// HDF5's default 1 MiB chunk cache, and lets a reader of one row block touch few chunks.
constexpr size_t kChunkBytes = size_t(1) << 20;

// Chunk extents for `shape`: trailing dimensions kept whole while they fit kChunkBytes, the
// first one that does not is split, leading ones get 1. Empty for rank 0 or zero elements.
std::vector<hsize_t> chunk_shape(const std::vector<int64_t>& shape, size_t elem_size);

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

// Attribute <-> JSON. Numbers become int64 / uint64 / float64, strings variable-length UTF-8,
// bools h5py's enum bool (int8 FALSE/TRUE); arrays, objects and null are stored as their JSON
// text, and a string attribute starting with '{' or '[' that parses as JSON reads back as JSON.
void write_attr(hid_t obj, const std::string& name, const nlohmann::json& value, const std::string& file);
nlohmann::json read_attr(hid_t obj, const std::string& name, const std::string& file);
nlohmann::json read_attrs(hid_t obj, const std::string& file);  // every attribute of obj
std::vector<std::string> attr_names(hid_t obj);

// Copies every attribute of `src` onto `dst` byte for byte (any type), except those in `skip`.
void copy_attributes(hid_t src, hid_t dst, const std::vector<std::string>& skip, const std::string& file);
// H5Ocopy of a dataset or group with everything below it (filters, chunking, attributes).
void copy_object(hid_t src_loc, const std::string& src_path, hid_t dst_loc, const std::string& dst_path,
                 const std::string& file);

}  // namespace tl::h5
