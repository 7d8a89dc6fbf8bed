#include "env/patch.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace d2k {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// Lines of a file, each keeping its '\n' (the last one may have none).
std::vector<std::string_view> split_keep(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start < s.size()) {
    std::size_t nl = s.find('\n', start);
    std::size_t end = nl == std::string_view::npos ? s.size() : nl + 1;
    out.push_back(s.substr(start, end - start));
    start = end;
  }
  return out;
}

// A line for a message: without its '\n', cut to 80 bytes, quoted.
std::string show(std::string_view line) {
  bool newline = !line.empty() && line.back() == '\n';
  if (newline) line.remove_suffix(1);
  std::string out = "\"" + std::string(line.substr(0, 80)) + (line.size() > 80 ? "...\"" : "\"");
  if (!newline) out += " (no newline at end of file)";
  return out;
}

struct HunkLine {
  char kind;         // ' ', '-', '+'
  std::string_view text;  // into the diff; with '\n' unless "\ No newline at end of file" followed it
};

struct Hunk {
  std::size_t old_start = 0, old_count = 0, new_start = 0, new_count = 0;
  std::string header;  // "@@ -a,b +c,d @@", for messages
  std::vector<HunkLine> lines;
};

struct FilePatch {
  std::string old_path, new_path;
  bool old_null = false, new_null = false;  // /dev/null (or an epoch timestamp, as `diff -N` writes)
  std::vector<Hunk> hunks;
};

// The work one apply_unified_diff may do, in units of about one short line comparison (a line of
// 64 bytes more costs one more unit) or one line split and copied: it bounds the time one patch
// holds the server loop, whatever the diff (issue 22.6). Placing a hunk costs O(its old lines +
// the distance it is moved), so honest diffs stay far below it; a diff over it is refused.
class WorkBudget {
 public:
  explicit WorkBudget(std::size_t units) : left_(units), limit_(units) {}
  // `what` names the work for the message: "the diff" or a file's path.
  void charge(std::size_t units, const std::string& what) {
    if (units > left_)
      throw PatchError("'" + what + "': applying this diff needs more than " + std::to_string(limit_) +
                       " units of work, a patch's limit (a unit: a line of the diff, a line of a file read, a "
                       "line comparison while placing a hunk); give each hunk's exact line numbers, or send "
                       "a smaller patch");
    left_ -= units;
  }

 private:
  std::size_t left_, limit_;
};

constexpr std::size_t kPatchWorkUnits = 300'000;

// Reads the file sections of a unified diff; text outside them (a commit message, "diff --git",
// "index" lines) is skipped, as patch(1) and git apply do.
class DiffReader {
 public:
  // Hunks keep views into the diff: the reader must outlive what read() returns. Each line of the
  // diff costs one unit of `budget`, charged before anything is parsed.
  DiffReader(std::string_view diff, WorkBudget& budget) {
    if (!diff.empty() && diff.back() != '\n') {
      owned_ = std::string(diff) + '\n';
      diff = owned_;
    }
    budget.charge(static_cast<std::size_t>(std::count(diff.begin(), diff.end(), '\n')), "the diff");
    std::size_t start = 0;
    while (start < diff.size()) {
      std::size_t nl = diff.find('\n', start);
      std::size_t end = nl == std::string_view::npos ? diff.size() : nl;
      lines_.push_back(diff.substr(start, end - start));
      start = end + 1;
    }
  }

