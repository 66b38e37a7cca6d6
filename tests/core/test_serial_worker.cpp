// core/serial_worker.h: tasks run in the order posted, on one thread other than the poster's,
// never more than `depth` waiting; the first failure is rethrown to the poster and drops the
// rest.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/serial_worker.h"

TEST_CASE("serial worker: posting order, another thread, at most depth waiting") {
  const std::thread::id poster = std::this_thread::get_id();
  std::vector<int> order;
  std::atomic<int> queued{0}, max_queued{0};
  std::atomic<bool> off_thread{true};
  {
    tl::SerialWorker w(2);
    for (int i = 0; i < 50; ++i) {
      const int now = ++queued;  // posted, not yet finished
      int cur = max_queued.load();
      while (now > cur && !max_queued.compare_exchange_weak(cur, now)) {
      }
      w.post([&, i] {
        if (std::this_thread::get_id() == poster) off_thread = false;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        order.push_back(i);  // one thread: no lock needed
        --queued;
      });
    }
    w.finish();
  }
  REQUIRE(order.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(order[size_t(i)] == i);
  CHECK(off_thread);
  // Counted before post() returns: the waiting ones (<= 2), the running one and the one posting.
  CHECK(max_queued.load() <= 4);
}

TEST_CASE("serial worker: the first failure reaches the poster; later tasks do not run") {
  std::atomic<int> ran{0};
  tl::SerialWorker w(1);
  w.post([&] {
    ++ran;
    throw std::runtime_error("disk full");
  });
  bool thrown = false;
  try {
    for (int i = 0; i < 100; ++i) w.post([&] { ++ran; });
    w.finish();
  } catch (const std::runtime_error& e) {
    thrown = std::string(e.what()) == "disk full";
  }
  CHECK(thrown);
  CHECK_THROWS_AS(w.finish(), std::runtime_error);  // and again: the error stays
  CHECK(ran.load() <= 2);  // the failing task, and at most one posted before it failed
}
