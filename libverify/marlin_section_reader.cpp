#include "libverify/marlin_section_reader.h"

#include "core/error.h"
#include "formats/h5_util.h"
#include "formats/marlin_layout.h"

namespace tl::verify {

struct MarlinSectionReader::Impl {
  std::string path;
  h5::Handle file;
};

MarlinSectionReader::MarlinSectionReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  h5::quiet_errors();
  impl_->path = path;
  impl_->file = h5::open_file(path, /*writable=*/false);
}

MarlinSectionReader::~MarlinSectionReader() = default;

MarlinSection MarlinSectionReader::read(const QuantWeight& w, bool compact) const {
  const std::string& path = impl_->path;
  const hid_t f = impl_->file;
  const std::string mp = "/quant/" + w.name + "/marlin";  // the layout of tinyloop_file.h
  if (w.K % 16 != 0)
    throw Error("K = " + std::to_string(w.K) + " is not a multiple of 16, so no Marlin B can exist",
                path, mp);
  MarlinSection m;
  m.groupsize = h5::attr_int(f, mp, "groupsize", path);
  m.layout = h5::attr_string(f, mp, "layout", path);
  const h5::DatasetInfo bi = h5::dataset_info(f, mp + "/B", path);
  if (bi.type_class != H5T_INTEGER || bi.type_size != 4)
    throw Error("expected dtype int32", path, mp + "/B");
  m.B = h5::read<int32_t>(f, mp + "/B", path, nullptr, {w.K / 16, 2 * w.N});
  m.s = h5::read_half_bits(f, mp + "/s", path, nullptr, {w.groups(), w.N});
  if (compact) {
    // A compact weight stores no delta: the reader's own step derives it (compact_delta), and
    // w's scale is this very section's s un-permuted (TinyloopReader::read_quant), so a fault in
    // s shows in both; the pack tier checks the result against its own delta_contract.
    m.delta = compact_delta(w);
  } else {
    m.delta = h5::read_half_bits(f, mp + "/delta", path, nullptr, {w.groups(), w.N});
  }
  return m;
}

}  // namespace tl::verify
