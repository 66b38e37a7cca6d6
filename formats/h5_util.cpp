#include "formats/h5_util.h"

#include <mutex>
#include <type_traits>

#include "core/checked.h"
#include "core/error.h"
#include "core/utf8.h"
#include "formats/h5_guard.h"
#include "formats/memory_budget.h"
#include "formats/tensor.h"

namespace tl::h5 {

void quiet_errors() {
  // Once per process, before any other HDF5 call: no library shutdown at exit. A file whose
  // write failed (disk full) cannot be closed cleanly; the atexit handler would close it again
  // and crash (H5F__close_cb). Every file we write is closed explicitly by commit().
  static std::once_flag once;
  std::call_once(once, [] { H5dont_atexit(); });
  // Once per thread: this build of libhdf5 is thread-safe, and its error stack -- and whether
  // the stack is printed -- is per thread. We throw instead of printing.
  thread_local bool quiet = false;
  if (!quiet) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    quiet = true;
  }
}

std::string last_error_reason() {
  struct Found {
    std::string os, desc;
  } found;
  auto visit = [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
    auto* f = static_cast<Found*>(data);
    const std::string d = e->desc ? e->desc : "";
    const std::string key = "error message = '";
    const size_t at = d.find(key);
    if (at != std::string::npos && f->os.empty()) {
      const size_t end = d.find('\'', at + key.size());
      f->os = d.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
    }
    if (f->desc.empty() && !d.empty()) f->desc = d;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, visit, &found);
  return found.os.empty() ? found.desc : found.os;
}

static hid_t make_float_type(size_t epos, size_t esize, size_t msize, size_t ebias) {
  quiet_errors();
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, epos, esize, 0, msize);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, ebias);
  H5Tset_precision(t, 16);
  H5Tset_offset(t, 0);
  return t;
}

hid_t float16_type() {
  static const hid_t t = make_float_type(10, 5, 10, 15);
  return t;
}

hid_t bfloat16_type() {
  static const hid_t t = make_float_type(7, 8, 7, 127);
  return t;
}

Handle open_file(const std::string& path, bool writable) {
  quiet_errors();
  check_untrusted_hdf5(path);  // our own checks, then the library's decoders in a guarded child
  hid_t f = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw Error("cannot open HDF5 file (truncated or corrupt: the superblock or root group is unreadable)", path);
  return Handle(f, H5Fclose);
}

