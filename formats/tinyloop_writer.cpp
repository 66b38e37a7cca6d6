// .tinyloop v1 writer: everything goes into a temporary file beside the target (AtomicOutput)
// and is renamed into place by commit(). The copy_* calls copy groups, datasets (raw chunks)
// and attributes so that what this build does not know (frac4, sign_bit, ...) survives a
// rewrite. Every HDF5 call runs inside impl_->file.run(): after a failed write (a full disk)
// the file is abandoned, never closed (h5_write.h, OutputFile).
#include "core/error.h"
#include "core/nibbles.h"
#include "formats/h5_write.h"
#include "formats/tinyloop_schema.h"

#include "core/version.h"

namespace tl {

TinyloopWriter::TinyloopWriter(const std::string& path, const std::string& producer)
    : impl_(std::make_unique<Impl>(path)) {
  impl_->producer = producer;
  impl_->file.run([&] {
    const hid_t f = impl_->file.id();
    h5::Handle root = h5::open_group(f, "/", path);
    h5::write_attr(root, "format", schema::kFormat, path);
    h5::write_attr(root, "format_version", kTinyloopFormatVersion, path);
    h5::write_attr(root, "producer", producer, path);
    h5::write_attr(root, "producer_version", kVersion, path);
    h5::create_group(f, schema::kTensors, path);
    h5::create_group(f, schema::kQuant, path);
  });
}

TinyloopWriter::~TinyloopWriter() = default;  // Impl closes the file, then AtomicOutput unlinks

static void require_open(const TinyloopWriter::Impl& im) {
  h5::quiet_errors();
  if (im.committed) throw Error("writer already committed", im.target());
}

// True when `name` is already an entry of the file being written.
static bool written(TinyloopWriter::Impl& im, const std::string& name) {
  return im.file.run([&] {
    return h5::exists(im.file.id(), schema::dense_path(name)) || h5::exists(im.file.id(), schema::quant_path(name));
  });
}

void TinyloopWriter::write_config(const ModelConfig& config) {
  require_open(*impl_);
  const std::string& path = impl_->target();
  config.validate(path);
  if (impl_->config_written) throw Error("config written twice", path, "/config");
  nlohmann::json j;
  to_json(j, config);
  impl_->file.run([&] {
    h5::Handle g = h5::create_group(impl_->file.id(), schema::kConfig, path);
    for (auto it = j.begin(); it != j.end(); ++it) h5::write_attr(g, it.key(), it.value(), path);
  });
  impl_->config_written = true;
  impl_->family_written = config.uses_family_features();
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
  if (written(*impl_, t.name)) throw Error("entry written twice", path, t.name);
  impl_->file.run([&] {
    h5::write_dataset(impl_->file.id(), schema::dense_path(t.name), schema::file_type(t.dtype), schema::mem_type(t.dtype),
                      t.shape, t.data.data(), path);
  });
}

// Datasets are created by their absolute path, so a failed write names it (/quant/w/marlin/B).
// A compact weight's section has no delta: the reader derives it from scale and zero.
static void write_marlin(hid_t file, const std::string& gp, const MarlinSection& m, int64_t K, int64_t N, int64_t G,
                         CodeStorage storage, const std::string& path) {
  const std::string mp = gp + "/" + schema::kMarlin;
  h5::Handle mg = h5::create_group(file, mp, path);
  h5::write_attr(mg, "groupsize", m.groupsize, path);
  h5::write_attr(mg, "layout", m.layout, path);
  const int64_t NP = m.columns(N);  // the section's columns: N, or N padded to a multiple of 128
  h5::write_attr(mg, "K", K, path);
  h5::write_attr(mg, "N", NP, path);
  h5::write_dataset(file, mp + "/B", H5T_STD_I32LE, H5T_NATIVE_INT32, {K / 16, 2 * NP}, m.B.data(), path);
  h5::write_dataset(file, mp + "/s", h5::float16_type(), h5::float16_type(), {G, NP}, m.s.data(), path);
  if (storage == CodeStorage::kNative)
    h5::write_dataset(file, mp + "/delta", h5::float16_type(), h5::float16_type(), {G, NP}, m.delta.data(), path);
}

// The native datasets of a weight: q (two codes per byte) and scale.
static void write_native_codes(hid_t file, const std::string& gp, const QuantWeight& w, const std::string& path) {
  const std::vector<uint8_t> packed = pack_nibbles(w.q.data(), w.K, w.N);
  h5::write_dataset(file, gp + "/q", H5T_STD_U8LE, H5T_NATIVE_UINT8, {w.K, (w.N + 1) / 2}, packed.data(), path);
  h5::write_dataset(file, gp + "/scale", h5::float16_type(), h5::float16_type(), {w.groups(), w.N}, w.scale.data(),
                    path);
}

void TinyloopWriter::write_quant(const QuantWeight& w, CodeStorage storage) {
  require_open(*impl_);
  const std::string& path = impl_->target();
  schema::check_entry_name(w.name, path);
  w.validate(path);
  for (const std::string& a : schema::kQuantLayoutAttrs)
    if (w.provenance.contains(a))
      throw Error("provenance key '" + a + "' collides with a layout attribute of the same name", path, w.name);
  if (storage == CodeStorage::kMarlinOnly && !w.marlin)
    throw Error("a compact weight needs its Marlin section (the only copy of its codes)", path, w.name);
  if (written(*impl_, w.name)) throw Error("entry written twice", path, w.name);
  const int64_t G = w.groups();
  impl_->file.run([&] {
    const hid_t f = impl_->file.id();
    const std::string gp = schema::quant_path(w.name);
    h5::Handle g = h5::create_group(f, gp, path);
    h5::write_attr(g, "bits", w.bits, path);
    h5::write_attr(g, "group_size", w.group_size, path);
    h5::write_attr(g, "K", w.K, path);
    h5::write_attr(g, "N", w.N, path);
    h5::write_attr(g, "G", G, path);
    if (storage == CodeStorage::kMarlinOnly) h5::write_attr(g, schema::kCodesAttr, schema::kCodesMarlin, path);
    if (w.provenance.is_object())
      for (auto it = w.provenance.begin(); it != w.provenance.end(); ++it) h5::write_attr(g, it.key(), it.value(), path);
    if (storage == CodeStorage::kNative) write_native_codes(f, gp, w, path);
    h5::write_dataset(f, gp + "/zero", h5::float16_type(), h5::float16_type(), {G, w.N}, w.zero.data(), path);
    if (w.marlin) write_marlin(f, gp, *w.marlin, w.K, w.N, G, storage, path);
  });
  if (storage == CodeStorage::kMarlinOnly) impl_->compact_written = true;
  if (w.marlin && w.marlin->padded_n != 0) impl_->padded_written = true;
}

static const TinyloopReader::Impl& src_impl(const TinyloopReader& src) { return *src.impl(); }

void TinyloopWriter::copy_entry(const TinyloopReader& src, const std::string& name) {
  require_open(*impl_);
  const std::string& path = impl_->target();
  schema::check_entry_name(name, path);
  if (written(*impl_, name)) throw Error("entry written twice", path, name);
  const auto& s = src_impl(src);
  const bool quant = src.has_quant(name);
  if (!quant && !src.has_dense(name)) throw Error("no such tensor or quantized weight to copy", src.path(), name);
  const std::string p = quant ? schema::quant_path(name) : schema::dense_path(name);
  impl_->file.run([&] { h5::copy_object(s.file, p, impl_->file.id(), p, path); });
  if (quant && h5::has_attr(s.file, p, schema::kCodesAttr)) impl_->compact_written = true;
  const std::string mp = p + "/" + schema::kMarlin;
  if (quant && h5::is_group(s.file, mp) && h5::attr_int(s.file, mp, "N", src.path()) != src.info(name).shape.at(1))
    impl_->padded_written = true;  // a padded section, copied raw
}

void TinyloopWriter::copy_quant_with_marlin(const TinyloopReader& src, const QuantWeight& w, const MarlinSection& m,
                                            CodeStorage storage) {
  require_open(*impl_);
  const std::string& path = impl_->target();
  const auto& s = src_impl(src);
  const std::string& name = w.name;
  const std::string gp = schema::quant_path(name);
  if (!src.has_quant(name)) throw Error("missing group (expected a quantized weight)", src.path(), gp);
  if (written(*impl_, name)) throw Error("entry written twice", path, name);
  const EntryInfo e = src.info(name);
  const int64_t K = e.shape[0], N = e.shape[1];
  const int64_t G = group_count(K, e.group_size);
  if (w.K != K || w.N != N || w.group_size != e.group_size)
    throw Error("internal: the weight passed differs from the entry it is copied with", src.path(), name);
  schema::validate_marlin(m, K, N, G, e.group_size, path, name);

  // Rebuild the group: its attributes and every member except the old marlin/ (and, for the
  // other storage, the other form's datasets) are copied raw, so the file never holds a dead
  // copy of the old section and what this build does not know survives.
  const bool compact = storage == CodeStorage::kMarlinOnly;
  h5::Handle sg = h5::open_group(s.file, gp, src.path());
  const std::vector<std::string> children = h5::list_links(s.file, gp, src.path());
  impl_->file.run([&] {
    const hid_t f = impl_->file.id();
    h5::Handle g = h5::create_group(f, gp, path);
    h5::copy_attributes(sg, g, {schema::kCodesAttr}, path);
    if (compact) h5::write_attr(g, schema::kCodesAttr, schema::kCodesMarlin, path);
    for (const std::string& child : children) {
      if (child == schema::kMarlin) continue;
      if (compact && (child == "q" || child == "scale")) continue;
      h5::copy_object(sg, child, f, gp + "/" + child, path);
    }
    if (!compact && e.compact) write_native_codes(f, gp, w, path);
    write_marlin(f, gp, m, K, N, G, storage, path);
  });
  if (compact) impl_->compact_written = true;
  if (m.padded_n != 0) impl_->padded_written = true;
}

void TinyloopWriter::copy_config_and_attributes(const TinyloopReader& src) {
  require_open(*impl_);
  const std::string& path = impl_->target();
  const auto& s = src_impl(src);
  const std::vector<std::string> children = h5::list_links(s.file, "/", src.path());
  impl_->file.run([&] {
    const hid_t f = impl_->file.id();
    if (src.has_config() && !impl_->config_written && !h5::exists(f, schema::kConfig)) {
      h5::copy_object(s.file, schema::kConfig, f, schema::kConfig, path);
      impl_->config_written = true;
      impl_->family_written = src.config().uses_family_features();
    }
    h5::Handle sroot = h5::open_group(s.file, "/", src.path());
    h5::Handle droot = h5::open_group(f, "/", path);
    h5::copy_attributes(sroot, droot, schema::kOwnRootAttrs, path);
    // Attributes on /tensors and /quant, and root-level objects this build does not know
    // (a tokenizer, a runtime's extra tables), travel too.
    for (const char* grp : {schema::kTensors, schema::kQuant}) {
      if (!h5::is_group(s.file, grp)) continue;
      h5::Handle sg = h5::open_group(s.file, grp, src.path());
      h5::Handle dg = h5::open_group(f, grp, path);
      h5::copy_attributes(sg, dg, {}, path);
    }
    for (const std::string& child : children) {
      if (child == schema::kConfig || child == schema::kTensors || child == schema::kQuant) continue;
      if (!h5::exists(f, child)) h5::copy_object(s.file, child, f, child, path);
    }
  });
}

void TinyloopWriter::commit() {
  require_open(*impl_);
  // A reader older than a feature the file uses refuses it by its version.
  const int version = impl_->padded_written    ? kTinyloopPaddedFormatVersion
                      : impl_->family_written    ? kTinyloopFamilyFormatVersion
                      : impl_->compact_written ? kTinyloopCompactFormatVersion
                                               : kTinyloopFormatVersion;
  if (version != kTinyloopFormatVersion)
    impl_->file.run([&] {
      h5::Handle root = h5::open_group(impl_->file.id(), "/", impl_->target());
      h5::write_attr(root, "format_version", version, impl_->target());
    });
  impl_->file.close();
  impl_->out.commit();
  impl_->committed = true;
}

}  // namespace tl
