// .tinyloop v1 reader: version check, then dtype and shape checks against each weight's
// K, N, G before any data is trusted. Schema: docs/format.md.
#include <algorithm>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "core/checked.h"
#include "core/error.h"
#include "core/group_size.h"
#include "core/nibbles.h"
#include "core/utf8.h"
#include "formats/file_check.h"
#include "formats/h5_write.h"
#include "formats/marlin_layout.h"
#include "formats/tinyloop_schema.h"

namespace tl {

bool is_hdf5_file(const std::string& path) {
  static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (!is_regular_file(path)) return false;  // never open a FIFO or a device: it could block
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  unsigned char head[8] = {};
  const ssize_t n = ::read(fd, head, 8);
  close(fd);
  // HDF5 also allows a user block (signature at 512, 1024, ...); our files and h5py's have none.
  return n == 8 && std::memcmp(head, sig, 8) == 0;
}

TinyloopReader::TinyloopReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  require_regular_file(path, "a .tinyloop file");
  if (!is_hdf5_file(path)) throw Error("not a .tinyloop file: expected the HDF5 signature at byte 0", path);
  impl_->file = h5::open_file(path);
  const hid_t f = impl_->file;
  if (!h5::has_attr(f, "/", "format"))
    throw Error("not a .tinyloop file: root attribute 'format' is missing (expected \"tinyloop\")", path);
  const std::string fmt = h5::attr_string(f, "/", "format", path);
  if (fmt != schema::kFormat)
    throw Error("not a .tinyloop file: root attribute format = \"" + fmt + "\", expected \"tinyloop\"", path);
  if (!h5::has_attr(f, "/", "format_version"))
    throw Error("root attribute 'format_version' is missing (expected " + std::to_string(kTinyloopFormatVersion) + ")", path);
  const int64_t v = h5::attr_int(f, "/", "format_version", path);
  impl_->version = v;
  if (v < kTinyloopFormatVersion || v > kTinyloopPaddedFormatVersion)
    throw Error("unsupported format_version " + std::to_string(v) + ": this build reads versions " +
                    std::to_string(kTinyloopFormatVersion) + " to " + std::to_string(kTinyloopPaddedFormatVersion) +
                    " (use a tinyloop-tools release that matches the file)",
                path);
}

TinyloopReader::~TinyloopReader() = default;
TinyloopReader::TinyloopReader(TinyloopReader&&) noexcept = default;
TinyloopReader& TinyloopReader::operator=(TinyloopReader&&) noexcept = default;

const std::string& TinyloopReader::path() const { return impl_->path; }

nlohmann::json TinyloopReader::root_attributes() const {
  h5::Handle root = h5::open_group(impl_->file, "/", impl_->path);
  return h5::read_attrs(root, impl_->path);
}

bool TinyloopReader::has_config() const { return h5::is_group(impl_->file, schema::kConfig); }

ModelConfig TinyloopReader::config() const {
  h5::Handle g = h5::open_group(impl_->file, schema::kConfig, impl_->path);
  ModelConfig c;
  try {
    from_json(h5::read_attrs(g, impl_->path), c);
  } catch (const Error& e) {
    throw Error(std::string(e.what()), impl_->path, "/config");
  }
  c.validate(impl_->path);
  return c;
}

static std::vector<std::string> members(const TinyloopReader::Impl& im, const char* group, bool want_group) {
  if (!h5::is_group(im.file, group)) return {};
  std::vector<std::string> out;
  for (const std::string& n : h5::list_links(im.file, group, im.path)) {
    const std::string p = std::string("/") + group + "/" + n;
    if (!valid_utf8(n)) throw Error("entry name " + sanitize_utf8(n) + " is not valid UTF-8", im.path, group);
    if (want_group ? h5::is_group(im.file, p) : h5::is_dataset(im.file, p)) out.push_back(n);
  }
  return out;
}

std::vector<std::string> TinyloopReader::dense_names() const { return members(*impl_, schema::kTensors, false); }
std::vector<std::string> TinyloopReader::quant_names() const { return members(*impl_, schema::kQuant, true); }

