// core/progress.h: the one progress style. The ETA charges wall time to the kind of work that
// was reported (so a slow forward pass and fast GPTQ sweeps each get their own rate), lines go to
// the given stream, quiet prints nothing. A fake clock: nothing here waits or reads the time.
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/progress.h"

using tl::Progress;

namespace {
struct FakeClock {
  double t = 1000;
  std::function<double()> fn() {
    return [this] { return t; };
  }
};
}  // namespace

TEST_CASE("progress: the ETA counts every kind of work at its own rate") {
  std::ostringstream out;
  FakeClock clock;
  Progress p("tool", 10, 100, /*quiet=*/false, &out);  // kind 0: 10 items, 100 units
  p.set_clock(clock.fn());
  p.add_work(100, 0, /*kind=*/1);                        // kind 1: 100 units of forward work
  clock.t += 10;
  p.advance(50, 1);                                      // forward: 0.2 s per unit
  clock.t += 1;
  p.finished("w0", 10, 0);                               // sweeps: 0.1 s per unit
  // Left: 50 forward units x 0.2 + 90 sweep units x 0.1 = 19 s. One rate for everything (11 s
  // for 60 units) would say 140 x 11 / 60 = 26 s: the forward's cost would be lost.
  CHECK(out.str() == "[ 1/10] w0 | 0:11 elapsed, ETA 0:19\n");
  // Time since the last report counts as progress on what runs now.
  clock.t += 4;
  CHECK(p.eta() == ", ETA 0:15");
  // A kind not seen yet runs at the average rate of all work so far.
  p.add_work(10, 0, 2);
  CHECK(p.eta() == ", ETA 0:17");  // 19 + 10 x (11 / 60) = 20.8, minus the 4 s since: 16.8
  p.note("phase");
  CHECK(out.str().find("tool: phase\n") != std::string::npos);
}

TEST_CASE("progress: items without work count one each; quiet prints nothing") {
  std::ostringstream out;
  FakeClock clock;
  {
    Progress p("tool", 4, 0, false, &out);
    p.set_clock(clock.fn());
    clock.t += 3;
    p.finished("a");
    CHECK(out.str() == "[1/4] a | 0:03 elapsed, ETA 0:09\n");
    clock.t += 3;
    p.finished("b", 123);  // the work argument is ignored when counting items
    CHECK(out.str().find("[2/4] b | 0:06 elapsed, ETA 0:06\n") != std::string::npos);
  }
  std::ostringstream q;
  Progress p("tool", 2, 0, /*quiet=*/true, &q);
  p.finished("a");
  p.note("n");
  p.advance(1);
  CHECK(q.str().empty());
}

TEST_CASE("progress: format_duration") {
  CHECK(tl::format_duration(0) == "0:00");
  CHECK(tl::format_duration(59.6) == "1:00");
  CHECK(tl::format_duration(754) == "12:34");
  CHECK(tl::format_duration(3723) == "1:02:03");
}

TEST_CASE("progress: sparse lines without a terminal, every 10 % or 10 s and the last, in order") {
  std::ostringstream out;
  FakeClock clock;
  Progress p("tool", 256, 0, false, &out);  // a stream: no terminal
  p.set_clock(clock.fn());
  p.set_sparse(true);
  for (int i = 0; i < 256; ++i) {
    clock.t += 0.01;
    p.finished("e2e windows");
  }
  std::istringstream lines(out.str());
  std::vector<std::string> got;
  for (std::string l; std::getline(lines, l);) got.push_back(l.substr(0, l.find(']') + 1));
  // 25.6 items per tenth: lines at 26, 52, ..., 234 and the last, 256; counts rising.
  const std::vector<std::string> want = {"[ 26/256]", "[ 52/256]", "[ 78/256]", "[104/256]", "[130/256]",
                                         "[156/256]", "[182/256]", "[208/256]", "[234/256]", "[256/256]"};
  CHECK(got == want);
  // Slow items: the 10 s rule prints each one that takes longer.
  std::ostringstream slow;
  Progress q("tool", 1000, 0, false, &slow);
  q.set_clock(clock.fn());
  q.set_sparse(true);
  for (int i = 0; i < 3; ++i) {
    clock.t += 11;
    q.finished("batch");
  }
  const std::string text = slow.str();
  CHECK(std::count(text.begin(), text.end(), '\n') == 3);
}