  std::vector<FilePatch> read() {
    std::vector<FilePatch> files;
    constexpr std::size_t kNone = static_cast<std::size_t>(-1);
    std::size_t git_header = kNone;  // a "diff --git" line not yet followed by ---/+++
    auto check_git_header = [&] {
      if (git_header != kNone)
        throw PatchError("line " + std::to_string(git_header + 1) + " of the diff: a 'diff --git' section without "
                         "---/+++ lines (a mode change, rename or empty file) is not supported");
    };
    while (pos_ < lines_.size()) {
      std::string_view line = lines_[pos_];
      if (is_file_header(pos_)) {
        git_header = kNone;
        files.push_back(read_file());
        continue;
      }
      if (starts_with(line, "@@")) fail_line("a hunk (@@) outside a file section; each file needs '--- ' and '+++ ' lines first");
      if (starts_with(line, "Binary files ") || starts_with(line, "GIT binary patch"))
        fail_line("binary diffs are not supported");
      if (starts_with(line, "rename from ") || starts_with(line, "rename to ") || starts_with(line, "copy from ") ||
          starts_with(line, "copy to "))
        fail_line("renames and copies are not supported; create the new file and delete the old one instead");
      // A git extended header that sets a mode: a symbolic link (120000) or a mode change. Applied
      // as a plain edit it would silently make a regular file of a link (issue 22.10).
      if ((starts_with(line, "new file mode ") || starts_with(line, "deleted file mode ")) &&
          line.find("120000") != std::string_view::npos)
        fail_line("symbolic links (mode 120000) are not supported; a workspace holds regular files only");
      if (starts_with(line, "old mode ") || starts_with(line, "new mode "))
        fail_line("mode changes are not supported; a workspace holds regular files only");
      if (starts_with(line, "diff --git ")) {
        check_git_header();
        git_header = pos_;
      }
      ++pos_;
    }
    check_git_header();
    if (files.empty())
      throw PatchError("no file sections found: a unified diff needs '--- a/FILE' and '+++ b/FILE' lines, then @@ hunks");
    return files;
  }

 private:
  [[noreturn]] void fail_line(const std::string& why) const {
    throw PatchError("line " + std::to_string(pos_ + 1) + " of the diff: " + why);
  }

  bool is_file_header(std::size_t i) const {
    return i + 1 < lines_.size() && starts_with(lines_[i], "--- ") && starts_with(lines_[i + 1], "+++ ");
  }

  // "--- a/kernel.cu\t2024-01-01 ..." → path, and whether it stands for "no file".
  static std::pair<std::string, bool> header_path(std::string_view line) {
    std::string_view rest = line.substr(4);
    std::string_view stamp;
    if (std::size_t tab = rest.find('\t'); tab != std::string_view::npos) {
      stamp = rest.substr(tab + 1);
      rest = rest.substr(0, tab);
    }
    while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\r')) rest.remove_suffix(1);
    bool epoch = starts_with(stamp, "1970-01-01 00:00:00") || starts_with(stamp, "1969-12-31 ");
    return {std::string(rest), rest == "/dev/null" || epoch};
  }

  FilePatch read_file() {
    FilePatch fp;
    auto [old_path, old_null] = header_path(lines_[pos_]);
    auto [new_path, new_null] = header_path(lines_[pos_ + 1]);
    // git's a/ and b/ prefixes go when both sides carry them (or are /dev/null).
    bool old_prefixed = old_path == "/dev/null" || starts_with(old_path, "a/");
    bool new_prefixed = new_path == "/dev/null" || starts_with(new_path, "b/");
    if (old_prefixed && new_prefixed) {
      if (starts_with(old_path, "a/")) old_path.erase(0, 2);
      if (starts_with(new_path, "b/")) new_path.erase(0, 2);
      // git names one file on both sides; two names there are a rename (issue 22.10).
      if (!old_null && !new_null && old_path != new_path)
        fail_line("the header renames '" + old_path + "' to '" + new_path +
                  "'; renames are not supported: create the new file and delete the old one instead");
    }
    fp.old_path = old_path;
    fp.new_path = new_path;
    fp.old_null = old_null;
    fp.new_null = new_null;
    if (old_null && new_null) fail_line("both sides of the file header are /dev/null");
    pos_ += 2;
    while (pos_ < lines_.size() && starts_with(lines_[pos_], "@@")) fp.hunks.push_back(read_hunk(fp));
    if (fp.hunks.empty() && !old_null && !new_null)
      throw PatchError("'" + fp.new_path + "': no hunks (@@ lines) after its ---/+++ lines");
    return fp;
  }

  static bool parse_number(std::string_view& s, std::size_t& out) {
    std::size_t n = 0, digits = 0;
    while (!s.empty() && s.front() >= '0' && s.front() <= '9') {
      if (++digits > 9) return false;
      n = n * 10 + static_cast<std::size_t>(s.front() - '0');
      s.remove_prefix(1);
    }
    out = n;
    return digits > 0;
  }

