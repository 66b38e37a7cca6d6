// tl-inspect on a calibration file (inspect_kinds.h): its Hessians in either layout (calib_file.h),
// the read-back, one Hessian.
#include "formats/calib_file.h"
#include "formats/h5_util.h"
#include "jobs/inspect_kinds.h"

namespace tl::inspect {

nlohmann::json summary_calib(const std::string& path) {
  CalibReader r(path);
  h5::Handle f = h5::open_file(path);
  const bool golden = !h5::has_attr(f, "/", "format");
  nlohmann::json s = {{"file", path}, {"kind", "calibration"}, {"layout", golden ? "golden" : "tinyloop-calib"}};
  s["hessians"] = nlohmann::json::array();
  uint64_t total = 0;
  for (const std::string& n : natural_sorted(r.names())) {
    const std::string dp = golden ? "/" + n : "/hessian/" + n;
    const h5::DatasetInfo di = h5::dataset_info(f, dp, path);
    const int64_t ns = golden ? h5::attr_int(f, "/", "nsamples", path) : h5::attr_int(f, dp, "nsamples", path);
    const uint64_t bytes = uint64_t(shape_numel(di.shape)) * di.type_size;
    s["hessians"].push_back({{"name", n}, {"dtype", di.type_class == H5T_FLOAT && di.type_size == 4 ? "F32" : "?"},
                             {"shape", di.shape}, {"nsamples", ns}, {"bytes", bytes}});
    total += bytes;
  }
  s["summary"] = {{"hessians", s["hessians"].size()}, {"bytes", {{"hessians", total}}}, {"file_bytes", file_bytes(path)}};
  return s;
}

std::vector<std::string> calib_names(const std::string& path) { return CalibReader(path).names(); }

void read_back_calib(const std::string& path, const std::vector<CheckItem>& items, Progress& p, const ItemDone& done) {
  CalibReader r(path);
  for (const CheckItem& i : items) {
    p.started(i.name);
    r.read(i.name);
    done(i);
  }
}

void extract_calib(const std::string& path, const std::string& name, Extracted* out) {
  const Hessian h = CalibReader(path).read(name);
  out->arrays.push_back(Tensor::from_float("H", {h.K, h.K}, h.H.data(), DType::F32));
  out->meta["kind"] = "hessian";
  out->meta["nsamples"] = std::to_string(h.nsamples);
}

}  // namespace tl::inspect
