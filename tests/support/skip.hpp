// Skipping a test case that cannot run here (no GPU): say why, and let CTest show the test as
// skipped rather than passed. main() (tests/support/main.cpp) exits with kSkipExitCode when every
// test case that ran in the binary skipped; tests/CMakeLists.txt registers that code as CTest's
// SKIP_RETURN_CODE. A binary in which at least one test case ran for real reports its result.
#pragma once

#include <string_view>

namespace d2k::test {

inline constexpr int kSkipExitCode = 77;

// Prints "SKIP <why>" and marks the current test case as skipped; the caller then returns.
void skip(std::string_view why);

}  // namespace d2k::test
