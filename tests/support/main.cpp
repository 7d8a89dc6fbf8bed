// The test binaries' main: Catch2's session, plus the skip rule of skip.hpp (exit kSkipExitCode
// when every test case that ran skipped, so CTest reports the test as skipped, not passed).
#include "skip.hpp"

#include <cstdio>
#include <string>

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
namespace Catch {
using TestEventListenerBase = EventListenerBase;  // Catch2 v3's name
}
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

namespace {

int g_cases = 0;            // test cases started
int g_skipped_cases = 0;    // of which called skip()
bool g_current_skipped = false;

struct SkipCounter : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    TestEventListenerBase::testCaseStarting(info);
    ++g_cases;
    g_current_skipped = false;
  }
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    if (g_current_skipped) ++g_skipped_cases;
    TestEventListenerBase::testCaseEnded(stats);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipCounter)

namespace d2k::test {

void skip(std::string_view why) {
  std::printf("SKIP %.*s\n", static_cast<int>(why.size()), why.data());
  std::fflush(stdout);
  g_current_skipped = true;
}

}  // namespace d2k::test

int main(int argc, char* argv[]) {
  const int rc = Catch::Session().run(argc, argv);
  if (rc == 0 && g_cases > 0 && g_skipped_cases == g_cases) {
    std::printf("every test case skipped (%d): exit %d, reported as skipped by CTest\n", g_cases,
                d2k::test::kSkipExitCode);
    return d2k::test::kSkipExitCode;
  }
  return rc;
}
