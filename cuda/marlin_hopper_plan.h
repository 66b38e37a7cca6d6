// How the Hopper prefill kernel (marlin_hopper.cu) shares a problem out: its tile variant and
// its grid. Plain host C++ without CUDA, so the CPU emulation of the tiers plans with the same
// rule (tests/verify/emulated_backend.cpp).
#pragma once

#include <algorithm>

#ifdef __CUDACC__
#define TL_HOPPER_HD __host__ __device__
#else
#define TL_HOPPER_HD
#endif

namespace tl::cuda::hopper {

constexpr int kTileN = 256;  // output columns per tile: 4 Marlin tiles of 64
constexpr int kStageK = 64;  // k per pipeline stage
constexpr int kMinStagesPerSplit = 4;
constexpr int kMaxSplit = 8;  // the portable cluster size
// A split's combine (each rank pushes its partial into the summing rank's receive buffer with
// st.async, which sums on its red_full barrier) costs about this many stages of streaming
// (fitted on the H200; docs/perf-history.md has the measurements).
constexpr double kSplitCostStages = 2.0;
// Stream-K's combine per tile a CTA adds partials to, in stages of the variant (fitted to H200
// A/B calls, docs/perf-history.md): 32-64-token tiles park 16-32 KB; a 128-token tile's two consumers
// 128 KB, which the last piece reads back. (The first fit, 17.4 for 128 tokens, kept 128-token
// stream-K off at M = 128-512, where A/B runs of 4.0 gained 1-19 % on 6 of the 7 layer shapes
// it switches and lost 4 % on the seventh, 7B qkv at M = 256.)
inline double stream_k_combine_stages(int rows) { return rows <= 64 ? 2.0 : 4.0; }
// The hand-over between two pieces of a stream-K run, in stages, that the runs are cut by
// (stream_k_cut; 0: equal runs). The timeline of 7B qkv at M = 32 (H200, 2026-12-03, a probe build
// of df117d4) put a cut first piece's hand-over at 3.4 us against 0.37 us per stage (~9 stages),
// and the CTAs with two pieces ending ~5.5 us after the median one (~15). H200 A/B over 0-48
// (2026-12-03, against c129806, the runtime's asymmetric path): 14 was best or within 1 % of it
// at every M and set for all three variants -- 0 -> 14: 7B M = 32 / 64 +3-6 %, 70B +3-7 %,
// M = 256 +0-1 %, M = 1024 flat; 22-48 lose again at M <= 64 (runs that avoid every cut idle SMs).
constexpr int kStreamKHandoverStages = 14;
// Stream-K replaces the whole-tile grid only when the model has it this much cheaper: where it
// is within a few percent the measured result was worse (large M: CTAs on tiles far apart in
// the raster share less of A and W in L2), and the model does not see that.
constexpr double kStreamKMinGain = 0.95;
// Nor stream-K over M's own tiles where those run whole in one round and stream-K would save
// fewer stages per CTA than this (k_iters - share): its runs then cut nearly every tile, and
// those combines cost ~17-22 stages of 128 tokens, not the model's 4 -- 7B qkv at M = 256 (96
// tiles on 132 SMs) and 70B qkv at M = 384 (120 tiles) took ~17.5 us more than the whole tiles'
// loop x the fill. H200, stream-K forced on and off at M = 128-512 (2026-12-03, 6d279ab's kernel):
// whole tiles ran those two 10 % and 9 % faster (17 and 12 stages saved); every shape where
// stream-K saves more keeps it (70B down at M = 384: 122 stages). The other variant's stream-K
// stays a candidate: excluded too (64-token tiles that fill one round), the plan would move 7B
// qkv at M = 192 and 70B down at M = 256 to schedules measured 39-40 % and 17-28 % slower.
constexpr int kStreamKMinSavedStages = 20;

// Tokens per tile for M: 32 (n32 wgmma) up to M = 32, 64 up to 64, else 128.
inline int tile_rows(int M) { return M <= 32 ? 32 : M <= 64 ? 64 : 128; }
// Whether a variant can split k over a cluster (the one-consumer variants: 32 and 64 tokens;
// the 128-token variant has no shared memory left for a partial tile).
constexpr bool tile_splits(int rows) { return rows <= 64; }
// Relative time of one stage (64 k x 256 columns) of a variant: the weight stream (8 KB per stage
// per SM at the HBM's share of an SM) up to 32 tokens, the tensor cores above (n64 wgmma at
// ~60 % of peak, n128 at ~75 %).
inline double stage_cost(int rows) { return rows <= 32 ? 1.0 : rows <= 64 ? 1.6 : 2.5; }

// Row tiles whose CTAs run side by side (marlin_hopper.cu's tile_coords: row tiles fastest in
// groups of this many, so the CTAs running at once share rows of A and columns of W in L2).
constexpr int kRasterRows = 8;

struct Shape {
  int rows = 0;     // tokens per tile
  int n_tiles = 0;  // 256-column tiles (the last one half when N % 256 == 128)
  int tiles = 0;    // n_tiles x ceil(M / rows), in tile_coords' order (row tiles fastest, in
                    // groups of kRasterRows)
  int split = 1;    // CTAs per tile along k (a cluster of 2..8), 1: none
  int grid = 0;     // CTAs launched: clusters x split, each cluster walking tiles (persistent)
  // Stream-K: the grid's CTAs share the tiles' stages evenly, each a contiguous run of them
  // (stream_k_pieces) that may start and end inside a tile; a tile cut that way is summed from
  // its pieces' fp32 partials by the last piece to arrive (split is 1).
  bool stream_k = false;
  // Stream-K in row groups (stream_k_group): CTA r of each group of sk_group takes row tile r, and
  // the groups share the column tiles' stages, so a group's CTAs stream the same weights at the
  // same time (one DRAM read, the others L2 hits) as whole tiles do. 1: the tiles' stages end to end.
  int sk_group = 1;
  double cost = 0;  // the model's estimate, in stages of one CTA
};

// CTA `cta` of `grid`'s run of the stream-K schedule: the stages [*begin, *end) of the tiles'
// `units` stages laid end to end (tile t's stage k is t * k_iters + k), the first units % grid
// runs one stage longer. 32-bit arithmetic (plan_shape keeps units below kMaxStreamKUnits): a
// 64-bit division is a call on the GPU, and the combine runs it with the accumulators live.
constexpr int kMaxStreamKUnits = 1 << 30;
TL_HOPPER_HD inline void stream_k_range(int units, int grid, int cta, int* begin, int* end) {
  const int q = units / grid, r = units % grid;
  *begin = cta * q + (cta < r ? cta : r);
  *end = *begin + q + (cta < r ? 1 : 0);
}

// Stream-K's row group for m_tiles row tiles: all of them where they fit in one raster group
// (tile t = column tile x m_tiles + row tile, tile_coords' order), else 1. The row tiles of one
// column are then cut at the same stages, by CTAs that stream the same weights side by side, as
// whole tiles do; runs over the tiles' stages end to end put them ~k_iters stages apart in time.
// Measured on the H200 (2026-12-02, 4dc249c against 018c0fe): 1.5-4.6 % faster on stream-K layers
// with 4 or 8 row tiles (70B qkv at M = 1024: 258.1 -> 247.8 us with groups), 0-3 % with 2.
TL_HOPPER_HD inline int stream_k_group(int m_tiles) { return m_tiles <= kRasterRows ? m_tiles : 1; }
// The stages the row groups share out: their column tiles' (tiles / group columns x k_iters;
// plan_shape keeps it below kMaxStreamKUnits, so the kernel's int is enough).
TL_HOPPER_HD inline long long stream_k_units(int tiles, int k_iters, int group) {
  return (long long)(tiles / group) * k_iters;
}
// The longest run of `units` stages over `groups` groups (stream_k_range's lengths differ by one).
TL_HOPPER_HD inline long long stream_k_share(long long units, int groups) { return (units + groups - 1) / groups; }

// The groups' runs of a stream-K schedule: group g takes the column stages [begin[g],
// begin[g + 1]), every run non-empty, in order. Cut on the host (stream_k_cut, once per shape)
// and passed in the kernel's parameters, so that the producer, the consumers and the combine
// walk the same runs without re-deriving them.
constexpr int kMaxStreamKGroups = 256;
struct StreamKRuns {
  int groups = 0;
  int begin[kMaxStreamKGroups + 1] = {};
  TL_HOPPER_HD void range(int g, int* b, int* e) const {
    *b = begin[g];
    *e = begin[g + 1];
  }
  // The group whose run holds stage u (0 <= u < begin[groups]).
  TL_HOPPER_HD int holder(int u) const {
    int lo = 0, hi = groups - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (begin[mid] <= u)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  }
};

// The tiles (of k_iters stages) that the stages [b, e) touch, b < e.
inline long long stream_k_run_tiles(long long b, long long e, int k_iters) {
  return (e - 1) / k_iters - b / k_iters + 1;
}
// A run's cost in stages: its stages plus `handover` per tile boundary inside it. Between two
// pieces of a run the consumers stop before the next piece's first MMA: a cut first piece parks
// its fp32 sums and arrives on its tile's counter, a whole tile is stored.
inline long long stream_k_run_cost(long long b, long long e, int k_iters, int handover) {
  return (e - b) + (long long)handover * (stream_k_run_tiles(b, e, k_iters) - 1);
}
// Where a run from stage u ends when its cost may be at most `cap` (>= 1): as far as the cap
// allows. O(1): the first (maybe partial) tile, then whole tiles each followed by a hand-over
// into the next while at least one more stage fits, then the last piece.
inline long long stream_k_run_end(long long u, long long units, int k_iters, int handover, long long cap) {
  const long long k = k_iters, step = k + handover;
  const long long tile_end = std::min((u / k + 1) * k, units);
  if (cap <= tile_end - u) return u + cap;  // the cap runs out inside the first tile
  long long left = cap - (tile_end - u);
  if (tile_end == units || left <= handover) return tile_end;  // no hand-over and a stage more fit
  left -= handover;  // on into the next tile, from its start
  const long long n = std::min((left - 1) / step, (units - tile_end - 1) / k);  // whole tiles, each handed over
  const long long a = tile_end + n * k;
  return std::min(a + left - n * step, std::min(a + k, units));
}
// Runs from stage 0, each as long as a cost of at most `cap` (>= 1) allows -- the fewest runs
// under that cap. Their begins (and the end) into `begin` when it is not null; the number of
// runs, or max_runs + 1 as soon as more would be needed.
inline int stream_k_fill(long long units, int k_iters, int handover, long long cap, int max_runs, int* begin) {
  long long u = 0;
  int runs = 0;
  while (u < units) {
    if (runs == max_runs) return max_runs + 1;
    if (begin) begin[runs] = int(u);
    ++runs;
    u = stream_k_run_end(u, units, k_iters, handover, cap);
  }
  if (begin) begin[runs] = int(u);
  return runs;
}
// Stream-K's cut of `units` column stages (tiles of k_iters stages) into at most `groups` runs.
// handover 0: equal runs (stream_k_range, lengths within one). Otherwise the least cap on a run's
// cost (stream_k_run_cost) that `groups` runs meet, by bisection, and the fewest runs under it
// (the grid shrinks to them): a run that crosses a tile boundary is shorter by the hand-over, one
// that does not is longer, so that the CTAs end together instead of those with two pieces last;
// and a run whose cap runs out near a boundary ends on it, so fewer tiles are cut.
inline void stream_k_cut(long long units, int k_iters, int groups, int handover, StreamKRuns* runs) {
  groups = int(std::min<long long>(std::min(groups, kMaxStreamKGroups), units));
  if (handover <= 0) {
    for (int g = 0; g < groups; ++g) {
      int b = 0, e = 0;
      stream_k_range(int(units), groups, g, &b, &e);
      runs->begin[g] = b;
    }
    runs->begin[groups] = int(units);
    runs->groups = groups;
    return;
  }
  long long lo = (units + groups - 1) / groups;
  // The equal runs' largest cost is at most this (a run of lo stages crosses at most lo / k_iters
  // + 1 boundaries), so this cap is met.
  long long hi = lo + (long long)handover * (lo / k_iters + 1);
  while (lo < hi) {
    const long long mid = lo + (hi - lo) / 2;
    if (stream_k_fill(units, k_iters, handover, mid, groups, nullptr) <= groups)
      hi = mid;
    else
      lo = mid + 1;
  }
  runs->groups = stream_k_fill(units, k_iters, handover, lo, groups, runs->begin);
}
// Tiles one run touches at most (cut ones included).
inline int stream_k_tiles_per_run(const StreamKRuns& runs, int k_iters) {
  long long most = 0;
  for (int g = 0; g < runs.groups; ++g)
    most = std::max(most, stream_k_run_tiles(runs.begin[g], runs.begin[g + 1], k_iters));
  return int(most);
}

// The pieces (tile, stages [kb, ke)) of CTA `cta`'s stream-K run, in order: its group's run of the
// (tiles / group) x k_iters column stages (`runs`, over grid / group groups), cut at tile
// boundaries, on its row tile. The kernel's producer and consumers walk it (for_each_piece).
template <class F>
TL_HOPPER_HD inline void stream_k_pieces(int k_iters, int group, const StreamKRuns& runs, int cta, F&& f) {
  const int row = cta % group;
  int u = 0, end = 0;
  runs.range(cta / group, &u, &end);
  while (u < end) {
    const int column = u / k_iters, b = u % k_iters, e = b + (end - u) < k_iters ? b + (end - u) : k_iters;
    f(column * group + row, b, e);
    u += e - b;
  }
}

// The split's combine: rank r of `split` sums the quads of consumer threads
// [split_threads_begin(r), split_threads_begin(r + 1)) of every rank, so thread t pushes its
// partial to one rank, split_reader_rank(t) (per consumer warpgroup: the two k-interleaved
// consumers each hold half of the tile's blocks, thread t of both the same quads' slots); a
// share is at most split_max_share(split) threads.
constexpr int kConsumerThreads = 128;
TL_HOPPER_HD constexpr int split_threads_begin(int rank, int split) {
  return (kConsumerThreads * rank + split - 1) / split;
}
TL_HOPPER_HD constexpr int split_reader_rank(int thread, int split) { return thread * split / kConsumerThreads; }
TL_HOPPER_HD constexpr int split_max_share(int split) { return split_threads_begin(1, split); }
// The threads of rank r's share.
TL_HOPPER_HD constexpr int split_share(int rank, int split) {
  return split_threads_begin(rank + 1, split) - split_threads_begin(rank, split);
}
// The thread slots of a split's receive buffer: `split` shares padded to the largest one, at
// most kConsumerThreads + kMaxSplit - 1 for every split.
constexpr int kMaxSplitShareSlots = kConsumerThreads + kMaxSplit - 1;
constexpr bool split_shares_fit() {
  for (int split = 1; split <= kMaxSplit; ++split)
    if (split * split_max_share(split) > kMaxSplitShareSlots) return false;
  return true;
}
static_assert(split_shares_fit(), "every split's padded shares fit the receive buffer");

// Of M's own tile size (and for M > 64 also 64-token tiles, which can split), and splits 1 to 8
// (each CTA >= 4 stages; any cluster size, so 16 tiles can take 7 x 16 CTAs when 8 x 16 do not
// fit at once): the one whose rounds x (stages per CTA + combine) x stage cost is least, the
// fewer splits and larger tiles on a tie. Then stream-K over one CTA per SM (in row groups,
// stream_k_group: as many SMs as fit whole groups), whose cost is a CTA's share of its group's
// stages plus a combine per tile it adds partials of; it replaces the best
// only when clearly cheaper (kStreamKMinGain; it pays where tiles leave a last round
// part-empty or a split idles SMs: 80 tiles of 70B qkv at M = 256 on 132 SMs), and not over M's
// own tiles where those fill the SMs in one round (kStreamKMinSavedStages).
// fit(rows, split): how many clusters of `split` CTAs of that variant run at once (the SM count
// for split 1; 0: cannot run). forced_split (1..8): that split only (tests and tuning runs),
// 0: any. stream_k: 1 forces stream-K, -1 rules it out, 0: the cost decides.
template <class Fit>
Shape plan_shape(int M, int N, int K, Fit&& fit, int forced_split = 0, int stream_k = 0) {
  Shape best;
  const int n_tiles = (N + kTileN - 1) / kTileN, k_iters = K / kStageK;
  const int own = tile_rows(M);
  auto tiled = [&](int rows) {  // a shape of `rows`-token tiles, not yet scheduled
    Shape s;
    s.rows = rows;
    s.n_tiles = n_tiles;
    s.tiles = n_tiles * ((M + rows - 1) / rows);
    return s;
  };
  for (int rows : {own, 64}) {
    if (rows != own && (M <= 64 || !tile_splits(rows))) continue;
    for (int split = 1; split <= kMaxSplit; ++split) {
      if (forced_split > 0 && split != forced_split) continue;
      if (split > 1 && (!tile_splits(rows) || k_iters / split < kMinStagesPerSplit)) continue;
      const int clusters = fit(rows, split);
      if (clusters < 1) continue;
      Shape s = tiled(rows);
      s.split = split;
      const int running = std::min(s.tiles, clusters);
      s.grid = running * split;
      const int rounds = (s.tiles + running - 1) / running;
      s.cost = rounds * ((k_iters + split - 1) / split + (split > 1 ? kSplitCostStages : 0.0)) * stage_cost(rows);
      if (stream_k <= 0 && (best.grid == 0 || s.cost < best.cost)) best = s;
    }
  }
  if (stream_k < 0 || forced_split > 0) return best;
  Shape sk_best;
  for (int rows : {own, 64}) {
    if (rows != own && M <= 64) continue;
    const int sms = fit(rows, 1);
    if (sms < 1) continue;
    Shape s = tiled(rows);
    s.stream_k = true;
    s.sk_group = stream_k_group(s.tiles / n_tiles);
    const int groups_fit = sms / s.sk_group;
    const long long units = stream_k_units(s.tiles, k_iters, s.sk_group);
    if (groups_fit < 1 || units >= kMaxStreamKUnits) continue;
    const int groups = int(std::min<long long>(std::min(groups_fit, kMaxStreamKGroups), units));
    s.grid = groups * s.sk_group;
    const double share = double(stream_k_share(units, groups));
    if (stream_k <= 0 && rows == own && s.tiles <= sms && k_iters - share < kStreamKMinSavedStages) continue;
    // A cut tile is summed from the partials of the ~k_iters / share CTAs holding its pieces (at
    // least 2); a schedule that cuts no tile combines nothing.
    const bool cuts = units % groups != 0 || (units / groups) % k_iters != 0;
    const double combines = cuts ? std::max(1.0, k_iters / share) : 0.0;
    s.cost = (share + combines * stream_k_combine_stages(rows)) * stage_cost(rows);
    if (sk_best.grid == 0 || s.cost < sk_best.cost) sk_best = s;
  }
  if (sk_best.grid > 0 && (stream_k > 0 || best.grid == 0 || sk_best.cost < kStreamKMinGain * best.cost))
    return sk_best;
  return best;
}

// A launch's schedule: plan_shape's, and under stream-K the groups' runs cut by the hand-over
// (stream_k_cut; handover < 0: kStreamKHandoverStages), the grid shrunk to them.
struct Schedule {
  Shape shape;
  StreamKRuns runs;   // stream-K only
  int tiles_per_cta = 0;  // tiles one CTA walks at most (cut ones included)
};
template <class Fit>
Schedule plan_schedule(int M, int N, int K, Fit&& fit, int forced_split = 0, int stream_k = 0, int handover = -1) {
  Schedule s;
  s.shape = plan_shape(M, N, K, fit, forced_split, stream_k);
  Shape& h = s.shape;
  const int k_iters = K / kStageK;
  if (h.grid < 1) return s;
  if (!h.stream_k) {
    const int clusters = std::max(1, h.grid / h.split);
    s.tiles_per_cta = (h.tiles + clusters - 1) / clusters;
    return s;
  }
  stream_k_cut(stream_k_units(h.tiles, k_iters, h.sk_group), k_iters, h.grid / h.sk_group,
               handover >= 0 ? handover : kStreamKHandoverStages, &s.runs);
  h.grid = s.runs.groups * h.sk_group;
  s.tiles_per_cta = stream_k_tiles_per_run(s.runs, k_iters);
  return s;
}

}  // namespace tl::cuda::hopper
