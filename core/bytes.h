// The one spelling of a byte count in messages: "1.27 GiB", "310 MiB", "12 KiB" (powers of 1024).
// Admission messages (formats/memory_budget.h) and the CUDA allocation errors (cuda/cuda_errors.h)
// both use it, so a refusal and the failure it prevents read alike.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace tl {

inline std::string format_bytes(uint64_t b) {
  char buf[32];
  const double v = double(b);
  if (v >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", v / (1024.0 * 1024 * 1024));
  else if (v >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.0f MiB", v / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.0f KiB", v / 1024.0);
  return buf;
}

}  // namespace tl
