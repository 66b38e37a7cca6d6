#include "formats/h5_write.h"

#include <algorithm>

#include "core/error.h"
#include "core/utf8.h"

namespace tl::h5 {

std::vector<hsize_t> chunk_shape(const std::vector<int64_t>& shape, size_t elem_size) {
  if (shape.empty()) return {};
  for (int64_t d : shape)
    if (d <= 0) return {};
  std::vector<hsize_t> chunk(shape.size(), 1);
  size_t inner = elem_size;  // bytes of one chunk so far (trailing dims already whole)
  for (size_t i = shape.size(); i-- > 0;) {
    const size_t extent = size_t(shape[i]);
    if (inner * extent <= kChunkBytes) {
      chunk[i] = extent;
      inner *= extent;
      continue;
    }
    chunk[i] = std::max<size_t>(1, kChunkBytes / inner);
    break;  // leading dimensions stay 1
  }
  return chunk;
}

static Handle plist(hid_t cls) { return Handle(H5Pcreate(cls), H5Pclose); }

// Links and attributes stay in their object's header ("compact" storage), which the header's
// checksum covers. Past HDF5's defaults (8 of each) they would move to a fractal heap whose
// blocks carry no checksum: a flipped byte there would silently change a name or a value.
static void compact_storage(hid_t ocpl, bool links) {
  H5Pset_attr_phase_change(ocpl, 65535, 0);
  if (links) H5Pset_link_phase_change(ocpl, 65535, 0);
  H5Pset_obj_track_times(ocpl, false);
}

// "cannot <what>: <reason from the library's error stack>".
static std::string failed(const std::string& what) {
  const std::string why = last_error_reason();
  return "cannot " + what + (why.empty() ? "" : ": " + why);
}

Handle create_file(const std::string& path, const std::string& file) {
  quiet_errors();
  Handle fapl = plist(H5P_FILE_ACCESS);
  if (H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) < 0)
    throw Error("cannot select HDF5 1.10 file-format bounds (libhdf5 older than 1.10?)", file);
  // The root group is created from the file-creation list: no times on it either.
  Handle fcpl = plist(H5P_FILE_CREATE);
  compact_storage(fcpl, true);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
  if (f < 0) throw Error(failed("create the temporary HDF5 file " + path), file);
  return Handle(f, H5Fclose);
}

void close_file(Handle& f, const std::string& file) {
  quiet_errors();
  const hid_t id = f.release();
  if (id < 0) return;
  if (H5Fflush(id, H5F_SCOPE_GLOBAL) < 0) throw Error(failed("write the file"), file);  // id leaked on purpose
  if (H5Fclose(id) < 0) throw Error(failed("close the file"), file);
}

Handle create_group(hid_t loc, const std::string& name, const std::string& file) {
  quiet_errors();
  Handle gcpl = plist(H5P_GROUP_CREATE);
  compact_storage(gcpl, true);
  Handle g(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) throw Error(failed("create group"), file, name);
  return g;
}

Handle open_group(hid_t loc, const std::string& path, const std::string& file) {
  if (!exists(loc, path)) throw Error("missing group", file, path);
  Handle g(H5Gopen2(loc, path.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.valid()) throw Error("expected a group", file, path);
  return g;
}

static H5O_type_t object_type(hid_t loc, const std::string& path) {
  quiet_errors();
  if (path != "." && !exists(loc, path)) return H5O_TYPE_UNKNOWN;
  H5O_info_t info;
  if (H5Oget_info_by_name(loc, path.c_str(), &info, H5P_DEFAULT) < 0) return H5O_TYPE_UNKNOWN;
  return info.type;
}

bool is_group(hid_t loc, const std::string& path) { return object_type(loc, path) == H5O_TYPE_GROUP; }
bool is_dataset(hid_t loc, const std::string& path) { return object_type(loc, path) == H5O_TYPE_DATASET; }

static herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

std::vector<std::string> list_links(hid_t loc, const std::string& path, const std::string& file) {
  Handle g = open_group(loc, path, file);
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_link, &names) < 0)
    throw Error("cannot list group", file, path);
  std::sort(names.begin(), names.end());
  return names;
}

