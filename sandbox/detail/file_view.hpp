// The jail's file view as data: an ordered list of operations the child replays under the new
// root before pivot_root. Planned in the parent (allocation allowed), replayed in the child
// (no allocation). Exposed for tests.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "sandbox/jail.hpp"

namespace d2k::sandbox::detail {

struct ViewOp {
  enum Kind {
    make_dir,      // mkdir target (mode 0755)
    make_file,     // create an empty file as a bind target
    bind_ro,       // bind source (recursively) read-only, nosuid, nodev
    bind_rw,       // bind source read-write, nosuid, nodev
    bind_dev,      // bind a device node (nosuid, noexec)
    tmpfs,         // fresh tmpfs; data = mount options
    proc,          // fresh procfs (the jail's pid namespace)
    make_symlink,  // target → source (symlink text)
    mask_dir,      // a hidden directory: mask_path (empty read-only tmpfs)
    mask_file,     // a hidden file: mask_path (/dev/null, read-only)
  } kind;
  std::string source;  // host path or symlink text
  std::string target;  // absolute path under the new root (root prefix included)
  std::string data;
};

const char* to_string(ViewOp::Kind kind);

// The view for `spec` under `root` (a directory the child mounts a tmpfs on). Throws
// std::runtime_error for a bad mount (relative target, missing source, ".." in a target).
std::vector<ViewOp> plan_file_view(const JailSpec& spec, const std::filesystem::path& root);

}  // namespace d2k::sandbox::detail
