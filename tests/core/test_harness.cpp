// The test harness itself: what every runner's failure messages print.
#include <doctest/doctest.h>

TEST_CASE("harness: a const char* in INFO / CAPTURE prints its string, not its address") {
  const char* tier = "wrapper";
  char buf[] = "one-tile";
  char* fault = buf;
  CHECK(doctest::toString(tier) == doctest::String("wrapper"));
  CHECK(doctest::toString(fault) == doctest::String("one-tile"));
  const char* none = nullptr;
  CHECK(doctest::toString(none) == doctest::String("(null)"));
}