  static bool parse_range(std::string_view& s, char sign, std::size_t& start, std::size_t& count) {
    if (s.empty() || s.front() != sign) return false;
    s.remove_prefix(1);
    if (!parse_number(s, start)) return false;
    count = 1;
    if (!s.empty() && s.front() == ',') {
      s.remove_prefix(1);
      if (!parse_number(s, count)) return false;
    }
    return true;
  }

  Hunk read_hunk(const FilePatch& fp) {
    Hunk h;
    std::string_view line = lines_[pos_];
    std::string_view s = line.substr(2);
    bool ok = starts_with(s, " ");
    if (ok) s.remove_prefix(1);
    ok = ok && parse_range(s, '-', h.old_start, h.old_count) && starts_with(s, " ");
    if (ok) s.remove_prefix(1);
    ok = ok && parse_range(s, '+', h.new_start, h.new_count) && starts_with(s, " @@");
    if (!ok) fail_line("malformed hunk header \"" + std::string(line.substr(0, 80)) + "\"; expected \"@@ -L,N +L,N @@\"");
    if (h.old_start == 0 && h.old_count > 0) fail_line("hunk header says old lines start at line 0");
    h.header = std::string(line.substr(0, line.size() - s.size() + 3));
    auto where = [&] {
      return "'" + (fp.new_null ? fp.old_path : fp.new_path) + "', hunk " + h.header + " at line " +
             std::to_string(pos_ + 1) + " of the diff: ";
    };
    auto counts = [&](std::size_t o, std::size_t n) {
      return "its header says " + std::to_string(h.old_count) + " old and " + std::to_string(h.new_count) +
             " new lines, the body has " + std::to_string(o) + " and " + std::to_string(n);
    };
    ++pos_;
    std::size_t old_seen = 0, new_seen = 0;
    auto mark_no_newline = [&] {
      if (h.lines.empty() || h.lines.back().text.empty() || h.lines.back().text.back() != '\n')
        throw PatchError(where() + "a '\\ No newline at end of file' line that follows no line");
      h.lines.back().text.remove_suffix(1);
      ++pos_;
    };
    while (old_seen < h.old_count || new_seen < h.new_count) {
      if (pos_ >= lines_.size())
        throw PatchError(where() + "the diff ends inside the hunk: " + counts(old_seen, new_seen));
      std::string_view l = lines_[pos_];
      char kind = l.empty() ? ' ' : l.front();  // an empty line is a context line that lost its space
      if (kind == '\\') {
        mark_no_newline();
        continue;
      }
      bool fits = (kind == ' ' && old_seen < h.old_count && new_seen < h.new_count) ||
                  (kind == '-' && old_seen < h.old_count) || (kind == '+' && new_seen < h.new_count);
      if (kind != ' ' && kind != '-' && kind != '+')
        throw PatchError(where() + "the hunk ends early at \"" + std::string(l.substr(0, 60)) + "\": " +
                         counts(old_seen, new_seen));
      if (!fits) {
        throw PatchError(where() + "more '" + std::string(1, kind) + "' lines than the header allows: " +
                         counts(old_seen + (kind != '+'), new_seen + (kind != '-')) + " or more");
      }
      if (kind != '+') ++old_seen;
      if (kind != '-') ++new_seen;
      // The line without its kind, with the '\n' that follows it in the diff (the reader's text
      // always ends in one): no copy per line.
      std::string_view text = l.empty() ? std::string_view(l.data(), 1) : std::string_view(l.data() + 1, l.size());
      h.lines.push_back({kind, text});
      ++pos_;
    }
    if (pos_ < lines_.size() && starts_with(lines_[pos_], "\\")) mark_no_newline();
    if (pos_ < lines_.size()) {
      std::string_view l = lines_[pos_];
      bool more = !l.empty() && (l.front() == ' ' || (l.front() == '+' && !starts_with(l, "+++ ")) ||
                                 (l.front() == '-' && !is_file_header(pos_)));
      if (more)
        throw PatchError(where() + "the hunk has more lines than its header says (" + counts(old_seen, new_seen) +
                         " before \"" + std::string(l.substr(0, 60)) + "\"); fix the @@ counts");
    }
    return h;
  }