bool TinyloopReader::has_dense(const std::string& name) const {
  return !name.empty() && name.find('/') == std::string::npos && h5::is_dataset(impl_->file, schema::dense_path(name));
}
bool TinyloopReader::has_quant(const std::string& name) const {
  return !name.empty() && name.find('/') == std::string::npos && h5::is_group(impl_->file, schema::quant_path(name));
}

static uint64_t storage_under(hid_t file, const std::string& group, const std::string& path) {
  uint64_t total = 0;
  for (const std::string& n : h5::list_links(file, group, path)) {
    const std::string p = group + "/" + n;
    if (h5::is_dataset(file, p)) total += h5::dataset_info(file, p, path).storage_bytes;
    else if (h5::is_group(file, p)) total += storage_under(file, p, path);
  }
  return total;
}

EntryInfo TinyloopReader::info(const std::string& name) const {
  const std::string& path = impl_->path;
  const hid_t f = impl_->file;
  EntryInfo e;
  e.name = name;
  if (has_quant(name)) {
    const std::string gp = schema::quant_path(name);
    e.quantized = true;
    e.shape = {h5::attr_int(f, gp, "K", path), h5::attr_int(f, gp, "N", path)};
    e.group_size = h5::attr_int(f, gp, "group_size", path);
    e.has_marlin = h5::is_group(f, gp + "/" + schema::kMarlin);
    e.compact = h5::has_attr(f, gp, schema::kCodesAttr);
    if (e.has_marlin) e.marlin_groupsize = h5::attr_int(f, gp + "/" + schema::kMarlin, "groupsize", path);
    if (e.has_marlin && h5::has_attr(f, gp + "/" + schema::kMarlin, "N"))
      e.marlin_n = h5::attr_int(f, gp + "/" + schema::kMarlin, "N", path);
    e.stored_bytes = storage_under(f, gp, path);
    if (e.has_marlin) e.marlin_bytes = storage_under(f, gp + "/" + schema::kMarlin, path);
    h5::Handle g = h5::open_group(f, gp, path);
    e.attributes = h5::read_attrs(g, path);
    return e;
  }
  if (has_dense(name)) {
    const std::string dp = schema::dense_path(name);
    const h5::DatasetInfo di = h5::dataset_info(f, dp, path);
    if (!schema::dtype_of(di, &e.dtype))
      throw Error("unsupported dtype (expected F64, F32, F16, BF16, I64, I32, I8 or U8)", path, dp);
    e.shape = di.shape;
    e.stored_bytes = di.storage_bytes;
    h5::Handle d(H5Dopen2(f, dp.c_str(), H5P_DEFAULT), H5Dclose);
    e.attributes = h5::read_attrs(d, path);
    return e;
  }
  throw Error("no such tensor or quantized weight", path, name);
}

Tensor TinyloopReader::read_dense(const std::string& name) const {
  const std::string& path = impl_->path;
  if (!has_dense(name)) throw Error("missing dataset (expected a dense tensor)", path, schema::dense_path(name));
  const std::string dp = schema::dense_path(name);
  const h5::DatasetInfo di = h5::dataset_info(impl_->file, dp, path);
  Tensor t;
  t.name = name;
  if (!schema::dtype_of(di, &t.dtype))
    throw Error("unsupported dtype (expected F64, F32, F16, BF16, I64, I32, I8 or U8)", path, dp);
  t.shape = di.shape;
  t.data.resize(size_t(h5::checked_numel(di, dtype_size(t.dtype), path, dp)) * dtype_size(t.dtype));
  if (!t.data.empty()) h5::read_into(impl_->file, dp, path, schema::mem_type(t.dtype), t.data.data());
  t.check_finite(path);
  return t;
}

// Reads a float16 [G, N] dataset of a quantized weight, naming what was expected on failure.
static std::vector<half_bits> read_gn(hid_t f, const std::string& p, const std::string& path, int64_t G, int64_t N) {
  return h5::read_half_bits(f, p, path, nullptr, {G, N});
}


// The layout attributes of /quant/<name> and the dtype and shape of every dataset, checked
// from metadata alone -- nothing is allocated from a declared size before it is checked.
struct QuantLayout {
  int bits = 0;
  int64_t K = 0, N = 0, group_size = 0, G = 0;
  bool marlin = false;
  bool compact = false;  // codes = "marlin": q and scale live only in the section
  int64_t marlin_n = 0;  // the section's columns: N, or marlin_padded_n(N) (a padded section)
};

