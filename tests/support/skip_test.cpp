// The skip rule of skip.hpp: a binary whose every test case skipped exits 77 (CTest: skipped); one
// in which any test case ran for real reports its own result. Run by tests/CMakeLists.txt with
// tag filters and the exit code checked.
#include "catch.hpp"
#include "skip.hpp"

TEST_CASE("skips like a GPU test on a machine without a GPU", "[skips]") {
  d2k::test::skip("support_skip_test: nothing to run here");
}

TEST_CASE("runs for real", "[runs]") { CHECK(1 + 1 == 2); }
