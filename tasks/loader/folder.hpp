// Private to the loader: safe access to the files of one task folder.
#pragma once

#include <filesystem>
#include <string>
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

// xxh3-128 over, for each file in order: relative path, '\0', size as 8 little-endian bytes,
// content. Hex, 32 characters.
std::string content_hash(const std::vector<FolderFile>& files);

// Reads one regular file (no symlink in its last component), at most kMaxFileBytes.
std::string read_capped(const std::filesystem::path& resolved, const std::string& shown_as);

}  // namespace d2k::tasks::detail
