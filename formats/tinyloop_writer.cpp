// .tinyloop v1 writer: everything goes into a temporary file beside the target (AtomicOutput)
// and is renamed into place by commit(). The copy_* calls use H5Ocopy / raw attribute copies so
// datasets and attributes this build does not know (frac4, sign_bit, ...) survive a rewrite.
#include "core/error.h"
#include "formats/h5_write.h"
#include "formats/tinyloop_schema.h"

#ifndef TL_VERSION
#define TL_VERSION "0.0.0"
#endif

namespace tl {

TinyloopWriter::TinyloopWriter(const std::string& path, const std::string& producer)
    : impl_(std::make_unique<Impl>(path)) {
  h5::quiet_errors();
  impl_->producer = producer;
  hid_t f = H5Fcreate(impl_->out.tmp_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) throw Error("cannot create the temporary HDF5 file " + impl_->out.tmp_path(), path);
  impl_->file = h5::Handle(f, H5Fclose);
  h5::Handle root = h5::open_group(f, "/", path);
  h5::write_attr(root, "format", schema::kFormat, path);
  h5::write_attr(root, "format_version", kTinyloopFormatVersion, path);
  h5::write_attr(root, "producer", producer, path);
  h5::write_attr(root, "producer_version", TL_VERSION, path);
  h5::create_group(f, schema::kTensors, path);
  h5::create_group(f, schema::kQuant, path);
}

TinyloopWriter::~TinyloopWriter() = default;  // Impl closes the file, then AtomicOutput unlinks

static void require_open(const TinyloopWriter::Impl& im) {
  if (im.committed) throw Error("writer already committed", im.target());
}

void TinyloopWriter::write_config(const ModelConfig& config) {
  require_open(*impl_);
  const std::string& path = impl_->target();
  config.validate(path);
  if (impl_->config_written || h5::exists(impl_->file, schema::kConfig))
    throw Error("config written twice", path, "/config");
  h5::Handle g = h5::create_group(impl_->file, schema::kConfig, path);
  nlohmann::json j;
  to_json(j, config);
  for (auto it = j.begin(); it != j.end(); ++it) h5::write_attr(g, it.key(), it.value(), path);
  impl_->config_written = true;
}

void TinyloopWriter::write_dense(const Tensor& t) {
  require_open(*impl_);
  const std::string& path = impl_->target();
  schema::check_entry_name(t.name, path);
  for (int64_t d : t.shape)
    if (d < 0) throw Error("negative extent in shape " + t.shape_str(), path, t.name);
  if (t.data.size() != size_t(t.numel()) * dtype_size(t.dtype))
    throw Error("expected " + std::to_string(size_t(t.numel()) * dtype_size(t.dtype)) + " bytes for " +
                    dtype_name(t.dtype) + " " + t.shape_str() + ", got " + std::to_string(t.data.size()),
                path, t.name);
  t.check_finite(path);
  if (h5::exists(impl_->file, schema::dense_path(t.name)) || h5::exists(impl_->file, schema::quant_path(t.name)))
    throw Error("entry written twice", path, t.name);
  h5::Handle g = h5::open_group(impl_->file, schema::kTensors, path);
  h5::write_dataset(g, t.name, schema::file_type(t.dtype), schema::mem_type(t.dtype), t.shape, t.data.data(), path);
}

static void write_marlin(hid_t group, const MarlinSection& m, int64_t K, int64_t N, int64_t G, const std::string& path) {
  h5::Handle mg = h5::create_group(group, schema::kMarlin, path);
  h5::write_attr(mg, "groupsize", m.groupsize, path);
  h5::write_attr(mg, "layout", m.layout, path);
  h5::write_attr(mg, "K", K, path);
  h5::write_attr(mg, "N", N, path);
  h5::write_dataset(mg, "B", H5T_STD_I32LE, H5T_NATIVE_INT32, {K / 16, 2 * N}, m.B.data(), path);
  h5::write_dataset(mg, "s", h5::float16_type(), h5::float16_type(), {G, N}, m.s.data(), path);
  h5::write_dataset(mg, "delta", h5::float16_type(), h5::float16_type(), {G, N}, m.delta.data(), path);
}

void TinyloopWriter::write_quant(const QuantWeight& w) {
  require_open(*impl_);
  const std::string& path = impl_->target();
  schema::check_entry_name(w.name, path);
  w.validate(path);
  for (const std::string& a : schema::kQuantLayoutAttrs)
    if (w.provenance.contains(a))
      throw Error("provenance key '" + a + "' collides with a layout attribute of the same name", path, w.name);
  if (h5::exists(impl_->file, schema::dense_path(w.name)) || h5::exists(impl_->file, schema::quant_path(w.name)))
    throw Error("entry written twice", path, w.name);
  const int64_t G = w.groups();
  h5::Handle quant = h5::open_group(impl_->file, schema::kQuant, path);
  h5::Handle g = h5::create_group(quant, w.name, path);
  h5::write_attr(g, "bits", w.bits, path);
  h5::write_attr(g, "group_size", w.group_size, path);
  h5::write_attr(g, "K", w.K, path);
  h5::write_attr(g, "N", w.N, path);
  h5::write_attr(g, "G", G, path);
  if (w.provenance.is_object())
    for (auto it = w.provenance.begin(); it != w.provenance.end(); ++it) h5::write_attr(g, it.key(), it.value(), path);
  const std::vector<uint8_t> packed = schema::pack_nibbles(w.q, w.K, w.N);
  h5::write_dataset(g, "q", H5T_STD_U8LE, H5T_NATIVE_UINT8, {w.K, (w.N + 1) / 2}, packed.data(), path);
  h5::write_dataset(g, "scale", h5::float16_type(), h5::float16_type(), {G, w.N}, w.scale.data(), path);
  h5::write_dataset(g, "zero", h5::float16_type(), h5::float16_type(), {G, w.N}, w.zero.data(), path);
  if (w.marlin) write_marlin(g, *w.marlin, w.K, w.N, G, path);
}

static const TinyloopReader::Impl& src_impl(const TinyloopReader& src) { return *src.impl(); }

void TinyloopWriter::copy_entry(const TinyloopReader& src, const std::string& name) {
  require_open(*impl_);
  const std::string& path = impl_->target();
  schema::check_entry_name(name, path);
  if (h5::exists(impl_->file, schema::dense_path(name)) || h5::exists(impl_->file, schema::quant_path(name)))
    throw Error("entry written twice", path, name);
  const auto& s = src_impl(src);
  if (src.has_quant(name)) {
    h5::copy_object(s.file, schema::quant_path(name), impl_->file, schema::quant_path(name), path);
  } else if (src.has_dense(name)) {
    h5::copy_object(s.file, schema::dense_path(name), impl_->file, schema::dense_path(name), path);
  } else {
    throw Error("no such tensor or quantized weight to copy", src.path(), name);
  }
}

void TinyloopWriter::copy_quant_with_marlin(const TinyloopReader& src, const std::string& name,
                                            const MarlinSection& m) {
  require_open(*impl_);
  const std::string& path = impl_->target();
  const auto& s = src_impl(src);
  const std::string gp = schema::quant_path(name);
  if (!src.has_quant(name)) throw Error("missing group (expected a quantized weight)", src.path(), gp);
  if (h5::exists(impl_->file, gp) || h5::exists(impl_->file, schema::dense_path(name)))
    throw Error("entry written twice", path, name);
  const EntryInfo e = src.info(name);
  const int64_t K = e.shape[0], N = e.shape[1];
  const int64_t G = e.group_size > 0 ? (K + e.group_size - 1) / e.group_size : 0;
  schema::validate_marlin(m, K, N, G, e.group_size, path, name);

  // Rebuild the group: its attributes and every member except the old marlin/ are copied raw,
  // so the file never holds a dead copy of the old section.
  h5::Handle sg = h5::open_group(s.file, gp, src.path());
  h5::Handle quant = h5::open_group(impl_->file, schema::kQuant, path);
  h5::Handle g = h5::create_group(quant, name, path);
  h5::copy_attributes(sg, g, {}, path);
  for (const std::string& child : h5::list_links(s.file, gp, src.path()))
    if (child != schema::kMarlin) h5::copy_object(sg, child, g, child, path);
  write_marlin(g, m, K, N, G, path);
}

void TinyloopWriter::copy_config_and_attributes(const TinyloopReader& src) {
  require_open(*impl_);
  const std::string& path = impl_->target();
  const auto& s = src_impl(src);
  if (src.has_config() && !impl_->config_written && !h5::exists(impl_->file, schema::kConfig)) {
    h5::copy_object(s.file, schema::kConfig, impl_->file, schema::kConfig, path);
    impl_->config_written = true;
  }
  h5::Handle sroot = h5::open_group(s.file, "/", src.path());
  h5::Handle droot = h5::open_group(impl_->file, "/", path);
  h5::copy_attributes(sroot, droot, schema::kOwnRootAttrs, path);
  // Attributes on /tensors and /quant, and root-level objects this build does not know
  // (a tokenizer, a runtime's extra tables), travel too.
  for (const char* grp : {schema::kTensors, schema::kQuant}) {
    if (!h5::is_group(s.file, grp)) continue;
    h5::Handle sg = h5::open_group(s.file, grp, src.path());
    h5::Handle dg = h5::open_group(impl_->file, grp, path);
    h5::copy_attributes(sg, dg, {}, path);
  }
  for (const std::string& child : h5::list_links(s.file, "/", src.path())) {
    if (child == schema::kConfig || child == schema::kTensors || child == schema::kQuant) continue;
    if (!h5::exists(impl_->file, child)) h5::copy_object(s.file, child, impl_->file, child, path);
  }
}

void TinyloopWriter::commit() {
  require_open(*impl_);
  if (H5Fflush(impl_->file, H5F_SCOPE_GLOBAL) < 0) throw Error("cannot flush (disk full?)", impl_->target());
  impl_->file.reset();
  impl_->out.commit();
  impl_->committed = true;
}

}  // namespace tl
