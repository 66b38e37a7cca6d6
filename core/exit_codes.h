// Exit codes shared by every tinyloop binary. A CI gate reads these.
#pragma once

namespace tl::exit_code {
constexpr int kOk = 0;            // everything that ran passed
constexpr int kVerifyFailed = 1;  // a verification tier failed
constexpr int kGateFailed = 1;    // a requirement the user asked for was not met (marlin-pack
                                  // --require-all: a weight stayed unpacked); nothing written
constexpr int kBadInput = 2;      // usage error, bad input file, I/O error
constexpr int kSkipped = 77;      // everything requested was skipped (CTest SKIP_RETURN_CODE)
}  // namespace tl::exit_code
