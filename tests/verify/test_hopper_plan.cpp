// The Hopper kernel's work split (cuda/marlin_hopper_plan.h), plain host C++: the kernel and the
// tiers' CPU emulation run the same arithmetic, so its invariants are checked here, on the CPU,
// over whole ranges rather than samples.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "cuda/marlin_hopper_plan.h"

using namespace tl::cuda::hopper;

TEST_CASE("stream-K runs partition the stages in order, and holder() inverts them") {
  // Units: fewer than, equal to, one past and many times the grid, a 7B / 70B layer's count, and
  // the largest the plan allows; tiles of 1 to 448 stages; equal runs (hand-over 0) and runs cut
  // by a hand-over cost.
  const std::vector<int> unit_counts = {1, 7, 131, 132, 133, 264, 1000, 3072, 5504, 28672, kMaxStreamKUnits - 1};
  for (int grid : {1, 2, 3, 7, 96, 128, 131, 132, 133, 264})
    for (int units : unit_counts)
      for (int k_iters : {1, 4, 64, 172, 448})
        for (int handover : {0, 1, 5, 9, 30}) {
          if (units < grid) continue;  // the plan launches min(SMs, units) CTAs
          if (handover > 0 && units / k_iters > (1 << 20)) continue;  // the cut walks every tile
          CAPTURE(grid);
          CAPTURE(units);
          CAPTURE(k_iters);
          CAPTURE(handover);
          StreamKRuns runs;
          stream_k_cut(units, k_iters, grid, handover, &runs);
          const int groups = std::min(grid, kMaxStreamKGroups);
          REQUIRE(runs.groups >= 1);
          REQUIRE(runs.groups <= groups);
          REQUIRE(runs.begin[0] == 0);
          REQUIRE(runs.begin[runs.groups] == units);  // contiguous, in order, nothing skipped
          int shortest = units, longest = 0;
          long long worst = 0;
          bool inverse_ok = true;
          for (int g = 0; g < runs.groups; ++g) {
            int b = -1, e = -1;
            runs.range(g, &b, &e);
            REQUIRE(e > b);  // every run has work
            shortest = std::min(shortest, e - b);
            longest = std::max(longest, e - b);
            worst = std::max(worst, stream_k_run_cost(b, e, k_iters, handover));
            // The group holding a stage: its run's ends and middle.
            for (int u : {b, e - 1, b + (e - b) / 2}) inverse_ok = inverse_ok && runs.holder(u) == g;
          }
          CHECK(inverse_ok);
          // The equal runs' largest cost under the same model: a cut is never worse than them, and
          // no smaller cap is met by `groups` runs (the cut's cap is the least).
          long long equal_worst = 0;
          for (int g = 0; g < groups; ++g) {
            int b = 0, e = 0;
            stream_k_range(units, groups, g, &b, &e);
            equal_worst = std::max(equal_worst, stream_k_run_cost(b, e, k_iters, handover));
          }
          if (handover == 0) {
            CHECK(runs.groups == groups);
            CHECK(longest - shortest <= 1);
          } else {
            CHECK(worst <= equal_worst);
            if (worst > 1) CHECK(stream_k_fill(units, k_iters, handover, worst - 1, groups, nullptr) > groups);
          }
        }
}

TEST_CASE("stream-K cut by the hand-over: the 7B qkv runs at M = 32 / 64 end together, fewer tiles cut") {
  // 48 tiles of 64 stages on 132 SMs: equal runs of 23-24 stages leave 36 runs crossing a tile
  // boundary, each with a hand-over more than the others; cut by it, the largest cost falls.
  const int units = 48 * 64, k_iters = 64, handover = 14;
  StreamKRuns equal, cut;
  stream_k_cut(units, k_iters, 132, 0, &equal);
  stream_k_cut(units, k_iters, 132, handover, &cut);
  auto worst = [&](const StreamKRuns& r) {
    long long w = 0;
    for (int g = 0; g < r.groups; ++g) w = std::max(w, stream_k_run_cost(r.begin[g], r.begin[g + 1], k_iters, handover));
    return w;
  };
  auto cut_tiles = [&](const StreamKRuns& r) {  // tiles with a run boundary strictly inside
    int n = 0;
    for (int g = 1; g < r.groups; ++g) n += r.begin[g] % k_iters != 0;
    return n;
  };
  CHECK(worst(equal) == 24 + handover);
  CHECK(worst(cut) == 28);  // the least cap that 132 runs meet (128 of them are used)
  CHECK(cut_tiles(cut) < cut_tiles(equal));
}

TEST_CASE("the split's combine: every consumer thread's partial is summed by exactly the rank that owns it") {
  for (int split = 1; split <= kMaxSplit; ++split) {
    CAPTURE(split);
    CHECK(split_threads_begin(0, split) == 0);
    CHECK(split_threads_begin(split, split) == kConsumerThreads);
    int total = 0;
    for (int r = 0; r < split; ++r) {
      const int b = split_threads_begin(r, split), e = split_threads_begin(r + 1, split);
      CHECK(e - b >= kConsumerThreads / split);  // ranges balanced to within one thread
      CHECK(e - b <= kConsumerThreads / split + 1);
      for (int t = b; t < e; ++t) CHECK(split_reader_rank(t, split) == r);  // the one arrival goes here
      total += e - b;
    }
    CHECK(total == kConsumerThreads);
  }
}

