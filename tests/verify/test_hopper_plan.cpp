// The Hopper kernel's work split (cuda/marlin_hopper_plan.h), plain host C++: the kernel and the
// tiers' CPU emulation run the same arithmetic, so its invariants are checked here, on the CPU,
// over whole ranges rather than samples.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "cuda/marlin_hopper_plan.h"

using namespace tl::cuda::hopper;

TEST_CASE("stream-K runs partition the stages in order, lengths within one, and stream_k_cta inverts them") {
  // Units: fewer than, equal to, one past and many times the grid, a 7B / 70B layer's count, and
  // the largest the plan allows.
  const std::vector<int> unit_counts = {1, 7, 131, 132, 133, 264, 1000, 3072, 5504, 28672, kMaxStreamKUnits - 1};
  for (int grid : {1, 2, 3, 7, 96, 128, 131, 132, 133, 264})
    for (int units : unit_counts) {
      if (units < grid) continue;  // the plan launches min(SMs, units) CTAs
      CAPTURE(grid);
      CAPTURE(units);
      int expect_begin = 0, shortest = units, longest = 0;
      bool inverse_ok = true;
      for (int cta = 0; cta < grid; ++cta) {
        int b = -1, e = -1;
        stream_k_range(units, grid, cta, &b, &e);
        REQUIRE(b == expect_begin);  // contiguous, in CTA order, nothing skipped
        REQUIRE(e > b);              // every CTA has work
        shortest = std::min(shortest, e - b);
        longest = std::max(longest, e - b);
        // The CTA holding a stage: its run's ends (all stages where the range is small).
        for (int u : {b, e - 1, b + (e - b) / 2}) inverse_ok = inverse_ok && stream_k_cta(units, grid, u) == cta;
        expect_begin = e;
      }
      CHECK(expect_begin == units);
      CHECK(longest - shortest <= 1);
      CHECK(inverse_ok);
    }
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