bool exists(hid_t loc, const std::string& path) {
  quiet_errors();
  // Walk the components so a missing intermediate group is "no", not an error.
  size_t pos = 0;
  while (true) {
    size_t next = path.find('/', pos + 1);
    std::string prefix = path.substr(0, next);
    if (!prefix.empty() && prefix != "/" && H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (next == std::string::npos) return true;
    pos = next;
  }
}

DatasetInfo dataset_info(hid_t loc, const std::string& path, const std::string& file) {
  if (!exists(loc, path)) throw Error("missing dataset", file, path);
  Handle d(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw Error("cannot open dataset", file, path);
  Handle sp(H5Dget_space(d), H5Sclose);
  Handle ty(H5Dget_type(d), H5Tclose);
  DatasetInfo info;
  int rank = H5Sget_simple_extent_ndims(sp);
  std::vector<hsize_t> dims(size_t(rank > 0 ? rank : 0));
  if (rank > 0) H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
  for (hsize_t v : dims) info.shape.push_back(int64_t(v));
  info.type_class = H5Tget_class(ty);
  info.type_size = H5Tget_size(ty);
  if (info.type_class == H5T_INTEGER) info.is_signed = H5Tget_sign(ty) == H5T_SGN_2;
  if (info.type_class == H5T_FLOAT && info.type_size == 2) {
    size_t spos, epos, esize, mpos, msize;
    H5Tget_fields(ty, &spos, &epos, &esize, &mpos, &msize);
    info.is_float16 = esize == 5 && msize == 10;
    info.is_bfloat16 = esize == 8 && msize == 7;
  }
  info.storage_bytes = H5Dget_storage_size(d);
  Handle dcpl(H5Dget_create_plist(d), H5Pclose);
  const int nfilters = dcpl.valid() ? H5Pget_nfilters(dcpl) : 0;
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0;
    size_t nelm = 0;
    char name[64];
    const H5Z_filter_t id = H5Pget_filter2(dcpl, unsigned(i), &flags, &nelm, nullptr, sizeof name, name, nullptr);
    if (id != H5Z_FILTER_FLETCHER32 && id != H5Z_FILTER_SHUFFLE) info.compressed = true;
  }
  return info;
}

static void check_shape(const std::vector<int64_t>& shape, const std::vector<int64_t>& expect,
                        const std::string& file, const std::string& path) {
  if (expect.empty()) return;
  bool ok = shape.size() == expect.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = expect[i] < 0 || expect[i] == shape[i];
  if (!ok) {
    std::string e = "[";
    for (size_t i = 0; i < expect.size(); ++i)
      e += (i ? ", " : "") + (expect[i] < 0 ? std::string("*") : std::to_string(expect[i]));
    throw Error("expected shape " + e + "], found " + tl::shape_str(shape), file, path);
  }
}

// Before anything is allocated for a dataset: its element count must not overflow, the file
// must really hold its bytes (a header declaring [65536, 32768] in a 10 MB file is refused
// here, not after a 2 GiB allocation), and the memory to hold it must be available.
int64_t checked_numel(const DatasetInfo& info, size_t mem_elem_bytes, const std::string& file,
                             const std::string& path) {
  int64_t n = 1;
  for (int64_t d : info.shape) {
    if (d < 0 || d > kMaxExtent) throw Error("extent " + std::to_string(d) + " is out of range", file, path);
    n = checked_mul(n, d, file + ": " + path + ": element count");
  }
  const uint64_t stored = checked_mul(uint64_t(n), uint64_t(info.type_size), file + ": " + path + ": byte count");
  // Uncompressed, the file holds at least the declared bytes (edge chunks are whole). Deflate
  // cannot shrink data more than ~1032:1, so a compressed dataset (the golden test copies) may
  // declare at most 1100 times what it stores.
  const uint64_t holds = info.compressed ? info.storage_bytes * 1100 : info.storage_bytes;
  if (holds < stored)
    throw Error("declares " + shape_str(info.shape) + " (" + format_bytes(stored) + ") but the file holds only " +
                    format_bytes(info.storage_bytes) + " of it: the file is truncated or corrupt", file, path);
  admit_memory(checked_mul(uint64_t(n), uint64_t(mem_elem_bytes), file + ": " + path + ": byte count"), 0,
               "reading " + path + " of " + file, "use a machine with more memory");
  return n;
}

template <class T>
static hid_t mem_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, int32_t>) return H5T_NATIVE_INT32;
  else if constexpr (std::is_same_v<T, int64_t>) return H5T_NATIVE_INT64;
  else if constexpr (std::is_same_v<T, uint8_t>) return H5T_NATIVE_UINT8;
  else static_assert(sizeof(T) == 0, "unsupported element type");
}