  std::string owned_;  // the diff with a final '\n' added, when it lacked one
  std::vector<std::string_view> lines_;
  std::size_t pos_ = 0;
};


// Applies the hunks of one file to its content. A hunk is placed at its stated line when its old
// lines match there, else at the nearest line (after the previous hunk) where they all match; ties
// go to the line above, as patch(1) does.
class HunkApplier {
 public:
  HunkApplier(std::string path, std::string_view content, WorkBudget& budget)
      : path_(std::move(path)), lines_(split_keep(content)), budget_(budget) {
    budget_.charge(lines_.size() + content.size() / 64, path_);  // the split, and the copy into the result
  }

  std::string apply(const std::vector<Hunk>& hunks) {
    std::string out;
    std::size_t cursor = 0;  // first line of the original not yet copied
    for (std::size_t k = 0; k < hunks.size(); ++k) {
      const Hunk& h = hunks[k];
      std::vector<std::string_view> old_lines;
      for (const auto& l : h.lines)
        if (l.kind != '+') old_lines.push_back(l.text);
      std::size_t stated = h.old_count == 0 ? h.old_start : h.old_start - 1;
      std::size_t at = locate(h, k, old_lines, stated, cursor);
      for (std::size_t i = cursor; i < at; ++i) out += lines_[i];
      for (const auto& l : h.lines)
        if (l.kind != '-') out += l.text;
      cursor = at + old_lines.size();
    }
    for (std::size_t i = cursor; i < lines_.size(); ++i) out += lines_[i];
    return out;
  }

 private:
  std::string where(const Hunk& h, std::size_t k) const {
    return "'" + path_ + "', hunk " + std::to_string(k + 1) + " (" + h.header + "): ";
  }

  // Line equality, charged to the budget by its cost.
  bool same(std::string_view a, std::string_view b) {
    budget_.charge(1 + (a.size() == b.size() ? a.size() / 64 : 0), path_);
    return a == b;
  }

  bool matches(const std::vector<std::string_view>& old_lines, std::size_t at) {
    if (at + old_lines.size() > lines_.size()) return false;
    for (std::size_t i = 0; i < old_lines.size(); ++i)
      if (!same(lines_[at + i], old_lines[i])) return false;
    return true;
  }

  // Knuth-Morris-Pratt over lines: fail[j] = the length of the longest proper prefix of pat[0..j]
  // that is also its suffix.
  std::vector<std::size_t> failure(const std::vector<std::string_view>& pat) {
    std::vector<std::size_t> fail(pat.size(), 0);
    for (std::size_t j = 1, q = 0; j < pat.size(); ++j) {
      while (q > 0 && !same(pat[j], pat[q])) q = fail[q - 1];
      if (same(pat[j], pat[q])) ++q;
      fail[j] = q;
    }
    return fail;
  }

  // One direction of the search: feeds text lines one at a time to a KMP matcher.
  struct Scan {
    const std::vector<std::string_view>* pat;
    std::vector<std::size_t> fail;
    std::size_t q = 0;
  };
  bool feed(Scan& s, std::string_view line) {
    const auto& pat = *s.pat;
    while (s.q > 0 && !same(line, pat[s.q])) s.q = s.fail[s.q - 1];
    if (same(line, pat[s.q])) ++s.q;
    if (s.q < pat.size()) return false;
    s.q = s.fail[s.q - 1];
    return true;
  }

  // The window start in [lo, hi] nearest to `start` (start itself excluded) where `pat` matches; the
  // two directions advance in lockstep, so the cost is O(m + distance) comparisons, not O(m * distance).
  std::optional<std::size_t> nearest(const std::vector<std::string_view>& pat, std::size_t start, std::size_t lo,
                                     std::size_t hi) {
    const std::size_t m = pat.size();
    std::vector<std::string_view> rpat(pat.rbegin(), pat.rend());
    Scan down{&rpat, failure(rpat)}, up{&pat, failure(pat)};
    // Upward windows start at start-1, start-2, ... ≥ lo: their lines are read from start+m-2 down to lo.
    // Downward windows start at start+1, ... ≤ hi: their lines are read from start+1 up to hi+m-1.
    bool down_active = start > lo, up_active = start < hi;
    std::size_t t_down = start + m - 2, t_up = start + 1;
    while (down_active || up_active) {
      if (down_active) {  // first, so that of two matches at the same distance the one above wins
        if (feed(down, lines_[t_down])) return t_down;
        down_active = t_down > lo;
        --t_down;
      }
      if (up_active) {
        if (feed(up, lines_[t_up])) return t_up + 1 - m;
        up_active = t_up < hi + m - 1;
        ++t_up;
      }
    }
    return std::nullopt;
  }

