// The GPU fault hook's plan: which device allocation or kernel launch of a run fails, so that the
// tests can show what every GPU tool does when the GPU fails mid-run (tests/cli/gpu_faults.sh).
// A tool's main reads it from TL_FAULT_INJECT (apps/kernel_env.h) and hands it to libtl_cuda
// (cuda/cuda_errors.h); unset, nothing is counted differently and nothing fails. Spellings:
//
//   alloc:N   the N-th device allocation of the process (every DeviceBuffer, every scratch
//             buffer) returns cudaErrorMemoryAllocation without allocating
//   launch:N  the N-th kernel launch check returns cudaErrorLaunchFailure (the launch ran)
//   trap:N    after the N-th launch, a kernel that executes a trap instruction: the context is
//             lost, and whatever CUDA call comes next finds it (a fault that surfaces later)
//   count     nothing fails; the counts are printed on stderr at exit, for choosing N
//
// N counts from 1 over the whole process, all threads together.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"

namespace tl {

struct FaultPlan {
  enum class Kind { kNone, kCount, kAlloc, kLaunch, kTrap };
  Kind kind = Kind::kNone;
  int64_t n = 0;  // alloc / launch / trap: which one, from 1
};

// "alloc:3" -> {kAlloc, 3}; "" -> {kNone}. Anything else is tl::Error naming the variable.
inline FaultPlan parse_fault_plan(const std::string& text) {
  FaultPlan p;
  if (text.empty()) return p;
  if (text == "count") return {FaultPlan::Kind::kCount, 0};
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  if (kind == "alloc") p.kind = FaultPlan::Kind::kAlloc;
  else if (kind == "launch") p.kind = FaultPlan::Kind::kLaunch;
  else if (kind == "trap") p.kind = FaultPlan::Kind::kTrap;
  const std::string digits = colon == std::string::npos ? "" : text.substr(colon + 1);
  const bool number = !digits.empty() && digits.size() <= 12 && digits.find_first_not_of("0123456789") == std::string::npos;
  if (p.kind == FaultPlan::Kind::kNone || !number || std::stoll(digits) < 1)
    throw Error("expected alloc:N, launch:N, trap:N (N >= 1) or count, got '" + text + "'", "", "TL_FAULT_INJECT");
  p.n = std::stoll(digits);
  return p;
}

inline std::string fault_plan_text(const FaultPlan& p) {
  switch (p.kind) {
    case FaultPlan::Kind::kNone: return "";
    case FaultPlan::Kind::kCount: return "count";
    case FaultPlan::Kind::kAlloc: return "alloc:" + std::to_string(p.n);
    case FaultPlan::Kind::kLaunch: return "launch:" + std::to_string(p.n);
    case FaultPlan::Kind::kTrap: return "trap:" + std::to_string(p.n);
  }
  return "";
}

}  // namespace tl
