#include <unistd.h>

#include <cstdlib>

#include "env/cli/commands.hpp"

namespace d2k::cli {

std::filesystem::path self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path("d2k") : p;
}

std::filesystem::path default_tasks_dir() {
  if (const char* env = std::getenv("D2K_TASKS"); env && *env) return env;
  std::filesystem::path source = D2K_SOURCE_TASKS_DIR;
  if (std::filesystem::is_directory(source)) return source;
  return self_exe().parent_path().parent_path() / "share" / "d2k" / "tasks";
}

}  // namespace d2k::cli
