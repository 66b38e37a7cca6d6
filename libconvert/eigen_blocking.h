// Eigen's matrix products choose their cache blocking from the L1/L2/L3 sizes it reads from the
// CPU (CPUID) at first use. The depth of a panel (kc, ~ L1 / 112 bytes for float on AVX2) is
// the length of each partial dot product, so it fixes the order in which every element of a
// GEMM, a triangular product or the blocked Cholesky is summed. A 32 KiB L1 (AMD Zen, older
// Intel) gives kc = 288, a 48 KiB L1 (Intel Ice Lake and later) kc = 432: the same binary then
// rounds differently, and GPTQ's codes next to a tie of round() flip (issue 14: 1 fp16 scale
// of 512x384_g128_act0 differed between an Intel and an AMD machine).
//
// pin_eigen_blocking() sets fixed sizes, so every product in libconvert sums in the same order
// on every CPU. Call it before any Eigen product (every libconvert entry point that runs one
// does); it is cheap and idempotent. The values are those of a common desktop/server core;
// the blocking they give is within a few percent of the tuned one on the machines measured
// (docs/gptq.md, "Determinism").
#pragma once

#include <cstddef>

namespace tl {

constexpr std::ptrdiff_t kEigenL1Bytes = 32 * 1024;
constexpr std::ptrdiff_t kEigenL2Bytes = 1024 * 1024;
constexpr std::ptrdiff_t kEigenL3Bytes = 32 * 1024 * 1024;

// Sets Eigen's cache sizes to the constants above unless they are set already. Thread-safe
// against itself; call it from a single thread before starting workers that run products
// (Eigen reads the sizes without a lock).
void pin_eigen_blocking();

}  // namespace tl