// `marlin`: also the Marlin section's attributes and datasets (the pack tier reads a section
// with read_quant(name, false) and checks it itself, naming what is wrong).
static QuantLayout check_quant_layout(const TinyloopReader::Impl& im, const std::string& name, bool marlin) {
  const std::string& path = im.path;
  const hid_t f = im.file;
  const std::string gp = schema::quant_path(name);
  if (!h5::is_group(f, gp)) throw Error("missing group (expected a quantized weight)", path, gp);
  QuantLayout l;
  const int64_t bits = h5::attr_int(f, gp, "bits", path);
  l.K = h5::attr_int(f, gp, "K", path);
  l.N = h5::attr_int(f, gp, "N", path);
  l.group_size = h5::attr_int(f, gp, "group_size", path);
  if (bits != 4) throw Error("bits = " + std::to_string(bits) + ": expected 4", path, gp);
  l.bits = int(bits);
  if (l.K <= 0 || l.N <= 0 || l.K > kMaxExtent || l.N > kMaxExtent || !effective_group_size_ok(l.K, l.group_size))
    throw Error("expected 0 < K, N <= 2^31 and 0 < group_size <= K; got K = " + std::to_string(l.K) + ", N = " +
                    std::to_string(l.N) + ", group_size = " + std::to_string(l.group_size), path, gp);
  l.G = group_count(l.K, l.group_size);
  if (h5::has_attr(f, gp, "G") && h5::attr_int(f, gp, "G", path) != l.G)
    throw Error("attribute G = " + std::to_string(h5::attr_int(f, gp, "G", path)) + ": expected ceil(K / group_size) = " +
                    std::to_string(l.G), path, gp);
  auto shape_of = [&](const std::string& p, const std::vector<int64_t>& want, const char* dtype, bool half,
                      size_t int_size, bool int_signed) {
    const h5::DatasetInfo di = h5::dataset_info(f, p, path);
    const bool ok = half ? di.is_float16
                         : (di.type_class == H5T_INTEGER && di.type_size == int_size && di.is_signed == int_signed);
    if (!ok) throw Error(half ? std::string("expected a float16 dataset") : std::string("expected dtype ") + dtype, path, p);
    if (di.shape != want) throw Error("expected shape " + shape_str(want) + ", found " + shape_str(di.shape), path, p);
  };
  if (h5::has_attr(f, gp, schema::kCodesAttr)) {
    const std::string codes = h5::attr_string(f, gp, schema::kCodesAttr, path);
    if (codes != schema::kCodesMarlin)
      throw Error("attribute codes = '" + codes + "': expected '" + schema::kCodesMarlin +
                      "' (the compact form) or no attribute (native q and scale)", path, gp);
    l.compact = true;
  }
  if (!l.compact) {
    shape_of(gp + "/q", {l.K, (l.N + 1) / 2}, "uint8 (two 4-bit codes per byte)", false, 1, false);
    shape_of(gp + "/scale", {l.G, l.N}, "float16", true, 0, false);
  }
  shape_of(gp + "/zero", {l.G, l.N}, "float16", true, 0, false);
  const std::string mp = gp + "/" + schema::kMarlin;
  l.marlin = h5::is_group(f, mp);
  if (l.compact && !l.marlin)
    throw Error("a compact weight (codes = 'marlin') without its marlin/ section: the codes are missing", path, gp);
  if (l.marlin && (marlin || l.compact)) {  // a compact weight's codes are its section
    const int64_t gs = h5::attr_int(f, mp, "groupsize", path);
    const int64_t want_gs = marlin_groupsize_arg(l.K, l.group_size);
    if (gs != want_gs)
      throw Error("groupsize " + std::to_string(gs) + ": expected " + std::to_string(want_gs) + " for group_size " +
                      std::to_string(l.group_size) + " and K = " + std::to_string(l.K), path, mp);
    const std::string layout = h5::attr_string(f, mp, "layout", path);
    if (layout != kMarlinLayoutTag)
      throw Error("layout '" + layout + "': expected '" + kMarlinLayoutTag + "'", path, mp);
    if (l.K % 16 != 0) throw Error("expected K divisible by 16 for a Marlin section, K = " + std::to_string(l.K), path, mp);
    // The section's columns: the weight's N, or N padded to a multiple of 128 (version 4).
    l.marlin_n = h5::attr_int(f, mp, "N", path);
    if (l.marlin_n != l.N && !marlin_padding_ok(l.N, l.marlin_n))
      throw Error("N = " + std::to_string(l.marlin_n) + ": expected " + std::to_string(l.N) +
                      (l.N % kMarlinTileN == 0 ? std::string()
                                               : " or " + std::to_string(marlin_padded_n(l.N)) +
                                                     " (padded to a multiple of 128)"),
                  path, mp);
    if (l.marlin_n != l.N && im.version < kTinyloopPaddedFormatVersion)
      throw Error("a padded Marlin section in a file of format_version " + std::to_string(im.version) +
                      " (padded sections came with version " + std::to_string(kTinyloopPaddedFormatVersion) + ")",
                  path, mp);
    if (l.compact && l.marlin_n % 64 != 0)  // the decoder's tile; every section marlin-pack writes has N % 128 == 0
      throw Error("expected N divisible by 64 for a compact weight, N = " + std::to_string(l.marlin_n), path, mp);
    shape_of(mp + "/B", {l.K / 16, 2 * l.marlin_n}, "int32", false, 4, true);
    shape_of(mp + "/s", {l.G, l.marlin_n}, "float16", true, 0, false);
    if (!l.compact) shape_of(mp + "/delta", {l.G, l.marlin_n}, "float16", true, 0, false);
  }
  return l;
}

