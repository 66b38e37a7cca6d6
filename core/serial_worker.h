// A serial background worker: tasks run on one thread of their own, in the order posted.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace tl {

// One background thread that runs tasks in the order they are posted, at most `depth` of them
// waiting (post() blocks until there is room): gptq-quantize writes a weight while the GPU works
// on the next ones, without holding more than `depth` results in host memory. The first task to
// throw stops the rest (they are dropped); its exception is rethrown by the next post() or by
// finish(). The destructor drops what has not run and joins, so an unwinding caller never waits
// for work it is abandoning.
class SerialWorker {
 public:
  explicit SerialWorker(size_t depth) : depth_(std::max<size_t>(1, depth)), thread_([this] { loop(); }) {}
  ~SerialWorker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      tasks_.clear();
    }
    cv_.notify_all();
    thread_.join();
  }
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  void post(std::function<void()> task) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return tasks_.size() < depth_ || error_; });
    if (error_) std::rethrow_exception(error_);
    tasks_.push_back(std::move(task));
    cv_.notify_all();
  }
  // Every posted task has run (or one threw: rethrown here).
  void finish() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return (tasks_.empty() && !busy_) || error_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      busy_ = true;
      cv_.notify_all();  // room for a waiting post()
      lock.unlock();
      std::exception_ptr e;
      try {
        task();
      } catch (...) {
        e = std::current_exception();
      }
      lock.lock();
      busy_ = false;
      if (e && !error_) {
        error_ = e;
        tasks_.clear();
      }
      cv_.notify_all();
    }
  }

  const size_t depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace tl