  std::size_t locate(const Hunk& h, std::size_t k, const std::vector<std::string_view>& old_lines, std::size_t stated,
                     std::size_t cursor) {
    if (old_lines.empty()) {  // a pure insertion has nothing to match: it goes where it says
      if (stated < cursor || stated > lines_.size())
        throw PatchError(where(h, k) + "inserts after line " + std::to_string(stated) + ", but the file has " +
                         std::to_string(lines_.size()) + " lines" +
                         (stated < cursor ? " and the previous hunk ends after line " + std::to_string(cursor) : ""));
      return stated;
    }
    if (lines_.size() >= old_lines.size() && cursor <= lines_.size() - old_lines.size()) {
      const std::size_t lo = cursor, hi = lines_.size() - old_lines.size();
      const std::size_t start = std::clamp(stated, lo, hi);
      if (matches(old_lines, start)) return start;
      if (auto at = nearest(old_lines, start, lo, hi)) return *at;
    }
    throw PatchError(where(h, k) + "does not apply: " + mismatch(old_lines, std::max(stated, cursor)));
  }

  std::string mismatch(const std::vector<std::string_view>& old_lines, std::size_t at) const {
    for (std::size_t i = 0; i < old_lines.size(); ++i) {
      if (at + i >= lines_.size())
        return "the file has only " + std::to_string(lines_.size()) + " lines, the hunk expects " + show(old_lines[i]) +
               " as line " + std::to_string(at + i + 1) + ", and its old lines occur nowhere else after the previous hunk";
      if (lines_[at + i] != old_lines[i])
        return "line " + std::to_string(at + i + 1) + " is " + show(lines_[at + i]) + " but the hunk expects " +
               show(old_lines[i]) + ", and its old lines occur nowhere else after the previous hunk";
    }
    return "its old lines overlap the previous hunk";
  }

  std::string path_;
  std::vector<std::string_view> lines_;
  WorkBudget& budget_;
};

// The workspace file a section patches when its two names differ: the one that exists, as
// patch(1) picks; failing that, the names without their first component (patch -p1).
std::string pick_existing(const FileMap& files, const FilePatch& fp) {
  bool has_old = files.contains(fp.old_path), has_new = files.contains(fp.new_path);
  if (has_old != has_new) return has_old ? fp.old_path : fp.new_path;
  auto strip = [](const std::string& p) {
    std::size_t slash = p.find('/');
    return slash == std::string::npos ? std::string() : p.substr(slash + 1);
  };
  std::string o = strip(fp.old_path), n = strip(fp.new_path);
  if (!o.empty() && o == n && files.contains(o)) return o;
  if (has_old)
    throw PatchError("the header names two existing files, '" + fp.old_path + "' and '" + fp.new_path +
                     "'; renames are not supported: give the same name on both --- and +++ lines");
  return fp.new_path;  // neither exists: reported as a missing file by the caller
}

// ---- making diffs ------------------------------------------------------------------------------

enum class Op : std::uint8_t { equal, remove, insert };

