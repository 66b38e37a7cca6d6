#include "libverify/marlin_section_reader.h"

#include "core/error.h"
#include "formats/h5_util.h"
#include "formats/marlin_layout.h"
#include "formats/tinyloop_schema.h"

namespace tl::verify {

struct MarlinSectionReader::Impl {
  std::string path;
  hid_t file = -1;  // the reader's handle
};

MarlinSectionReader::MarlinSectionReader(const TinyloopReader& file) : impl_(std::make_unique<Impl>()) {
  impl_->path = file.path();
  impl_->file = file.impl()->file;
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
  // The section's columns as stored (attr N): the weight's N, or N padded to a multiple of 128;
  // a count that is neither is read as it is and fails the pack tier (marlin_decode says which).
  const int64_t NP = h5::has_attr(f, mp, "N") ? h5::attr_int(f, mp, "N", path) : w.N;
  if (NP <= 0 || NP > marlin_padded_n(w.N) + kMarlinTileN)
    throw Error("N = " + std::to_string(NP) + ": not a section of a weight of N = " + std::to_string(w.N), path, mp);
  m.padded_n = NP != w.N ? NP : 0;
  m.B = h5::read<int32_t>(f, mp + "/B", path, nullptr, {w.K / 16, 2 * NP});
  m.s = h5::read_half_bits(f, mp + "/s", path, nullptr, {w.groups(), NP});
  if (compact) {
    // A compact weight stores no delta: the reader's own step derives it (compact_delta), and
    // w's scale is this very section's s un-permuted (TinyloopReader::read_quant), so a fault in
    // s shows in both; the pack tier checks the result against its own delta_contract.
    m.delta = compact_delta(w, m);
  } else {
    m.delta = h5::read_half_bits(f, mp + "/delta", path, nullptr, {w.groups(), NP});
  }
  return m;
}

}  // namespace tl::verify
