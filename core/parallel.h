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

namespace detail {
inline thread_local bool t_in_parallel_worker = false;
}  // namespace detail

// True on a thread while it runs items of a parallel_for of two or more threads, or of one that
// was asked for one thread: a caller that would split its own work over every core (the CPU
// forward's linears) runs it inline instead of starting threads^2 of them, or more than asked.
inline bool in_parallel_worker() { return detail::t_in_parallel_worker; }

// `threads` <= 0 means all cores.
inline int resolve_threads(int threads) {
  return threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
}

template <class Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  if (n <= 0) return;
  const int t = int(std::min<int64_t>(std::max(1, threads), n));
  if (t == 1) {
    const bool was = detail::t_in_parallel_worker;
    if (threads <= 1) detail::t_in_parallel_worker = true;
    try {
      for (int64_t i = 0; i < n; ++i) fn(i);
    } catch (...) {
      detail::t_in_parallel_worker = was;
      throw;
    }
    detail::t_in_parallel_worker = was;
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr first;
  std::mutex mu;
  auto worker = [&] {
    const bool was = detail::t_in_parallel_worker;
    detail::t_in_parallel_worker = true;
    for (int64_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
        next.store(n);
      }
    }
    detail::t_in_parallel_worker = was;
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(t - 1));
  for (int w = 1; w < t; ++w) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (first) std::rethrow_exception(first);
}

// fn(i0, i1) over [0, n) in pieces of `chunk` items (the last one shorter), on every core: the
// element-wise conversions of the loaders (a multi-GB checkpoint is tens of GB of fp32).
template <class Fn>
void parallel_chunks(int64_t n, int64_t chunk, Fn&& fn) {
  const int64_t c = std::max<int64_t>(1, chunk), pieces = (n + c - 1) / c;
  parallel_for(pieces, resolve_threads(0), [&](int64_t p) { fn(p * c, std::min(n, (p + 1) * c)); });
}

// The first index in [0, n) where bad(i) holds, or -1: pieces on every core, the lowest found.
template <class Pred>
int64_t parallel_find_first(int64_t n, Pred&& bad) {
  constexpr int64_t kChunk = int64_t(1) << 18;
  std::atomic<int64_t> first{-1};
  parallel_chunks(n, kChunk, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      if (bad(i)) {
        int64_t cur = first.load();
        while ((cur < 0 || i < cur) && !first.compare_exchange_weak(cur, i)) {
        }
        return;
      }
  });
  return first.load();
}

}  // namespace tl
