// How a launcher shares a problem out: the one plan type of the kernels (cuda/tl_kernels.h
// marlin_plan / int4_gemm_plan fill it) and of the verifier that picks its shapes from it
// (libverify/tier_shapes.cpp). A host-only header like cuda/kernel_options.h (plain data, no CUDA types), so a
// build without CUDA has it too. `kernel` views a string literal of the launcher.
#pragma once

#include <string_view>

namespace tl::cuda {

// What a verifier needs to pick cases that reach every code path and what a report shows; the
// launchers make the same choices (they call the same planning code).
struct GemmPlan {
  std::string_view kernel;      // "decode" (M <= 16), "tiled" (Marlin, slices of 64 rows), "dequant"
                                // (fp16 tiles + cuBLAS, slices = column chunks), "hopper" (wgmma,
                                // M > 16 on sm_90), "native"
  int blocks = 0;               // grid of the (first) launch
  int warps_per_block = 0;
  int units_per_warp = 0;       // decode: 128 x 128 units in one warp's stripe
  int cluster = 0;              // decode: blocks per cluster (0: blocks combine through slots);
                                // hopper: CTAs splitting one tile's k over a cluster (0: none)
  int slices = 0;               // tiled: launches of up to 64 rows
  int last_slice_rows = 0;      // tiled: rows of the last slice (1..64); hopper: of the last tile row
  int tiles_per_block = 0;      // tiled: output tiles one block's stripe walks, first slice;
                                // hopper: most tiles one persistent CTA walks
  int last_tiles_per_block = 0; // tiled: the same for the last slice
  int last_blocks_per_sm = 0;   // tiled: blocks per SM of the last slice (2: the 16-row mode)
  int k_splits = 0;             // native: split-K factor (fp32 partials when > 1); hopper: CTAs per tile
  int rows_per_block = 0;       // native: M rows per block (1, 2 or 4); hopper: tokens per tile (32, 64, 128)
  bool ragged_n = false;        // native: N % 8 != 0 (byte loads); hopper: N % 256 != 0 (a half tile)
  bool stream_k = false;        // hopper: CTAs share the tiles' stages evenly, tiles cut between
                                // them summed from fp32 partials (k_splits is 1)
  int stream_k_group = 0;       // hopper stream-K: CTAs per row group (one per row tile, sharing
                                // the column tiles' stages; 1: the tiles' stages end to end)
};

// The SwiGLU pair's plan names the kernel its GEMMs run, prefixed: "pair-decode" (one fused
// launch), else "pair-tiled" / "pair-hopper" / "pair-dequant" (two GEMMs + the elementwise pass).
inline std::string_view pair_kernel_name(std::string_view gemm_kernel) {
  if (gemm_kernel == "decode") return "pair-decode";
  if (gemm_kernel == "tiled") return "pair-tiled";
  if (gemm_kernel == "hopper") return "pair-hopper";
  if (gemm_kernel == "dequant") return "pair-dequant";
  return "pair-?";
}

}  // namespace tl::cuda
