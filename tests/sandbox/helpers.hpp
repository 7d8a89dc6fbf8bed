// Shared by the sandbox tests: temporary directories and jail specs for /bin/sh and the probe.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "sandbox/jail.hpp"

namespace d2k::sandbox::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "d2k-sbx-test-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& rel, const std::string& content) const {
    auto p = path_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

 private:
  std::filesystem::path path_;
};

inline JailSpec shell(const std::string& script) {
  JailSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = {{"PATH", "/usr/bin:/bin"}};
  spec.deadline = std::chrono::seconds(20);
  return spec;
}

// The probe binary (tests/sandbox/probe.cpp), mounted read-only at /probe.
inline JailSpec probe(std::initializer_list<std::string> args) {
  const std::filesystem::path exe = D2K_SANDBOX_PROBE;
  JailSpec spec;
  spec.argv = {"/probe/" + exe.filename().string()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.mounts.push_back({exe.parent_path(), "/probe", false});
  spec.deadline = std::chrono::seconds(20);
  return spec;
}

}  // namespace d2k::sandbox::testing