TEST_CASE("stream-K in row groups: every stage of every tile once, a column's row tiles cut alike, side by side") {
  // Shapes as plan_shape schedules them (its grid, its group): 1..8 row tiles (one group of all
  // of them) and 9 (groups of 1: the stages end to end), column tiles fewer than, about and many
  // times the SMs, k ranges of 1, 4, 64 and 172 stages.
  for (int m_tiles : {1, 2, 3, 5, 8, 9})
    for (int n_tiles : {1, 3, 48, 86, 224})
      for (int k_iters : {1, 4, 64, 172})
        for (int handover : {0, 9}) {
        const int tiles = m_tiles * n_tiles;
        const Schedule sched = plan_schedule(m_tiles * 128, n_tiles * kTileN, k_iters * kStageK,
                                             [](int, int split) { return 132 / split; }, 0, 1, handover);
        const Shape& s = sched.shape;
        const StreamKRuns& runs = sched.runs;
        if (s.rows != 128) continue;  // forced stream-K of M's own tiles (128 rows above 64 tokens)
        CAPTURE(m_tiles);
        CAPTURE(n_tiles);
        CAPTURE(k_iters);
        REQUIRE(s.stream_k);
        REQUIRE(s.sk_group == stream_k_group(m_tiles));
        CHECK(s.sk_group == (m_tiles <= kRasterRows ? m_tiles : 1));
        REQUIRE(s.grid % s.sk_group == 0);
        REQUIRE(s.grid <= 132);
        CAPTURE(handover);
        REQUIRE(s.grid == runs.groups * s.sk_group);
        std::vector<int> covered(size_t(tiles) * k_iters, 0);
        // Per tile, the CTAs holding its pieces in k order.
        std::vector<std::vector<int>> holders(tiles);
        std::vector<std::vector<std::pair<int, int>>> cuts(tiles);
        for (int cta = 0; cta < s.grid; ++cta)
          stream_k_pieces(k_iters, s.sk_group, runs, cta, [&](int tile, int kb, int ke) {
            REQUIRE(tile >= 0);
            REQUIRE(tile < tiles);
            REQUIRE(kb < ke);
            REQUIRE(ke <= k_iters);
            if (s.sk_group > 1) CHECK(tile % m_tiles == cta % s.sk_group);  // the CTA's row tile
            for (int k = kb; k < ke; ++k) ++covered[size_t(tile) * k_iters + k];
            holders[tile].push_back(cta);
            cuts[tile].push_back({kb, ke});
          });
        CHECK(std::count(covered.begin(), covered.end(), 1) == (long)covered.size());
        for (int t = 0; t < tiles; ++t) {
          // The pieces come in k order, held by the groups holder() names, on t's row.
          for (size_t i = 1; i < cuts[t].size(); ++i) CHECK(cuts[t][i].first == cuts[t][i - 1].second);
          const int first = (t / s.sk_group) * k_iters;
          const int g0 = runs.holder(first), g1 = runs.holder(first + k_iters - 1);
          REQUIRE(int(holders[t].size()) == g1 - g0 + 1);
          for (int g = g0; g <= g1; ++g) CHECK(holders[t][g - g0] == g * s.sk_group + t % s.sk_group);
          // Row tiles of one column: cut at the same stages (their CTAs stream the same weights).
          if (s.sk_group > 1 && t % m_tiles) CHECK(cuts[t] == cuts[t - t % m_tiles]);
        }
      }
}

TEST_CASE("stream-K never replaces M's own whole tiles that fill the SMs in one round (kStreamKMinSavedStages)") {
  // Every column-tile count to two rounds, 1-4 row tiles of 128 tokens and the 7B / 70B k ranges:
  // where the whole tiles fit one round and stream-K's share saves fewer than the bound, the plan
  // is not stream-K over 128-token tiles; forced, it still is; and the two shapes measured on the
  // H200 (2026-12-03, issue 18's plan rule, 93818d2) go each way.
  const auto fit = [](int, int split) { return 132 / split; };
  int excluded = 0, kept = 0;
  for (int m_tiles = 1; m_tiles <= 4; ++m_tiles)
    for (int n_tiles = 1; n_tiles <= 264; ++n_tiles)
      for (int k_iters : {64, 128, 172, 448}) {
        const int M = 128 * m_tiles, N = n_tiles * kTileN, K = k_iters * kStageK, tiles = m_tiles * n_tiles;
        CAPTURE(M);
        CAPTURE(N);
        CAPTURE(K);
        const Shape s = plan_shape(M, N, K, fit);
        const Shape forced = plan_shape(M, N, K, fit, 0, 1);
        REQUIRE(forced.stream_k);
        // Stream-K over the 128-token tiles, as plan_shape would lay it out.
        const int group = stream_k_group(m_tiles);
        const long long units = stream_k_units(tiles, k_iters, group);
        const long long share = stream_k_share(units, int(std::min<long long>(132 / group, units)));
        if (tiles <= 132 && k_iters - share < kStreamKMinSavedStages) {
          CHECK_FALSE((s.stream_k && s.rows == 128));
          ++excluded;
        } else if (s.stream_k) {
          ++kept;
        }
      }
  CHECK(excluded > 0);
  CHECK(kept > 0);
  CHECK_FALSE(plan_shape(256, 12288, 4096, fit).stream_k);  // 7B qkv, M = 256: 96 whole tiles
  CHECK(plan_shape(384, 8192, 28672, fit).stream_k);        // 70B down, M = 384: 96 tiles, 448 stages
}
