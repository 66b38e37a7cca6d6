// Calibration reader (formats/calib_file.h): both layouts, every Hessian.
#include "formats/calib_file.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = tl::fuzz::write_input("calib.h5", data, size);
  tl::fuzz::refuse_or_read([&] {
    tl::CalibReader r(p);
    for (const std::string& n : r.names()) (void)r.read(n);
  });
  return 0;
}
