// How the Hopper prefill kernel (marlin_hopper.cu) shares a problem out: its tile variant and
// its grid. Plain host C++ without CUDA, so the CPU emulation of the tiers plans with the same
// rule (tests/verify/emulated_backend.cpp).
#pragma once

#include <algorithm>

namespace tl::cuda::hopper {

constexpr int kTileN = 256;  // output columns per tile: 4 Marlin tiles of 64
constexpr int kStageK = 64;  // k per pipeline stage
constexpr int kMinStagesPerSplit = 4;
constexpr int kMaxSplit = 8;  // the portable cluster size
// A split's combine (park, two cluster barriers, sum a share through DSMEM) costs about this
// many stages of streaming (measured on the H200: docs/perf.md).
constexpr double kSplitCostStages = 2.0;

// Tokens per tile for M: 32 (n32 wgmma) up to M = 32, 64 up to 64, else 128.
inline int tile_rows(int M) { return M <= 32 ? 32 : M <= 64 ? 64 : 128; }
// Whether a variant can split k over a cluster (the one-consumer variants: 32 and 64 tokens;
// the 128-token variant has no shared memory left for a partial tile).
constexpr bool tile_splits(int rows) { return rows <= 64; }
// Relative time of one stage (64 k x 256 columns) of a variant: the weight stream (8 KB per stage
// per SM at the HBM's share of an SM) up to 32 tokens, the tensor cores above (n64 wgmma at
// ~60 % of peak, n128 at ~75 %).
inline double stage_cost(int rows) { return rows <= 32 ? 1.0 : rows <= 64 ? 1.6 : 2.5; }

struct Shape {
  int rows = 0;     // tokens per tile
  int n_tiles = 0;  // 256-column tiles (the last one half when N % 256 == 128)
  int tiles = 0;    // n_tiles x ceil(M / rows), columns fastest
  int split = 1;    // CTAs per tile along k (a cluster of 2..8), 1: none
  int grid = 0;     // CTAs launched: clusters x split, each cluster walking tiles (persistent)
  double cost = 0;  // the model's estimate, in stages of one CTA
};

// Of M's own tile size (and for M > 64 also 64-token tiles, which can split), and splits 1 to 8
// (each CTA >= 4 stages; any cluster size, so 16 tiles can take 7 x 16 CTAs when 8 x 16 do not
// fit at once): the one whose rounds x (stages per CTA + combine) x stage cost is least, the
// fewer splits and larger tiles on a tie. fit(rows, split): how many clusters
// of `split` CTAs of that variant run at once (the SM count for split 1; 0: cannot run).
// forced_split (1..8): that split only (tests and tuning runs), 0: any.
template <class Fit>
Shape plan_shape(int M, int N, int K, Fit&& fit, int forced_split = 0) {
  Shape best;
  const int n_tiles = (N + kTileN - 1) / kTileN, k_iters = K / kStageK;
  const int own = tile_rows(M);
  for (int rows : {own, 64}) {
    if (rows != own && (M <= 64 || !tile_splits(rows))) continue;
    for (int split = 1; split <= kMaxSplit; ++split) {
      if (forced_split > 0 && split != forced_split) continue;
      if (split > 1 && (!tile_splits(rows) || k_iters / split < kMinStagesPerSplit)) continue;
      const int clusters = fit(rows, split);
      if (clusters < 1) continue;
      Shape s;
      s.rows = rows;
      s.n_tiles = n_tiles;
      s.tiles = n_tiles * ((M + rows - 1) / rows);
      s.split = split;
      const int running = std::min(s.tiles, clusters);
      s.grid = running * split;
      const int rounds = (s.tiles + running - 1) / running;
      s.cost = rounds * ((k_iters + split - 1) / split + (split > 1 ? kSplitCostStages : 0.0)) * stage_cost(rows);
      if (best.grid == 0 || s.cost < best.cost) best = s;
    }
  }
  return best;
}

// Tiles one CTA walks at most.
inline int tiles_per_cta(const Shape& s) {
  const int clusters = std::max(1, s.grid / s.split);
  return (s.tiles + clusters - 1) / clusters;
}

}  // namespace tl::cuda::hopper
