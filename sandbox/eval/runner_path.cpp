#include "sandbox/eval/runner_path.hpp"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace d2k::runner {
namespace fs = std::filesystem;

namespace {

bool executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

std::string RunnerSearch::error() const {
  std::string s = "d2k-runner not found (looked at: ";
  for (std::size_t i = 0; i < looked_at.size(); ++i) s += (i ? ", " : "") + looked_at[i].string();
  return s + ")";
}

RunnerSearch find_runner(const fs::path& override_path, const fs::path& exe, const fs::path& built_with) {
  RunnerSearch search;
  fs::path explicit_path = override_path;
  if (explicit_path.empty()) {
    if (const char* env = std::getenv("D2K_RUNNER"); env != nullptr && *env != '\0') explicit_path = env;
  }
  if (!explicit_path.empty()) {  // asked for by name: that one or an error
    search.looked_at.push_back(explicit_path);
    if (executable_file(explicit_path)) search.found = explicit_path;
    return search;
  }
  if (!exe.empty()) {
    const fs::path dir = exe.parent_path();
    search.looked_at.push_back(dir / "d2k-runner");
    search.looked_at.push_back((dir.parent_path() / "libexec" / "d2k" / "d2k-runner").lexically_normal());
  }
  if (!built_with.empty()) search.looked_at.push_back(built_with);
  for (const auto& p : search.looked_at) {
    if (executable_file(p)) {
      search.found = p;
      break;
    }
  }
  return search;
}

fs::path locate_runner(const fs::path& override_path) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const RunnerSearch search = find_runner(override_path, ec ? fs::path() : exe, D2K_RUNNER_PATH);
  if (search.found.empty()) throw std::runtime_error(search.error());
  return search.found;
}

}  // namespace d2k::runner
