// The one thread pool idiom of the project: run fn(0..n-1) on up to `threads` threads (the
// caller is one of them), items handed out in increasing order. The first exception stops
// handing out new items and is rethrown once every thread has returned.
//
// Work items must not depend on which thread runs them: callers split work into pieces of a
// fixed size (column chunks, weight indices), never into one piece per thread, so results are
// the same for every thread count.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tl {

// `threads` <= 0 means all cores.
inline int resolve_threads(int threads) {
  return threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
}

template <class Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  if (n <= 0) return;
  const int t = int(std::min<int64_t>(std::max(1, threads), n));
  if (t == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr first;
  std::mutex mu;
  auto worker = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
        next.store(n);
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(t - 1));
  for (int w = 1; w < t; ++w) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace tl
