// The doctest main of the test_convert runner (one runner per library, sources globbed from
// tests/convert/*.cpp; exactly one file of the runner may define the main).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
