// The one way libgpu turns a launcher's rc (cuda/tl_kernels.h) into a tl::Error naming the call.
#pragma once

#include <string>

#include "core/error.h"
#include "cuda/tl_kernels.h"

namespace tl::gpu {

inline void check_launch(int rc, const std::string& what) {
  if (rc == cuda::kOk) return;
  throw Error(rc == cuda::kCudaError ? cuda::rc_message(rc)
                                     : "launcher refused the shape (rc " + std::to_string(rc) + ": " + cuda::rc_text(rc) + ")",
              "", what);
}

}  // namespace tl::gpu