// Myers' O(ND) shortest edit script between two sequences of line ids; nullopt when more than
// `max_d` edits are needed (the caller then replaces the whole region).
std::optional<std::vector<Op>> myers(const std::vector<int>& a, const std::vector<int>& b, int max_d) {
  const int n = static_cast<int>(a.size()), m = static_cast<int>(b.size());
  const int offset = max_d + 1;
  std::vector<int> v(static_cast<std::size_t>(2 * max_d + 3), 0);
  std::vector<std::vector<int>> trace;  // trace[d][k + d] = furthest x on diagonal k after d edits
  auto V = [&](int k) -> int& { return v[static_cast<std::size_t>(k + offset)]; };
  int found = -1;
  for (int d = 0; d <= max_d && found < 0; ++d) {
    for (int k = -d; k <= d; k += 2) {
      int x = (k == -d || (k != d && V(k - 1) < V(k + 1))) ? V(k + 1) : V(k - 1) + 1;
      int y = x - k;
      while (x < n && y < m && a[static_cast<std::size_t>(x)] == b[static_cast<std::size_t>(y)]) ++x, ++y;
      V(k) = x;
      if (x >= n && y >= m) found = d;
    }
    trace.emplace_back(v.begin() + (offset - d), v.begin() + (offset + d + 1));
  }
  if (found < 0) return std::nullopt;
  std::vector<Op> ops;
  int x = n, y = m;
  for (int d = found; d > 0; --d) {
    const std::vector<int>& prev = trace[static_cast<std::size_t>(d - 1)];
    auto P = [&](int k) { return prev[static_cast<std::size_t>(k + d - 1)]; };
    int k = x - y;
    int prev_k = (k == -d || (k != d && P(k - 1) < P(k + 1))) ? k + 1 : k - 1;
    int prev_x = P(prev_k), prev_y = prev_x - prev_k;
    while (x > prev_x && y > prev_y) ops.push_back(Op::equal), --x, --y;
    ops.push_back(prev_k == k + 1 ? Op::insert : Op::remove);
    x = prev_x;
    y = prev_y;
  }
  while (x > 0 && y > 0) ops.push_back(Op::equal), --x, --y;
  std::reverse(ops.begin(), ops.end());
  return ops;
}

std::vector<Op> edit_script(const std::vector<std::string_view>& a, const std::vector<std::string_view>& b) {
  std::size_t prefix = 0;
  while (prefix < a.size() && prefix < b.size() && a[prefix] == b[prefix]) ++prefix;
  std::size_t suffix = 0;
  while (suffix < a.size() - prefix && suffix < b.size() - prefix &&
         a[a.size() - 1 - suffix] == b[b.size() - 1 - suffix])
    ++suffix;
  std::unordered_map<std::string_view, int> ids;
  auto to_ids = [&](const std::vector<std::string_view>& lines) {
    std::vector<int> out;
    for (std::size_t i = prefix; i < lines.size() - suffix; ++i)
      out.push_back(ids.emplace(lines[i], static_cast<int>(ids.size())).first->second);
    return out;
  };
  std::vector<int> ia = to_ids(a), ib = to_ids(b);
  std::vector<Op> ops(prefix, Op::equal);
  constexpr int kMaxEdits = 1000;  // bounds time and memory; beyond it the region is replaced whole
  if (auto middle = myers(ia, ib, kMaxEdits)) {
    ops.insert(ops.end(), middle->begin(), middle->end());
  } else {
    ops.insert(ops.end(), ia.size(), Op::remove);
    ops.insert(ops.end(), ib.size(), Op::insert);
  }
  ops.insert(ops.end(), suffix, Op::equal);
  return ops;
}

void append_line(std::string& out, char kind, std::string_view text) {
  out += kind;
  out += text;
  if (text.empty() || text.back() != '\n') out += "\n\\ No newline at end of file\n";
}

std::string range(std::size_t start, std::size_t count) {
  // `diff -u` style: the line before the hunk when it has no lines on this side; ",1" omitted.
  std::string s = std::to_string(count == 0 ? start : start + 1);
  if (count != 1) s += "," + std::to_string(count);
  return s;
}

