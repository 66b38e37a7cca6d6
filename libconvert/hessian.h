// GPTQ's Hessian H = 2/n * sum_i x_i x_i^T of a linear layer's inputs, accumulated exactly as
// IST-DASLab/gptq `GPTQ.add_batch` does for nn.Linear (float32 running mean):
//
//   add_batch(X [rows, K], samples):  H *= n / (n + samples);  n += samples;
//                                     X' = sqrt(2 / n) * X;    H += X'^T X'
//
// `samples` is what upstream counts: the batch size of the hooked input (one [1, seq, K] call
// = 1 sample of `seq` rows); calling with all rows as one sample scales H by nsamples but
// changes neither codes nor damping. The scale factors are computed as upstream's Python
// scalars (double) and applied in float32.
#pragma once

#include <cstdint>

#include <Eigen/Core>

namespace tl {

class HessianAccumulator {
 public:
  explicit HessianAccumulator(int64_t K);

  // X: row-major [rows, K] float32.
  void add_batch(const float* X, int64_t rows, int64_t samples = 1);

  int64_t K() const { return K_; }
  int64_t nsamples() const { return n_; }
  // Symmetric [K, K] (both triangles filled), row-major == column-major.
  const Eigen::MatrixXf& H() const { return H_; }

 private:
  int64_t K_ = 0;
  int64_t n_ = 0;
  Eigen::MatrixXf H_;
};

}  // namespace tl
