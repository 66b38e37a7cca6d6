#include "libconvert/hessian.h"

#include <cmath>

#include "core/error.h"
#include "libconvert/eigen_blocking.h"

namespace tl {

HessianAccumulator::HessianAccumulator(int64_t K) : K_(K), H_(Eigen::MatrixXf::Zero(K, K)) {
  if (K <= 0) throw Error("Hessian: K must be positive");
  pin_eigen_blocking();
}

void HessianAccumulator::add_batch(const float* X, int64_t rows, int64_t samples) {
  if (rows <= 0 || samples <= 0) throw Error("Hessian add_batch: empty batch");
  // H *= n / (n + tmp): a Python float, applied to a float32 tensor as float32.
  H_ *= float(double(n_) / double(n_ + samples));
  n_ += samples;
  const float a = float(std::sqrt(2.0 / double(n_)));
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMajor> x(X, rows, K_);
  const RowMajor xs = a * x;
  // Only the lower triangle is computed (half the flops), then mirrored.
  H_.selfadjointView<Eigen::Lower>().rankUpdate(xs.transpose());
  H_.triangularView<Eigen::StrictlyUpper>() = H_.transpose();
}

}  // namespace tl
