#include "tasks/loader/folder.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>

#include "tasks/loader/task.hpp"

namespace fs = std::filesystem;

namespace d2k::tasks {
namespace {

bool is_within(const fs::path& root, const fs::path& p) {
  auto r = root.begin();
  auto q = p.begin();
  for (; r != root.end(); ++r, ++q) {
    if (q == p.end() || *r != *q) return false;
  }
  return true;
}

// Resolves dir/relative and checks it stays inside dir (dir is canonical).
fs::path resolve_inside(const fs::path& dir, const fs::path& relative, const std::string& shown) {
  if (relative.is_absolute()) throw TaskError(shown, "", "absolute path not allowed");
  for (const auto& part : relative) {
    if (part == "..") throw TaskError(shown, "", "'..' not allowed in a task file path");
  }
  std::error_code ec;
  const fs::path target = fs::canonical(dir / relative, ec);
  if (ec) {
    if (fs::is_symlink(fs::symlink_status(dir / relative, ec))) {
      throw TaskError(shown, "", "dangling symlink");
    }
    throw TaskError(shown, "", "missing file");
  }
  if (!is_within(dir, target)) {
    throw TaskError(shown, "", "symlink points outside the task folder (to " + target.string() + ")");
  }
  return target;
}

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

TaskError::TaskError(std::string file_, std::string field_, const std::string& message)
    : std::runtime_error(file_ + (field_.empty() ? "" : ": " + field_) + ": " + message),
      file(std::move(file_)),
      field(std::move(field_)) {}

namespace detail {

std::string read_capped(const fs::path& resolved, const std::string& shown_as) {
  // O_NONBLOCK: opening a fifo must not hang the loader; fstat then refuses it.
  const Fd f(::open(resolved.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (f.fd < 0) throw TaskError(shown_as, "", std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw TaskError(shown_as, "", "cannot stat");
  if (!S_ISREG(st.st_mode)) throw TaskError(shown_as, "", "not a regular file");
  if (static_cast<std::uintmax_t>(st.st_size) > kMaxFileBytes) {
    throw TaskError(shown_as, "", "file larger than " + std::to_string(kMaxFileBytes) + " bytes");
  }
  std::string data;
  data.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::read(f.fd, data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw TaskError(shown_as, "", std::string("read failed: ") + std::strerror(errno));
    if (n == 0) break;  // shrank while reading
    got += static_cast<std::size_t>(n);
  }
  data.resize(got);
  return data;
}

std::vector<FolderFile> scan_folder(const fs::path& dir) {
  std::vector<FolderFile> files;
  std::uintmax_t total = 0;
  std::size_t entries = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  if (ec) throw TaskError(dir.string(), "", "cannot list folder: " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) throw TaskError(dir.string(), "", "cannot list folder: " + ec.message());
    if (++entries > kMaxFolderEntries) {
      throw TaskError(dir.string(), "", "more than " + std::to_string(kMaxFolderEntries) + " entries");
    }
    const fs::path& p = it->path();
    const std::string shown = p.string();
    const fs::file_status ls = it->symlink_status(ec);
    if (ec) throw TaskError(shown, "", "cannot stat: " + ec.message());
    if (fs::is_directory(ls)) {
      if (it.depth() >= 3) throw TaskError(shown, "", "folders nested too deep (max 4 levels)");
      continue;
    }
    fs::path resolved = p;
    if (fs::is_symlink(ls)) {
      resolved = resolve_inside(dir, p.lexically_relative(dir), shown);
      if (fs::is_directory(resolved)) throw TaskError(shown, "", "symlink to a folder not allowed");
    } else if (!fs::is_regular_file(ls)) {
      throw TaskError(shown, "", "not a regular file (fifo, socket or device)");
    }
    const std::uintmax_t size = fs::file_size(resolved, ec);
    if (ec) throw TaskError(shown, "", "cannot stat: " + ec.message());
    if (size > kMaxFileBytes) {
      throw TaskError(shown, "", "file larger than " + std::to_string(kMaxFileBytes) + " bytes");
    }
    total += size;
    if (total > kMaxFolderBytes) {
      throw TaskError(dir.string(), "", "folder larger than " + std::to_string(kMaxFolderBytes) + " bytes");
    }
    files.push_back({p.lexically_relative(dir).generic_string(), resolved});
  }
  std::sort(files.begin(), files.end(),
            [](const FolderFile& a, const FolderFile& b) { return a.relative < b.relative; });
  return files;
}

bool beside_task(std::string_view relative) {
  return relative == "RESULTS.md" || relative.substr(0, 6) == "bench/";
}

std::string content_hash(const std::vector<FolderFile>& files) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state || XXH3_128bits_reset(state.get()) != XXH_OK) throw std::bad_alloc();
  for (const FolderFile& f : files) {
    if (beside_task(f.relative)) continue;
    const std::string data = read_capped(f.resolved, f.relative);
    unsigned char size_le[8];
    std::uint64_t size = data.size();
    for (unsigned char& byte : size_le) {
      byte = static_cast<unsigned char>(size & 0xffu);
      size >>= 8;
    }
    XXH3_128bits_update(state.get(), f.relative.data(), f.relative.size());
    XXH3_128bits_update(state.get(), "", 1);
    XXH3_128bits_update(state.get(), size_le, sizeof size_le);
    XXH3_128bits_update(state.get(), data.data(), data.size());
  }
  const XXH128_hash_t h = XXH3_128bits_digest(state.get());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const std::uint64_t word : {h.high64, h.low64}) {
    for (int shift = 60; shift >= 0; shift -= 4) out += kHex[(word >> shift) & 0xfu];
  }
  return out;
}

}  // namespace detail

std::string read_task_file(const fs::path& dir, const fs::path& relative) {
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  const std::string shown = (dir / relative).string();
  if (ec) throw TaskError(dir.string(), "", "task folder not found");
  return detail::read_capped(resolve_inside(root, relative, shown), shown);
}

}  // namespace d2k::tasks