void write_dataset(hid_t loc, const std::string& name, hid_t file_type, hid_t mem_type,
                   const std::vector<int64_t>& shape, const void* data, const std::string& file) {
  quiet_errors();
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(int(dims.size()), dims.data(), nullptr),
               H5Sclose);
  if (!space.valid()) throw Error("bad dataset shape", file, name);
  Handle dcpl = plist(H5P_DATASET_CREATE);
  compact_storage(dcpl, false);
  const std::vector<hsize_t> chunk = chunk_shape(shape, H5Tget_size(file_type));
  if (!chunk.empty()) {
    if (H5Pset_chunk(dcpl, int(chunk.size()), chunk.data()) < 0 || H5Pset_fletcher32(dcpl) < 0)
      throw Error("cannot set chunking / Fletcher32 (HDF5 built without it?)", file, name);
  }
  Handle d(H5Dcreate2(loc, name.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw Error(failed("create dataset"), file, name);
  int64_t n = 1;
  for (int64_t v : shape) n *= v;
  if (n > 0 && H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw Error(failed("write dataset"), file, name);
  // Chunks still in the chunk cache are written by the close: its status is a write status.
  if (H5Dclose(d.release()) < 0) throw Error(failed("write dataset"), file, name);
}

// ---- attributes ----

static Handle bool_type() {
  // h5py's representation of numpy.bool_, so h5py reads these back as Python bools.
  Handle t(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose);
  int8_t v = 0;
  H5Tenum_insert(t, "FALSE", &v);
  v = 1;
  H5Tenum_insert(t, "TRUE", &v);
  return t;
}

static void put_attr(hid_t obj, const std::string& name, hid_t type, const void* buf, const std::string& file) {
  quiet_errors();
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a, type, buf) < 0) throw Error(failed("write attribute '" + name + "'"), file);
}

// A fixed-length UTF-8 string type holding `s` and its terminating NUL.
static Handle fixed_string_type(size_t chars) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t, chars + 1);
  H5Tset_strpad(t, H5T_STR_NULLTERM);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

void write_attr(hid_t obj, const std::string& name, const nlohmann::json& value, const std::string& file) {
  using nlohmann::json;
  switch (value.type()) {
    case json::value_t::boolean: {
      const int8_t v = value.get<bool>() ? 1 : 0;
      put_attr(obj, name, bool_type(), &v, file);
      return;
    }
    case json::value_t::number_integer: {
      const int64_t v = value.get<int64_t>();
      put_attr(obj, name, H5T_STD_I64LE, &v, file);  // memory is little-endian on every target
      return;
    }
    case json::value_t::number_unsigned: {
      const uint64_t v = value.get<uint64_t>();
      if (v <= uint64_t(INT64_MAX)) {
        const int64_t s = int64_t(v);
        put_attr(obj, name, H5T_STD_I64LE, &s, file);
      } else {
        put_attr(obj, name, H5T_STD_U64LE, &v, file);
      }
      return;
    }
    case json::value_t::number_float: {
      const double v = value.get<double>();
      put_attr(obj, name, H5T_IEEE_F64LE, &v, file);
      return;
    }
    default: {
      const std::string s = value.is_string() ? value.get<std::string>() : value.dump();
      Handle t = fixed_string_type(s.size());
      put_attr(obj, name, t, s.c_str(), file);
    }
  }
}

static nlohmann::json maybe_json_text(const std::string& s) {
  if (!s.empty() && (s[0] == '{' || s[0] == '[')) {
    nlohmann::json j = nlohmann::json::parse(s, nullptr, false);
    if (!j.is_discarded()) return j;
  }
  return s;
}

