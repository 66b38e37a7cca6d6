// Calibration files (HDF5). Two layouts are read:
//   tinyloop-calib v1: root attrs format = "tinyloop-calib", format_version = 1;
//                      /hessian/<weight name> float32 [K, K] with attrs nsamples, K.
//   golden (tests/golden, ../shared/golden gptq_*_calib.h5): a root dataset H float32 [K, K]
//                      and a root attribute nsamples; exposed as the single name "H".
// The writer only writes the first.
#include "formats/calib_file.h"

#include <cmath>

#include "formats/atomic_output.h"
#include "core/error.h"
#include "core/version.h"
#include "core/utf8.h"
#include "formats/file_check.h"
#include "formats/h5_util.h"
#include "formats/h5_write.h"
#include "formats/tinyloop_file.h"

namespace tl {

namespace {
constexpr const char* kCalibFormat = "tinyloop-calib";
constexpr int kCalibVersion = 1;
constexpr const char* kGoldenName = "H";

void check_name(const std::string& name, const std::string& file) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw Error("bad Hessian name '" + name + "': expected a non-empty name without '/'", file);
}
}  // namespace

struct CalibReader::Impl {
  std::string path;
  h5::Handle file;
  bool golden = false;
  std::vector<std::string> names;
  std::string dataset(const std::string& name) const { return golden ? "/" + name : "/hessian/" + name; }
};

CalibReader::CalibReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  require_regular_file(path, "a calibration file (HDF5)");
  if (!is_hdf5_file(path)) throw Error("not a calibration file: expected the HDF5 signature at byte 0", path);
  impl_->file = h5::open_file(path);
  const hid_t f = impl_->file;
  if (h5::has_attr(f, "/", "format")) {
    const std::string fmt = h5::attr_string(f, "/", "format", path);
    if (fmt != kCalibFormat)
      throw Error("not a calibration file: root attribute format = \"" + fmt + "\", expected \"" + kCalibFormat + "\"", path);
    const int64_t v = h5::attr_int(f, "/", "format_version", path);
    if (v != kCalibVersion)
      throw Error("unsupported format_version " + std::to_string(v) + ": this build reads calibration version " +
                      std::to_string(kCalibVersion), path);
    if (h5::is_group(f, "hessian"))
      for (const std::string& n : h5::list_links(f, "hessian", path))
        if (h5::is_dataset(f, "/hessian/" + n)) {
          if (!valid_utf8(n)) throw Error("Hessian name " + sanitize_utf8(n) + " is not valid UTF-8", path, "/hessian");
          impl_->names.push_back(n);
        }
    return;
  }
  if (h5::is_dataset(f, kGoldenName) && h5::has_attr(f, "/", "nsamples")) {
    impl_->golden = true;
    impl_->names.push_back(kGoldenName);
    return;
  }
  throw Error("not a calibration file: expected root attribute format = \"tinyloop-calib\" "
              "(or a golden file's root dataset H with attribute nsamples)", path);
}

CalibReader::~CalibReader() = default;
CalibReader::CalibReader(CalibReader&&) noexcept = default;

std::vector<std::string> CalibReader::names() const { return impl_->names; }

bool CalibReader::has(const std::string& name) const {
  for (const auto& n : impl_->names)
    if (n == name) return true;
  return false;
}

int64_t CalibReader::dim(const std::string& name) const {
  const std::string& path = impl_->path;
  const std::string dp = impl_->dataset(name);
  if (!has(name)) throw Error("missing dataset (no Hessian for this weight)", path, dp);
  const h5::DatasetInfo di = h5::dataset_info(impl_->file, dp, path);
  if (di.type_class != H5T_FLOAT || di.type_size != 4) throw Error("expected dtype float32", path, dp);
  if (di.shape.size() != 2 || di.shape[0] != di.shape[1] || di.shape[0] <= 0)
    throw Error("expected a square shape [K, K], found " + shape_str(di.shape), path, dp);
  return di.shape[0];
}

Hessian CalibReader::read(const std::string& name) const {
  const std::string& path = impl_->path;
  const hid_t f = impl_->file;
  const std::string dp = impl_->dataset(name);
  Hessian h;
  h.name = name;
  h.K = dim(name);
  h.H = h5::read<float>(f, dp, path, nullptr, {h.K, h.K});
  h.nsamples = impl_->golden ? h5::attr_int(f, "/", "nsamples", path) : h5::attr_int(f, dp, "nsamples", path);
  if (h.nsamples <= 0) throw Error("nsamples = " + std::to_string(h.nsamples) + ": expected > 0", path, dp);
  for (size_t i = 0; i < h.H.size(); ++i)
    if (!std::isfinite(h.H[i]))
      throw Error("non-finite value at [" + std::to_string(int64_t(i) / h.K) + ", " + std::to_string(int64_t(i) % h.K) +
                      "] (re-run calibration; check the activations for overflow)", path, dp);
  return h;
}

struct CalibWriter::Impl {
  explicit Impl(const std::string& target) : out(target), file(out.tmp_path(), target) {}
  AtomicOutput out;  // declared first: destroyed after the file handle
  h5::OutputFile file;  // every HDF5 call through file.run() (h5_write.h)
  bool committed = false;
};

CalibWriter::CalibWriter(const std::string& path) : impl_(std::make_unique<Impl>(path)) {
  impl_->file.run([&] {
    const hid_t f = impl_->file.id();
    h5::Handle root = h5::open_group(f, "/", path);
    h5::write_attr(root, "format", kCalibFormat, path);
    h5::write_attr(root, "format_version", kCalibVersion, path);
    h5::write_attr(root, "producer_version", kVersion, path);
    h5::create_group(f, "hessian", path);
  });
}

CalibWriter::~CalibWriter() = default;

void CalibWriter::write(const Hessian& h) {
  const std::string& path = impl_->out.target();
  if (impl_->committed) throw Error("writer already committed", path);
  check_name(h.name, path);
  if (h.K <= 0 || int64_t(h.H.size()) != h.K * h.K)
    throw Error("expected " + std::to_string(h.K) + " x " + std::to_string(h.K) + " values, got " +
                    std::to_string(h.H.size()), path, h.name);
  if (h.nsamples <= 0) throw Error("expected nsamples > 0", path, h.name);
  for (size_t i = 0; i < h.H.size(); ++i)
    if (!std::isfinite(h.H[i])) throw Error("non-finite value at flat index " + std::to_string(i), path, h.name);
  const bool twice = impl_->file.run([&] { return h5::exists(impl_->file.id(), "/hessian/" + h.name); });
  if (twice) throw Error("Hessian written twice", path, h.name);
  impl_->file.run([&] {
    h5::Handle g = h5::open_group(impl_->file.id(), "hessian", path);
    h5::write_dataset(g, h.name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {h.K, h.K}, h.H.data(), path);
    h5::Handle d(H5Dopen2(g, h.name.c_str(), H5P_DEFAULT), H5Dclose);
    h5::write_attr(d, "nsamples", h.nsamples, path);
    h5::write_attr(d, "K", h.K, path);
  });
}

void CalibWriter::commit() {
  if (impl_->committed) return;
  impl_->file.close();
  impl_->out.commit();
  impl_->committed = true;
}

}  // namespace tl
