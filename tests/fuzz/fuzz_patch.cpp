// libFuzzer harness for the unified-diff code (env/patch.cpp). Built only with -DD2K_FUZZ=ON and
// clang (tests/fuzz/README.md).
//
// Input: NUL-separated segments. Segment 0 is a diff; segments 1..3 are the files kernel.cu, a.cuh
// and d/b.h before it, segments 4..6 the same files "after" (a segment starting with '!' means the
// file does not exist). Checked, beyond "no crash, no sanitizer report, no exception other than
// PatchError":
//  - apply_unified_diff(before, diff), when it applies, gives a file set that make_unified_diff
//    reproduces: apply(before, make(before, result)) == result;
//  - for any two file sets, apply(before, make(before, after)) == after (the documented round trip),
//    and make(x, x) is empty.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "env/patch.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_patch: property violated: %s\n", what);
  std::abort();
}

constexpr const char* kPaths[3] = {"kernel.cu", "a.cuh", "d/b.h"};

d2k::FileMap files_from(const std::vector<std::string_view>& seg, std::size_t first) {
  d2k::FileMap files;
  for (std::size_t i = 0; i < 3; ++i) {
    if (first + i >= seg.size()) break;
    std::string_view s = seg[first + i];
    if (!s.empty() && s.front() == '!') continue;
    files[kPaths[i]] = std::string(s);
  }
  return files;
}

void round_trip(const d2k::FileMap& before, const d2k::FileMap& after, const char* what) {
  const std::string diff = d2k::make_unified_diff(before, after);
  if (before == after) {
    if (!diff.empty()) fail("make_unified_diff(x, x) is not empty");
    return;
  }
  d2k::FileMap back;
  try {
    back = d2k::apply_unified_diff(before, diff);
  } catch (const d2k::PatchError& e) {
    std::fprintf(stderr, "fuzz_patch: %s: the made diff does not apply: %s\n--- diff ---\n%s\n", what, e.what(),
                 diff.c_str());
    std::abort();
  }
  if (back != after) {
    std::fprintf(stderr, "fuzz_patch: %s: apply(before, make(before, after)) != after\n--- diff ---\n%s\n", what,
                 diff.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> seg;
  std::size_t start = 0;
  while (seg.size() < 7) {
    std::size_t nul = in.find('\0', start);
    seg.push_back(in.substr(start, nul == std::string_view::npos ? std::string_view::npos : nul - start));
    if (nul == std::string_view::npos) break;
    start = nul + 1;
  }
  const d2k::FileMap before = files_from(seg, 1);

  try {
    const d2k::FileMap result = d2k::apply_unified_diff(before, seg[0]);
    round_trip(before, result, "applied diff");
  } catch (const d2k::PatchError&) {
  }
  if (seg.size() > 4) round_trip(before, files_from(seg, 4), "two file sets");
  return 0;
}
