// The SwiGLU pair's one routing rule besides the decode kernel's (cuda/marlin_swiglu.cu
// marlin_swiglu_route, and the CPU emulation of the launchers' plans in tests/verify).
#pragma once

namespace tl::cuda {

// At 9..16 rows the pair kernel holds two sets of accumulators for two row blocks and spills a
// few registers (ptxas: 20-36 bytes); the spill traffic grows with the warp's stripe while what
// fusing saves (two launches, two tails, a round trip) does not. Measured on the H200
// (2026-12-05, g = 128 / per column, fused vs two GEMMs + the elementwise pass, M = 9..16): the
// 7B MLP (6 units per warp) 1.10-1.19x faster fused, the 70B MLP (28 units per warp) 0.84-0.91x.
// Above this many units per warp the 9..16-row pair runs unfused; at <= 8 rows, without spills,
// fused wins on both (1.41x / 1.10x).
inline constexpr int kPairMaxUnitsPerWarp9To16 = 16;

}  // namespace tl::cuda
