#include "libconvert/eigen_blocking.h"

#include <mutex>

#include <Eigen/Core>

namespace tl {

void pin_eigen_blocking() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (Eigen::l1CacheSize() != kEigenL1Bytes || Eigen::l2CacheSize() != kEigenL2Bytes ||
      Eigen::l3CacheSize() != kEigenL3Bytes)
    Eigen::setCpuCacheSizes(kEigenL1Bytes, kEigenL2Bytes, kEigenL3Bytes);
}

}  // namespace tl