void TinyloopReader::check_quant(const std::string& name, bool with_marlin) const {
  check_quant_layout(*impl_, name, with_marlin);
}

QuantWeight TinyloopReader::read_quant(const std::string& name, bool with_marlin) const {
  const std::string& path = impl_->path;
  const hid_t f = impl_->file;
  const std::string gp = schema::quant_path(name);
  if (!has_quant(name)) throw Error("missing group (expected a quantized weight)", path, gp);
  const QuantLayout l = check_quant_layout(*impl_, name, with_marlin);
  QuantWeight w;
  w.name = name;
  w.bits = l.bits;
  w.K = l.K;
  w.N = l.N;
  w.group_size = l.group_size;
  w.zero = read_gn(f, gp + "/zero", path, l.G, w.N);

  h5::Handle g = h5::open_group(f, gp, path);
  w.provenance = h5::read_attrs(g, path);
  for (const std::string& a : schema::kQuantLayoutAttrs) w.provenance.erase(a);

  const std::string mp = gp + "/" + schema::kMarlin;
  MarlinSection m;
  if (l.marlin && (with_marlin || l.compact)) {
    m.groupsize = h5::attr_int(f, mp, "groupsize", path);
    m.layout = h5::attr_string(f, mp, "layout", path);
    m.padded_n = l.marlin_n != w.N ? l.marlin_n : 0;
    m.B = h5::read<int32_t>(f, mp + "/B", path, nullptr, {w.K / 16, 2 * l.marlin_n});
    m.s = read_gn(f, mp + "/s", path, l.G, l.marlin_n);
  }
  if (l.compact) {
    // The exact inverses of what marlin-pack wrote: unpack the codes, un-permute the scales,
    // and delta by its definition (marlin_delta), the same bits marlin-pack computed.
    MarlinDecoded d = marlin_decode(m, w.K, w.N, w.group_size, path, name);
    w.q = std::move(d.q);
    w.scale = std::move(d.scale);
    if (with_marlin) m.delta = compact_delta(w, m);
  } else {
    const std::vector<uint8_t> packed = h5::read<uint8_t>(f, gp + "/q", path, nullptr, {w.K, (w.N + 1) / 2});
    w.q = unpack_nibbles(packed.data(), w.K, w.N);
    w.scale = read_gn(f, gp + "/scale", path, l.G, w.N);
    if (with_marlin && l.marlin) m.delta = read_gn(f, mp + "/delta", path, l.G, l.marlin_n);
  }
  if (with_marlin && l.marlin) w.marlin = std::move(m);
  w.validate(path);
  return w;
}

}  // namespace tl