std::string file_hunks(const std::vector<std::string_view>& a, const std::vector<std::string_view>& b) {
  std::vector<Op> ops = edit_script(a, b);
  constexpr std::size_t kContext = 3;
  // Position of each op in a and b.
  std::vector<std::size_t> pa(ops.size() + 1), pb(ops.size() + 1);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    pa[i + 1] = pa[i] + (ops[i] != Op::insert);
    pb[i + 1] = pb[i] + (ops[i] != Op::remove);
  }
  std::string out;
  std::size_t i = 0;
  while (i < ops.size()) {
    if (ops[i] == Op::equal) {
      ++i;
      continue;
    }
    std::size_t begin = i >= kContext ? i - kContext : 0;
    std::size_t end = i;  // one past the last change of this hunk
    std::size_t j = i;
    while (j < ops.size()) {
      if (ops[j] != Op::equal) {
        end = ++j;
        continue;
      }
      std::size_t run = j;
      while (run < ops.size() && ops[run] == Op::equal) ++run;
      if (run == ops.size() || run - j > 2 * kContext) break;
      j = run;
    }
    std::size_t stop = std::min(ops.size(), end + kContext);
    out += "@@ -" + range(pa[begin], pa[stop] - pa[begin]) + " +" + range(pb[begin], pb[stop] - pb[begin]) + " @@\n";
    // Within each run of changes, removals first, as diff -u writes them.
    std::size_t k = begin;
    while (k < stop) {
      if (ops[k] == Op::equal) {
        append_line(out, ' ', a[pa[k]]);
        ++k;
        continue;
      }
      std::size_t run_end = k;
      while (run_end < stop && ops[run_end] != Op::equal) ++run_end;
      for (std::size_t r = k; r < run_end; ++r)
        if (ops[r] == Op::remove) append_line(out, '-', a[pa[r]]);
      for (std::size_t r = k; r < run_end; ++r)
        if (ops[r] == Op::insert) append_line(out, '+', b[pb[r]]);
      k = run_end;
    }
    i = stop;
  }
  return out;
}

}  // namespace

FileMap apply_unified_diff(const FileMap& files, std::string_view diff) {
  WorkBudget budget(kPatchWorkUnits);
  DiffReader reader(diff, budget);
  std::vector<FilePatch> patches = reader.read();
  FileMap out = files;
  for (const FilePatch& fp : patches) {
    std::string path;
    bool create = fp.old_null, remove = fp.new_null;
    if (create) path = fp.new_path;
    else if (remove || fp.old_path == fp.new_path) path = fp.old_path;
    else path = pick_existing(out, fp);
    if (path.empty()) throw PatchError("a file header names an empty path");
    bool exists = out.contains(path);
    if (create && exists)
      throw PatchError("'" + path + "' already exists; a diff from /dev/null creates a new file");
    if (!create && !exists) {
      // `diff -N` without an epoch stamp, or a hand-written diff: an insertion at the top of a
      // file that is not there creates it, as patch(1) does.
      bool insertion_only = fp.hunks.size() == 1 && fp.hunks[0].old_count == 0 && !remove;
      if (!insertion_only) throw PatchError("no file '" + path + "' in the workspace");
      create = true;
    }
    std::string content = create ? std::string() : out[path];
    std::string result = HunkApplier(path, content, budget).apply(fp.hunks);
    if (remove) {
      if (!result.empty())
        throw PatchError("'" + path + "': a diff to /dev/null deletes the file, but its hunks leave " +
                         std::to_string(result.size()) + " bytes of it");
      out.erase(path);
    } else {
      out[path] = std::move(result);
    }
  }
  return out;
}

std::string make_unified_diff(const FileMap& before, const FileMap& after) {
  std::string out;
  auto emit = [&](const std::string& path, const std::string* a, const std::string* b) {
    if (a && b && *a == *b) return;
    out += "--- " + (a ? "a/" + path : std::string("/dev/null")) + "\n";
    out += "+++ " + (b ? "b/" + path : std::string("/dev/null")) + "\n";
    out += file_hunks(split_keep(a ? *a : std::string_view()), split_keep(b ? *b : std::string_view()));
  };
  auto ia = before.begin();
  auto ib = after.begin();
  while (ia != before.end() || ib != after.end()) {
    if (ib == after.end() || (ia != before.end() && ia->first < ib->first)) {
      emit(ia->first, &ia->second, nullptr);
      ++ia;
    } else if (ia == before.end() || ib->first < ia->first) {
      emit(ib->first, nullptr, &ib->second);
      ++ib;
    } else {
      emit(ia->first, &ia->second, &ib->second);
      ++ia;
      ++ib;
    }
  }
  return out;
}

}  // namespace d2k
