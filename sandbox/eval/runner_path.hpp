// Where the server finds d2k-runner at run time (the trusted GPU harness it starts for every
// evaluation). The same lookup serves a build tree (build/bin/d2k beside build/bin/d2k-runner), an
// install (`cmake --install`: <prefix>/bin/d2k and <prefix>/libexec/d2k/d2k-runner) and the Python
// package (site-packages/d2k/bin/d2k, site-packages/d2k/libexec/d2k/d2k-runner), so a binary never
// depends on the absolute path of the folder it was built in.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace d2k::runner {

// Where the runner is looked for, in order:
//   1. `override_path` when not empty (EvalConfig.runner_path), else $D2K_RUNNER when set and not
//      empty: that file only, never a silent fallback;
//   2. beside the executable: <dir of exe>/d2k-runner;
//   3. the install layout: <dir of exe>/../libexec/d2k/d2k-runner;
//   4. the runner this library was built with (`built_with`, the build tree's absolute path).
struct RunnerSearch {
  std::filesystem::path found;                    // empty: none of `looked_at` is an executable file
  std::vector<std::filesystem::path> looked_at;   // every candidate, in order
  std::string error() const;                      // "d2k-runner not found (looked at: ...)"
};
RunnerSearch find_runner(const std::filesystem::path& override_path, const std::filesystem::path& exe,
                         const std::filesystem::path& built_with);

// find_runner for this process: /proc/self/exe and the runner built with d2k_eval. Throws
// std::runtime_error with RunnerSearch::error() when nothing is found.
std::filesystem::path locate_runner(const std::filesystem::path& override_path);

}  // namespace d2k::runner