nlohmann::json read_attr(hid_t obj, const std::string& name, const std::string& file) {
  quiet_errors();
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a.valid()) throw Error("cannot open attribute '" + name + "'", file);
  Handle type(H5Aget_type(a), H5Tclose);
  Handle space(H5Aget_space(a), H5Sclose);
  const hssize_t npoints = H5Sget_simple_extent_npoints(space);
  if (npoints < 0) throw Error("bad attribute '" + name + "'", file);
  const size_t n = size_t(npoints);
  const H5T_class_t cls = H5Tget_class(type);
  auto pack = [&](auto& vec) -> nlohmann::json {
    if (H5Sget_simple_extent_type(space) == H5S_SCALAR && vec.size() == 1) return vec[0];
    return nlohmann::json(vec);
  };
  if (cls == H5T_ENUM && H5Tget_size(type) == 1 && H5Tget_nmembers(type) == 2) {
    std::vector<int8_t> v(n);
    if (H5Aread(a, type, v.data()) < 0) throw Error("cannot read attribute '" + name + "'", file);
    std::vector<bool> b(v.begin(), v.end());
    return pack(b);
  }
  if (cls == H5T_INTEGER) {
    if (H5Tget_sign(type) == H5T_SGN_NONE && H5Tget_size(type) == 8) {
      std::vector<uint64_t> v(n);
      if (H5Aread(a, H5T_NATIVE_UINT64, v.data()) < 0) throw Error("cannot read attribute '" + name + "'", file);
      return pack(v);
    }
    std::vector<int64_t> v(n);
    if (H5Aread(a, H5T_NATIVE_INT64, v.data()) < 0) throw Error("cannot read attribute '" + name + "'", file);
    return pack(v);
  }
  if (cls == H5T_FLOAT) {
    std::vector<double> v(n);
    if (H5Aread(a, H5T_NATIVE_DOUBLE, v.data()) < 0) throw Error("cannot read attribute '" + name + "'", file);
    return pack(v);
  }
  if (cls == H5T_STRING) {
    if (n == 1) return maybe_json_text(attr_string(obj, ".", name, file));
    return "<string array attribute>";
  }
  return "<attribute of an unsupported HDF5 type>";
}

static herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

std::vector<std::string> attr_names(hid_t obj) {
  quiet_errors();
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &names);
  return names;
}

nlohmann::json read_attrs(hid_t obj, const std::string& file) {
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& name : attr_names(obj)) out[sanitize_utf8(name)] = read_attr(obj, name, file);
  return out;
}

