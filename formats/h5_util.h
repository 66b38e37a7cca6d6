// Small RAII layer over the HDF5 C API, shared by the .tinyloop, calibration and golden-file
// readers. Every failure throws tl::Error naming the file and the dataset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <hdf5.h>

namespace tl::h5 {

// Owns one hid_t and closes it with the right H5*close.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) { reset(); id_ = o.id_; close_ = o.close_; o.id_ = -1; }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() { if (id_ >= 0 && close_) close_(id_); id_ = -1; }
  // Gives up ownership without closing (a file whose writes failed must not be closed again).
  hid_t release() { hid_t id = id_; id_ = -1; return id; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// Silences HDF5's own error printing on the calling thread (the library's error stack is per
// thread; we throw instead) and, once per process, turns off the library's shutdown at exit.
// Every entry point of formats/ that calls HDF5 calls this first.
void quiet_errors();

// The reason the last HDF5 call on this thread failed, from the library's error stack: the
// operating system's message when the failure came from it ("No space left on device", "File
// too large"), else the innermost description; "" when the stack is empty.
std::string last_error_reason();

// float16 / bfloat16 file types as h5py writes them (IEEE binary16; bfloat16 with 8-bit exponent).
hid_t float16_type();  // owned by the library, do not close
hid_t bfloat16_type();

// Opens an existing file after validating it (formats/h5_guard.h: our superblock checks, then
// the library's metadata decoders in a guarded child). Throws tl::Error naming the path.
Handle open_file(const std::string& path, bool writable = false);
bool exists(hid_t loc, const std::string& path);                   // link path exists

struct DatasetInfo {
  std::vector<int64_t> shape;
  H5T_class_t type_class = H5T_NO_CLASS;
  size_t type_size = 0;
  bool is_signed = false;
  bool is_float16 = false;  // 2-byte float with a 5-bit exponent
  bool is_bfloat16 = false; // 2-byte float with an 8-bit exponent
  uint64_t storage_bytes = 0;
  bool compressed = false;   // a filter other than Fletcher32 / shuffle (storage may be smaller)
};
DatasetInfo dataset_info(hid_t loc, const std::string& path, const std::string& file);

// The element count of a dataset, checked before anything is allocated for it: no overflow,
// every extent <= kMaxExtent, the file's storage for it at least its declared bytes (a header
// that declares more than the file holds is truncated or hostile), and the memory for
// mem_elem_bytes per element available (formats/memory_budget.h). Throws tl::Error.
int64_t checked_numel(const DatasetInfo& info, size_t mem_elem_bytes, const std::string& file, const std::string& path);

// Read a whole dataset converted to T by HDF5 (float, double, int32_t, uint8_t, int64_t).
// Checks the rank/shape against `expect` when it is non-empty (-1 = any extent).
template <class T>
std::vector<T> read(hid_t loc, const std::string& path, const std::string& file,
                    std::vector<int64_t>* shape = nullptr, const std::vector<int64_t>& expect = {});
// Read a float16 dataset as raw bits (must be a 2-byte IEEE half in the file).
std::vector<uint16_t> read_half_bits(hid_t loc, const std::string& path, const std::string& file,
                                     std::vector<int64_t>* shape = nullptr,
                                     const std::vector<int64_t>& expect = {});

// Read a whole dataset into `buf` converted to `mem_type` (caller sized buf from dataset_info).
void read_into(hid_t loc, const std::string& path, const std::string& file, hid_t mem_type, void* buf);

// Attributes on an object (group or dataset) at `path` ("." for loc itself).
bool has_attr(hid_t loc, const std::string& path, const std::string& name);
double attr_double(hid_t loc, const std::string& path, const std::string& name, const std::string& file);
int64_t attr_int(hid_t loc, const std::string& path, const std::string& name, const std::string& file);
std::string attr_string(hid_t loc, const std::string& path, const std::string& name, const std::string& file);

}  // namespace tl::h5
