// Calibration file (HDF5): /hessian/<tensor name> float32 [K, K] with attribute nsamples:
// H exactly as GPTQ's add_batch accumulates it, H = 2/n * sum_i x_i x_i^T (a running mean
// over n samples). Root attributes: format = "tinyloop-calib", format_version = 1.
// Also reads the golden files' layout (a root dataset H with root attribute nsamples).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tl {

struct Hessian {
  std::string name;       // the weight it belongs to
  int64_t K = 0;
  int64_t nsamples = 0;
  std::vector<float> H;   // [K, K] row-major
};

class CalibReader {
 public:
  explicit CalibReader(const std::string& path);  // throws tl::Error
  ~CalibReader();
  CalibReader(CalibReader&&) noexcept;
  std::vector<std::string> names() const;
  bool has(const std::string& name) const;
  Hessian read(const std::string& name) const;  // checks dtype float32 and shape [K, K]
  int64_t dim(const std::string& name) const;    // K, from metadata only (the same checks)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class CalibWriter {
 public:
  explicit CalibWriter(const std::string& path);  // temporary file beside path
  ~CalibWriter();
  void write(const Hessian& h);
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tl
