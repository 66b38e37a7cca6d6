// The one progress style of every tool (gptq-quantize, marlin-pack, tl-verify's tiers and e2e
// tier, tl-inspect --check). On stderr (or the stream a test passes):
//
//   [ 3/15] pre.0.mlp_up 512x2048 gs=128 loss=... | 0:04 elapsed, ETA 0:17
//   gptq-quantize: pre.1: forward with the original weights, Hessians ...
//
// one line per finished item, with the time since the start and an ETA weighted by each item's
// work (the caller's unit: FLOPs, bytes, windows; items of unknown work count 1), and note()
// lines for phases. Work comes in kinds (gptq-quantize: 0 = the GPTQ sweeps, 1 = the forward
// passes of calibration), each with its own rate: the wall time between two reports is charged
// to the kind of the later one (so parallel workers are not counted twice), and the ETA is the
// sum over kinds of remaining work x that kind's seconds per unit (a kind not yet seen runs at
// the average rate). A phase with nothing to print per item reports with advance(). On a terminal a live bar -- "[#####.....] 3/15 ETA 0:17 pre.1.attn_qkv" --
// is redrawn below the lines; elsewhere (a pipe, a log file, CI) only plain lines appear. quiet:
// nothing at all. sparse (set_sparse; runs of hundreds of like items, the e2e tier's windows):
// without a terminal, a line only every 10 % of the items or 10 s, and for the last item. The
// "[i/n]" count is taken under the lock, so the lines come in order under threads. Thread-safe:
// workers may report concurrently.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <ostream>
#include <string>

#include <unistd.h>

namespace tl {

// "0:07", "12:34", "1:02:03".
inline std::string format_duration(double seconds) {
  char b[32];
  const long t = long(seconds + 0.5);
  if (t >= 3600) std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(b, sizeof b, "%ld:%02ld", t / 60, t % 60);
  return b;
}

class Progress {
 public:
  static constexpr int kKinds = 4;
  // tool: the prefix of note() lines ("gptq-quantize"); out: null for std::cerr. total_items
  // and total_work: what finishes the run (total_work 0: count items), of kind 0.
  Progress(std::string tool, size_t total_items, double total_work, bool quiet, std::ostream* out = nullptr)
      : tool_(std::move(tool)), out_(out ? out : &std::cerr), total_(total_items), by_items_(total_work <= 0),
        quiet_(quiet), tty_(out == nullptr && isatty(2) != 0), t0_(now()), last_(t0_), printed_at_(t0_) {
    kinds_[0].total = total_work > 0 ? total_work : double(total_items);
  }
  ~Progress() { end(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // More work than planned (a phase whose size is known only now).
  void add_work(double work, size_t items = 0, int kind = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    kinds_[slot(kind)].total += work;
    total_ += items;
  }
  // The item now running (shown in the live bar only).
  void started(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = what;
    if (!quiet_ && tty_) redraw();
  }
  // Lines only every kSparseFraction of the items or kSparseSeconds (and the last), without a
  // terminal; on one, every line as before.
  static constexpr double kSparseFraction = 0.1, kSparseSeconds = 10;
  void set_sparse(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    sparse_ = on;
  }
  // One item finished: "[ i/n] line | elapsed, ETA".
  void finished(const std::string& line, double work = 1, int kind = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    charge(kind, by_items_ && kind == 0 ? 1 : work);
    if (quiet_) return;
    if (sparse_ && !tty_) {
      const double t = now();
      const bool due = done_ >= total_ || double(done_ - printed_done_) >= kSparseFraction * double(total_) ||
                       t - printed_at_ >= kSparseSeconds;
      if (!due) return;
      printed_done_ = done_;
      printed_at_ = t;
    }
    clear();
    const int w = int(std::to_string(total_).size());
    char head[48];
    std::snprintf(head, sizeof head, "[%*zu/%zu] ", w, done_, total_);
    *out_ << head << line << " | " << format_duration(elapsed()) << " elapsed" << eta_text() << "\n" << std::flush;
    redraw();
  }
  // Work done that has no line of its own (a forward pass); the live bar moves.
  void advance(double work, int kind = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    charge(kind, work);
    if (!quiet_ && tty_) {
      clear();
      redraw();
    }
  }
  // A phase or an event: "tool: message".
  void note(const std::string& message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (quiet_) return;
    clear();
    *out_ << tool_ << ": " << message << "\n" << std::flush;
    redraw();
  }
  // "ETA 0:17" text of now ("" when nothing is known or left), for a caller's own lines.
  std::string eta() {
    std::lock_guard<std::mutex> lock(mu_);
    return eta_text();
  }
  void end() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!quiet_) clear();
  }
  double elapsed() const { return now() - t0_; }
  // Tests replace the clock (seconds, monotonic) to check the ETA without waiting.
  void set_clock(std::function<double()> clock) {
    std::lock_guard<std::mutex> lock(mu_);
    const double shift = clock() - now();
    clock_ = std::move(clock);
    t0_ += shift;
    last_ += shift;
    printed_at_ += shift;
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Kind {
    double total = 0, done = 0, seconds = 0;
  };
  static int slot(int kind) { return kind < 0 ? 0 : kind >= kKinds ? kKinds - 1 : kind; }
  double now() const {
    return clock_ ? clock_() : std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  }
  void charge(int kind, double work) {
    const double t = now();
    Kind& k = kinds_[slot(kind)];
    k.done += work;
    k.seconds += t - last_;
    last_ = t;
  }
  double remaining_seconds() const {
    double done = 0, secs = 0;
    for (const Kind& k : kinds_) done += k.done, secs += k.seconds;
    if (done <= 0) return -1;
    const double avg = secs / done;
    double left = 0;
    for (const Kind& k : kinds_)
      if (k.total > k.done) left += (k.total - k.done) * (k.done > 0 ? k.seconds / k.done : avg);
    return left;
  }
  std::string eta_text() const {
    const double left = remaining_seconds();
    if (left <= 0) return "";
    // Time since the last report counts as progress on the current phase.
    const double since = now() - last_;
    return ", ETA " + format_duration(std::max(0.0, left - since));
  }
  double fraction() const {
    double done = 0, total = 0;
    for (const Kind& k : kinds_) done += std::min(k.done, k.total), total += k.total;
    return total > 0 ? done / total : 0;
  }
  void clear() {
    if (tty_ && bar_shown_) {
      *out_ << "\r\033[K" << std::flush;
      bar_shown_ = false;
    }
  }
  void redraw() {
    if (!tty_ || done_ >= total_) return;
    constexpr int kWidth = 30;
    const int fill = int(fraction() * kWidth);
    const std::string eta = eta_text();
    *out_ << "[" << std::string(size_t(fill), '#') << std::string(size_t(kWidth - fill), '.') << "] " << done_ << "/"
          << total_ << (eta.empty() ? " ETA -" : eta) << " " << current_ << std::flush;
    bar_shown_ = true;
  }

  std::string tool_;
  std::ostream* out_;
  size_t total_, done_ = 0;
  Kind kinds_[kKinds];
  bool by_items_, quiet_, tty_, bar_shown_ = false, sparse_ = false;
  size_t printed_done_ = 0;
  std::string current_;
  std::function<double()> clock_;
  double t0_, last_, printed_at_;
  std::mutex mu_;
};

}  // namespace tl
