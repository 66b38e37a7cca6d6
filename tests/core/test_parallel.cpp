// core/parallel.h: the pieces cover [0, n) exactly once, and the first-index search returns the
// lowest match wherever the threads find theirs.
#include <doctest/doctest.h>

#include <atomic>
#include <vector>

#include "core/parallel.h"

TEST_CASE("parallel_chunks: every index once, in pieces of the given size") {
  const int64_t n = 1000003;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int64_t> pieces{0}, longest{0};
  tl::parallel_chunks(n, 4096, [&](int64_t i0, int64_t i1) {
    ++pieces;
    int64_t len = i1 - i0, cur = longest.load();
    while (len > cur && !longest.compare_exchange_weak(cur, len)) {
    }
    for (int64_t i = i0; i < i1; ++i) ++hits[size_t(i)];
  });
  bool once = true;
  for (const auto& h : hits) once = once && h.load() == 1;
  CHECK(once);
  CHECK(pieces.load() == (n + 4095) / 4096);
  CHECK(longest.load() == 4096);
  tl::parallel_chunks(0, 16, [&](int64_t, int64_t) { FAIL("no piece for n = 0"); });
}

TEST_CASE("parallel_find_first: the lowest matching index, or -1") {
  const int64_t n = int64_t(5) << 18;  // five pieces of the search
  for (int64_t first : {int64_t(0), int64_t(7), (int64_t(1) << 18) - 1, int64_t(3) << 18, n - 1}) {
    CAPTURE(first);
    // Matches at `first` and in every later piece: a thread that starts later but finds its
    // match sooner must not win.
    auto bad = [&](int64_t i) { return i == first || (i > first && i % (int64_t(1) << 18) == 5); };
    CHECK(tl::parallel_find_first(n, bad) == first);
  }
  CHECK(tl::parallel_find_first(n, [](int64_t) { return false; }) == -1);
  CHECK(tl::parallel_find_first(0, [](int64_t) { return true; }) == -1);
}
