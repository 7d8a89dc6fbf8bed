// Private to the loader: safe access to the files of one task folder.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace d2k::tasks::detail {

struct FolderFile {
  std::string relative;            // generic form, '/' separated, e.g. "experts/L1.cu"
  std::filesystem::path resolved;  // canonical path inside the folder
};

// Every regular file of the (canonical) task folder, sorted by relative path. Throws TaskError
// for a symlink that leaves the folder or names a directory, a special file (fifo, device,
// socket), a file over kMaxFileBytes, or a folder over kMaxFolderEntries / kMaxFolderBytes.
std::vector<FolderFile> scan_folder(const std::filesystem::path& dir);

// Files a task folder holds beside the task itself: its latest verification report (RESULTS.md,
// written by `d2k verify-tasks`) and its kernel workbench (bench/...). They are scanned like every
// file (limits, symlinks) but are not part of the task: content_hash skips them, so a new
// verification run or a workbench edit leaves the hash recorded in episodes and calibrations as it is.
bool beside_task(std::string_view relative);

// xxh3-128 over, for each file in order except those beside_task: relative path, '\0', size as
// 8 little-endian bytes, content. Hex, 32 characters.
std::string content_hash(const std::vector<FolderFile>& files);

// Reads one regular file (no symlink in its last component), at most kMaxFileBytes.
std::string read_capped(const std::filesystem::path& resolved, const std::string& shown_as);

}  // namespace d2k::tasks::detail
