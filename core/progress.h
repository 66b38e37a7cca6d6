// The one progress style of every tool (gptq-quantize, marlin-pack, tl-verify's tiers and e2e
// tier, tl-inspect --check). On stderr (or the stream a test passes):
//
//   [ 3/15] pre.0.mlp_up 512x2048 gs=128 loss=... | 0:04 elapsed, ETA 0:17
//   gptq-quantize: pre.1: forward with the original weights, Hessians ...
//
// one line per finished item, with the time since the start and an ETA weighted by each item's
// work (the caller's unit: FLOPs, bytes, windows; items of unknown work count 1), and note()
// lines for phases. On a terminal a live bar -- "[#####.....] 3/15 ETA 0:17 pre.1.attn_qkv" --
// is redrawn below the lines; elsewhere (a pipe, a log file, CI) only plain lines appear. quiet:
// nothing at all. Thread-safe: workers may report concurrently.
#pragma once

#include <chrono>
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
  // tool: the prefix of note() lines ("gptq-quantize"); out: null for std::cerr. total_items
  // and total_work: what finishes the run (total_work 0: count items).
  Progress(std::string tool, size_t total_items, double total_work, bool quiet, std::ostream* out = nullptr)
      : tool_(std::move(tool)), out_(out ? out : &std::cerr), total_(total_items),
        total_work_(total_work > 0 ? total_work : double(total_items)), by_items_(total_work <= 0),
        quiet_(quiet), tty_(out == nullptr && isatty(2) != 0), t0_(Clock::now()) {}
  ~Progress() { end(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // More work than planned (a phase whose size is known only now).
  void add_work(double work, size_t items = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    total_work_ += work;
    total_ += items;
  }
  // The item now running (shown in the live bar only).
  void started(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = what;
    if (!quiet_ && tty_) redraw();
  }
  // One item finished: "[ i/n] line | elapsed, ETA".
  void finished(const std::string& line, double work = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    done_work_ += by_items_ ? 1 : work;
    if (quiet_) return;
    clear();
    const int w = int(std::to_string(total_).size());
    char head[48];
    std::snprintf(head, sizeof head, "[%*zu/%zu] ", w, done_, total_);
    *out_ << head << line << " | " << format_duration(elapsed()) << " elapsed" << eta_text() << "\n" << std::flush;
    redraw();
  }
  // A phase or an event: "tool: message".
  void note(const std::string& message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (quiet_) return;
    clear();
    *out_ << tool_ << ": " << message << "\n" << std::flush;
    redraw();
  }
  void end() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!quiet_) clear();
  }
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  std::string eta_text() const {
    if (done_work_ <= 0 || done_work_ >= total_work_) return "";
    return ", ETA " + format_duration(elapsed() * (total_work_ - done_work_) / done_work_);
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
    const double frac = total_work_ > 0 ? done_work_ / total_work_ : 0;
    const int fill = int(frac * kWidth);
    *out_ << "[" << std::string(size_t(fill), '#') << std::string(size_t(kWidth - fill), '.') << "] " << done_ << "/"
          << total_ << (done_work_ > 0 ? eta_text() : " ETA -") << " " << current_ << std::flush;
    bar_shown_ = true;
  }

  std::string tool_;
  std::ostream* out_;
  size_t total_, done_ = 0;
  double total_work_, done_work_ = 0;
  bool by_items_, quiet_, tty_, bar_shown_ = false;
  std::string current_;
  Clock::time_point t0_;
  std::mutex mu_;
};

}  // namespace tl
