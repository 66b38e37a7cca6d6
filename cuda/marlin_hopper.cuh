// What the Hopper kernel (marlin_hopper.cu, built for sm_90a alone) and its host side
// (marlin_hopper_launch.cu: the tensor maps, what fits on the device, the schedule cache and the
// launch) share: the kernel's parameters and its variants. The schedule itself is
// marlin_hopper_plan.h's.
#pragma once

#include <cuda.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <cstdint>

#include "cuda/marlin_hopper_plan.h"

namespace tl::cuda::hopper {

constexpr int kK16PerStage = kStageK / 16;  // k16 rows of the weight per stage

// The operands as the copy engine reads them, one copy per operand per stage (host side:
// encode_maps): A [M, K] in boxes of BM tokens x 64 halves (128-byte swizzle, rows past M
// zeros); the Marlin section [K/16, 2N] as [K/16][N/128][256 words], boxes of 4 k16 rows x 2
// chunks of 1 KB = the CTA tile's 8 KB of a stage; scales and deltas [G, N], boxes of 256
// columns x 1 group. Past a ragged N % 256 edge the boxes read zeros, which nothing uses.
struct Maps {
  CUtensorMap a, w, s, delta;
};

struct Params {
  const int32_t* B;     // Marlin section [K/16, 2N]
  const __half* s;      // permuted scales [G, N]
  const __half* delta;  // natural [G, N] or nullptr
  __half* C;            // [M, N]
  int M, N, K;
  int grouped;          // 1: one scale row per 128 k; 0: per column (G = 1)
  int n_tiles, m_tiles, tiles;  // 256-column tiles, row tiles, tiles = their product
  int k_iters;          // K / 64
  int split;            // CTAs per tile along k (the cluster size; 1: none)
  // Stream-K (hopper::Shape::stream_k; split 1): each CTA a run of stages (stream_k_pieces: in
  // row groups of sk_group CTAs, one per row tile, sharing the column tiles' stages); a tile cut
  // between CTAs is summed from fp32 partials in slots of 2 per (CTA, consumer) -- the run's
  // first and its last piece -- by the last piece to arrive on the tile's counter. The runs
  // themselves are the kernel's third parameter.
  int stream_k;
  int sk_group;
  float4* partials;     // [grid][2][kSlotConsumers] slots of Cfg::kSlotQuads float4
  int* counters;        // [tiles][kCountersPerTile], zero on entry and on exit
};

// The instantiated configurations <BM, NW, CONSUMERS, KI, SPLIT> (cuda/marlin_hopper_plan.h
// picks the tile by M and grid, variant_for the kernel by the split):
//   <32, 4, 2, KI, split 1 | clusters>:  32-token tiles, two k-interleaved consumers of 4 n32
//                wgmma per k16 (M <= 32);
//   <64, 4, 2, KI, split 1 | clusters>:  64-token tiles, 4 n64 wgmma (M <= 64, and larger M
//                whose 128-token tiles are too few to fill the GPU);
//   <128, 2, 2, -, split 1>: 128-token tiles, two consumers of 2 n128 wgmma each: every decoded
//                weight feeds 128 tokens (half the dequantization per MMA of 64) and the wgmma
//                is wide; it never splits (no shared memory left for a partial tile).
// 64 x 4 or 128 x 2 accumulators per thread are what the register file holds.
struct Variant {
  int rows, threads, smem_bytes;
  int slot_consumers, slot_bytes;  // stream-K: partial slots per (CTA, run end), bytes per slot
  int counters_per_tile;           // stream-K: arrival counters per tile
  void (*kernel)(const Maps, const Params, const hopper::StreamKRuns);
};
// The kernel for `rows`-token tiles and `split` CTAs per tile (the k-interleaved variants: one
// kernel for split 1, one for clusters). Defined beside the kernels (marlin_hopper.cu).
Variant variant_for(int rows, int split);

}  // namespace tl::cuda::hopper
