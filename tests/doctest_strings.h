// Included before every test file of the doctest runners (tests/CMakeLists.txt, -include): a
// const char* in INFO / CAPTURE / a failed CHECK prints as its string (tier, fault and path
// names), not as its address, which is doctest's default for every pointer. (doctest's own
// switch for this, DOCTEST_CONFIG_TREAT_CHAR_STAR_AS_STRING, does not compile in the Debian
// package's version.)
#pragma once

#include <ostream>

// A runner's main (the one file that defines DOCTEST_CONFIG_IMPLEMENT[_WITH_MAIN]; tests/CMakeLists.txt
// passes its choice as TL_DOCTEST_IMPLEMENT / TL_DOCTEST_IMPLEMENT_WITH_MAIN) gets the
// implementation from this first include of doctest.
#if defined(TL_DOCTEST_IMPLEMENT_WITH_MAIN)
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#elif defined(TL_DOCTEST_IMPLEMENT)
#define DOCTEST_CONFIG_IMPLEMENT
#endif
#include <doctest/doctest.h>

namespace doctest::detail {
template <>
struct filldata<const char*> {
  static void fill(std::ostream* stream, const char* in) { *stream << (in ? in : "(null)"); }
};
template <>
struct filldata<char*> {
  static void fill(std::ostream* stream, const char* in) { *stream << (in ? in : "(null)"); }
};
}  // namespace doctest::detail
