// core/fault_injection.h: the spellings of TL_FAULT_INJECT, and the refusal of anything else (a
// typo must not run a test that silently injects nothing).
#include <doctest/doctest.h>

#include <string>

#include "core/fault_injection.h"

using tl::FaultPlan;

TEST_CASE("fault plan: each spelling parses and prints back") {
  for (const std::string s : {"alloc:1", "launch:17", "trap:3", "count", "alloc:999999999999"}) {
    const FaultPlan p = tl::parse_fault_plan(s);
    CHECK(p.kind != FaultPlan::Kind::kNone);
    CHECK(tl::fault_plan_text(p) == s);
  }
  CHECK(tl::parse_fault_plan("launch:17").n == 17);
  CHECK(tl::parse_fault_plan("").kind == FaultPlan::Kind::kNone);
}

TEST_CASE("fault plan: anything else is an error naming the variable") {
  for (const std::string s : {"alloc:0", "alloc:", "alloc", "alloc:-1", "alloc:1x", "alloc: 1", "Alloc:1", "oom:1",
                              "count:1", "launch:1234567890123", "1"}) {
    CAPTURE(s);
    try {
      tl::parse_fault_plan(s);
      FAIL("accepted");
    } catch (const tl::Error& e) {
      CHECK(std::string(e.what()).find("TL_FAULT_INJECT: expected alloc:N") == 0);
    }
  }
}