static void read_raw(hid_t loc, const std::string& path, const std::string& file, hid_t mtype, void* buf) {
  quiet_errors();
  Handle d(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid() || H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
    throw Error("read failed (corrupt data or checksum mismatch)", file, path);
}

void read_into(hid_t loc, const std::string& path, const std::string& file, hid_t mem_type, void* buf) {
  read_raw(loc, path, file, mem_type, buf);
}

template <class T>
std::vector<T> read(hid_t loc, const std::string& path, const std::string& file,
                    std::vector<int64_t>* shape, const std::vector<int64_t>& expect) {
  DatasetInfo info = dataset_info(loc, path, file);
  check_shape(info.shape, expect, file, path);
  const bool want_float = std::is_floating_point_v<T>;
  const bool have_float = info.type_class == H5T_FLOAT;
  if (want_float != have_float || (info.type_class != H5T_FLOAT && info.type_class != H5T_INTEGER))
    throw Error(std::string("expected ") + (want_float ? "a float" : "an integer") + " dataset", file, path);
  const int64_t n = checked_numel(info, sizeof(T), file, path);
  std::vector<T> out(static_cast<size_t>(n));
  if (n > 0) read_raw(loc, path, file, mem_type<T>(), out.data());
  if (shape) *shape = info.shape;
  return out;
}

template std::vector<float> read<float>(hid_t, const std::string&, const std::string&, std::vector<int64_t>*, const std::vector<int64_t>&);
template std::vector<double> read<double>(hid_t, const std::string&, const std::string&, std::vector<int64_t>*, const std::vector<int64_t>&);
template std::vector<int32_t> read<int32_t>(hid_t, const std::string&, const std::string&, std::vector<int64_t>*, const std::vector<int64_t>&);
template std::vector<int64_t> read<int64_t>(hid_t, const std::string&, const std::string&, std::vector<int64_t>*, const std::vector<int64_t>&);
template std::vector<uint8_t> read<uint8_t>(hid_t, const std::string&, const std::string&, std::vector<int64_t>*, const std::vector<int64_t>&);

std::vector<uint16_t> read_half_bits(hid_t loc, const std::string& path, const std::string& file,
                                     std::vector<int64_t>* shape, const std::vector<int64_t>& expect) {
  DatasetInfo info = dataset_info(loc, path, file);
  check_shape(info.shape, expect, file, path);
  if (!info.is_float16) throw Error("expected a float16 dataset", file, path);
  const int64_t n = checked_numel(info, 2, file, path);
  std::vector<uint16_t> out(static_cast<size_t>(n));
  if (n > 0) read_raw(loc, path, file, float16_type(), out.data());
  if (shape) *shape = info.shape;
  return out;
}

static Handle open_attr(hid_t loc, const std::string& path, const std::string& name, const std::string& file) {
  quiet_errors();
  if (H5Aexists_by_name(loc, path.c_str(), name.c_str(), H5P_DEFAULT) <= 0)
    throw Error("missing attribute '" + name + "'", file, path);
  return Handle(H5Aopen_by_name(loc, path.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
}

bool has_attr(hid_t loc, const std::string& path, const std::string& name) {
  quiet_errors();
  return H5Aexists_by_name(loc, path.c_str(), name.c_str(), H5P_DEFAULT) > 0;
}

double attr_double(hid_t loc, const std::string& path, const std::string& name, const std::string& file) {
  Handle a = open_attr(loc, path, name, file);
  Handle sp(H5Aget_space(a), H5Sclose);
  if (H5Sget_simple_extent_npoints(sp) != 1) throw Error("attribute '" + name + "': expected a single value", file, path);
  double v = 0;
  if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0) throw Error("attribute '" + name + "' is not numeric", file, path);
  return v;
}

int64_t attr_int(hid_t loc, const std::string& path, const std::string& name, const std::string& file) {
  Handle a = open_attr(loc, path, name, file);
  Handle ty(H5Aget_type(a), H5Tclose);
  Handle sp(H5Aget_space(a), H5Sclose);
  if (H5Sget_simple_extent_npoints(sp) != 1) throw Error("attribute '" + name + "': expected a single value", file, path);
  if (H5Tget_class(ty) == H5T_FLOAT) {
    const double d = attr_double(loc, path, name, file);
    int64_t v = 0;
    if (!exact_int64(d, &v))
      throw Error("attribute '" + name + "' = " + std::to_string(d) + ": expected an integer", file, path);
    return v;
  }
  if (H5Tget_class(ty) != H5T_INTEGER) throw Error("attribute '" + name + "': expected an integer", file, path);
  if (H5Tget_sign(ty) == H5T_SGN_NONE && H5Tget_size(ty) == 8) {
    uint64_t u = 0;
    if (H5Aread(a, H5T_NATIVE_UINT64, &u) < 0 || u > uint64_t(INT64_MAX))
      throw Error("attribute '" + name + "': expected an integer below 2^63", file, path);
    return int64_t(u);
  }
  int64_t v = 0;
  if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0) throw Error("attribute '" + name + "' is not an integer", file, path);
  return v;
}

std::string attr_string(hid_t loc, const std::string& path, const std::string& name, const std::string& file) {
  Handle a = open_attr(loc, path, name, file);
  Handle ty(H5Aget_type(a), H5Tclose);
  if (H5Tget_class(ty) != H5T_STRING) throw Error("attribute '" + name + "' is not a string", file, path);
  {
    Handle sp(H5Aget_space(a), H5Sclose);
    if (H5Sget_simple_extent_npoints(sp) != 1) throw Error("attribute '" + name + "': expected a single string", file, path);
  }
  if (H5Tis_variable_str(ty) > 0) {
    Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5Tget_cset(ty));  // HDF5 will not convert between ASCII and UTF-8
    char* s = nullptr;
    if (H5Aread(a, mt, &s) < 0) throw Error("cannot read attribute '" + name + "'", file, path);
    std::string out = s ? s : "";
    Handle sp(H5Aget_space(a), H5Sclose);
    H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, &s);
    return sanitize_utf8(out);
  }
  size_t n = H5Tget_size(ty);
  std::string out(n, '\0');
  Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mt, n);
  H5Tset_cset(mt, H5Tget_cset(ty));
  if (H5Aread(a, mt, out.data()) < 0) throw Error("cannot read attribute '" + name + "'", file, path);
  out.resize(out.find('\0') == std::string::npos ? n : out.find('\0'));
  return sanitize_utf8(out);
}

}  // namespace tl::h5
