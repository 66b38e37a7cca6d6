// Reads a weight's Marlin section exactly as stored. TinyloopReader::read_quant rejects an
// inconsistent section outright (a wrong groupsize, say), which is right for a consumer but
// not for the verifier: tl-verify must load the faulty section, run it, and say what is wrong
// with it (exit 1, naming the tier and the weight) instead of stopping at "bad input".
// Only the shapes the section must have to be indexable are enforced here.
#pragma once

#include <memory>
#include <string>

#include "formats/tinyloop_file.h"

namespace tl::verify {

class MarlinSectionReader {
 public:
  explicit MarlinSectionReader(const TinyloopReader& file);  // reads through the open file
  ~MarlinSectionReader();
  // The section of /quant/<w.name>/marlin: groupsize and layout attributes, B [K/16, 2N] int32,
  // s and delta float16 [G, N]; compact (EntryInfo::compact): no stored delta, it is derived from
  // w's scale and zero. Throws tl::Error naming the dataset when one is missing or has another
  // shape or dtype.
  MarlinSection read(const QuantWeight& w, bool compact) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tl::verify