void copy_attributes(hid_t src, hid_t dst, const std::vector<std::string>& skip, const std::string& file) {
  quiet_errors();
  for (const std::string& name : attr_names(src)) {
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    Handle a(H5Aopen(src, name.c_str(), H5P_DEFAULT), H5Aclose);
    if (!a.valid()) throw Error("cannot open attribute '" + name + "'", file);
    Handle type(H5Aget_type(a), H5Tclose);
    Handle space(H5Aget_space(a), H5Sclose);
    const hssize_t npoints = H5Sget_simple_extent_npoints(space);
    if (!type.valid() || !space.valid() || npoints < 0) throw Error("cannot copy attribute '" + name + "'", file);
    if (H5Aexists(dst, name.c_str()) > 0) H5Adelete(dst, name.c_str());
    // A scalar variable-length string is rewritten as the same text, fixed-length.
    if (H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0 && npoints == 1) {
      const std::string text = attr_string(src, ".", name, file);
      Handle t = fixed_string_type(text.size());
      Handle sp(H5Screate(H5S_SCALAR), H5Sclose);
      Handle b(H5Acreate2(dst, name.c_str(), t, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      if (!b.valid() || H5Awrite(b, t, text.c_str()) < 0) throw Error(failed("write attribute '" + name + "'"), file);
      continue;
    }
    // Reading with the file's own type is a no-op conversion; variable-length members come
    // back as pointers owned by HDF5 and are reclaimed below.
    std::vector<unsigned char> buf(size_t(npoints) * H5Tget_size(type) + 1);
    if (H5Aread(a, type, buf.data()) < 0) throw Error("cannot read attribute '" + name + "'", file);
    Handle b(H5Acreate2(dst, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    const bool ok = b.valid() && H5Awrite(b, type, buf.data()) >= 0;
    const bool vlen = H5Tdetect_class(type, H5T_VLEN) > 0 ||
                      (H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0);
    if (vlen) H5Dvlen_reclaim(type, space, H5P_DEFAULT, buf.data());
    if (!ok) throw Error(failed("write attribute '" + name + "'"), file);
  }
}

// One dataset: same type, shape and creation properties (chunking, filters, fill value), the
// attributes, then the data -- raw chunks as stored, or the whole (small, unchunked) dataset.
// `name` is created under dst_loc; `shown` names it in messages (its path in the new file).
static void copy_dataset(hid_t src, hid_t dst_loc, const std::string& name, const std::string& shown,
                         const std::string& file) {
  Handle type(H5Dget_type(src), H5Tclose), space(H5Dget_space(src), H5Sclose);
  Handle dcpl(H5Dget_create_plist(src), H5Pclose);
  if (!type.valid() || !space.valid() || !dcpl.valid()) throw Error("cannot read the dataset's layout", file, shown);
  if (H5Tdetect_class(type, H5T_VLEN) > 0 || (H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0))
    throw Error("cannot copy a dataset of variable-length data", file, shown);
  compact_storage(dcpl, false);
  Handle d(H5Dcreate2(dst_loc, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw Error(failed("create dataset"), file, shown);
  copy_attributes(src, d, {}, file);
  const hssize_t npoints = H5Sget_simple_extent_npoints(space);
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
    hsize_t chunks = 0;
    if (H5Dget_num_chunks(src, space, &chunks) < 0) throw Error("cannot read the chunk index", file, shown);
    std::vector<hsize_t> offset(size_t(std::max(1, H5Sget_simple_extent_ndims(space))));
    std::vector<unsigned char> buf;
    for (hsize_t i = 0; i < chunks; ++i) {
      unsigned mask = 0;
      haddr_t addr = 0;
      hsize_t size = 0;
      if (H5Dget_chunk_info(src, space, i, offset.data(), &mask, &addr, &size) < 0)
        throw Error("cannot read the chunk index", file, shown);
      buf.resize(size_t(size));
      uint32_t read_mask = 0;
      if (H5Dread_chunk(src, H5P_DEFAULT, offset.data(), &read_mask, buf.data()) < 0)
        throw Error("cannot read a chunk (corrupt data)", file, shown);
      if (H5Dwrite_chunk(d, H5P_DEFAULT, read_mask, offset.data(), size_t(size), buf.data()) < 0)
        throw Error(failed("write a chunk"), file, shown);
    }
  } else if (npoints > 0) {
    std::vector<unsigned char> buf(size_t(npoints) * H5Tget_size(type));
    if (H5Dread(src, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
      throw Error("read failed (corrupt data)", file, shown);
    if (H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0) throw Error(failed("write dataset"), file, shown);
  }
  if (H5Dclose(d.release()) < 0) throw Error(failed("write dataset"), file, shown);
}

static void copy_tree(hid_t src_loc, const std::string& src_path, hid_t dst_loc, const std::string& dst_path,
                      const std::string& shown, const std::string& file, int depth) {
  if (depth > 64) throw Error("groups nested more than 64 deep", file, src_path);
  H5O_info_t info;
  if (H5Oget_info_by_name2(src_loc, src_path.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
    throw Error("cannot read the object to copy", file, src_path);
  if (info.type == H5O_TYPE_DATASET) {
    Handle d(H5Dopen2(src_loc, src_path.c_str(), H5P_DEFAULT), H5Dclose);
    if (!d.valid()) throw Error("cannot open dataset", file, src_path);
    copy_dataset(d, dst_loc, dst_path, shown, file);
    return;
  }
  if (info.type != H5O_TYPE_GROUP) throw Error("cannot copy a named datatype or unknown object", file, src_path);
  Handle sg(H5Gopen2(src_loc, src_path.c_str(), H5P_DEFAULT), H5Gclose);
  if (!sg.valid()) throw Error("cannot open group", file, src_path);
  Handle dg = create_group(dst_loc, dst_path, file);
  copy_attributes(sg, dg, {}, file);
  std::vector<std::pair<std::string, H5L_type_t>> links;
  hsize_t idx = 0;
  auto collect = [](hid_t, const char* n, const H5L_info_t* li, void* out) -> herr_t {
    static_cast<std::vector<std::pair<std::string, H5L_type_t>>*>(out)->emplace_back(n, li->type);
    return 0;
  };
  if (H5Literate(sg, H5_INDEX_NAME, H5_ITER_INC, &idx, collect, &links) < 0) throw Error("cannot list group", file, src_path);
  for (const auto& [name, type] : links) {
    if (type != H5L_TYPE_HARD) throw Error("cannot copy a soft or external link", file, src_path + "/" + name);
    copy_tree(sg, name, dg, name, shown + "/" + name, file, depth + 1);
  }
}

void copy_object(hid_t src_loc, const std::string& src_path, hid_t dst_loc, const std::string& dst_path,
                 const std::string& file) {
  quiet_errors();
  if (exists(dst_loc, dst_path)) throw Error("cannot copy: the target exists already", file, dst_path);
  copy_tree(src_loc, src_path, dst_loc, dst_path, dst_path, file, 0);
}

}  // namespace tl::h5
