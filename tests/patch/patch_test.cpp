// apply_unified_diff / make_unified_diff against hand-written diffs and against real `diff -u`,
// `git diff` and `patch` run at test time.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "catch.hpp"
#include "env/patch.hpp"

// Substring matcher under both Catch2 v2 (Debian) and v3 (the GPU machine).
#if __has_include(<catch2/catch_all.hpp>)
inline auto Contains(const std::string& text) { return Catch::Matchers::ContainsSubstring(text); }
#else
inline auto Contains(const std::string& text) { return Catch::Matchers::Contains(text); }
#endif

namespace fs = std::filesystem;
using d2k::FileMap;
using d2k::PatchError;
using d2k::apply_unified_diff;
using d2k::make_unified_diff;

namespace {

// A fresh directory under the build tree, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::path(D2K_BINARY_DIR) / "tmp-patch-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

void write_file(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << content;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_tree(const fs::path& root, const FileMap& files) {
  fs::create_directories(root);
  for (const auto& [path, content] : files) write_file(root / path, content);
}

FileMap read_tree(const fs::path& root) {
  FileMap out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out[fs::relative(e.path(), root).string()] = read_file(e.path());
  return out;
}

// Runs a shell command in `dir`; returns its exit status and its stdout.
std::pair<int, std::string> run(const fs::path& dir, const std::string& command) {
  fs::path out = dir.parent_path() / (dir.filename().string() + ".stdout");  // outside the tree
  std::string full = "cd '" + dir.string() + "' && " + command + " > '" + out.string() + "' 2>&1";
  int status = std::system(full.c_str());
  std::string text = read_file(out);
  fs::remove(out);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

// `diff -ruN a b` of two trees, as a user would produce it.
std::string real_diff(const FileMap& before, const FileMap& after) {
  TempDir dir;
  write_tree(dir.path / "a", before);
  write_tree(dir.path / "b", after);
  auto [status, text] = run(dir.path, "/usr/bin/diff -ruN a b");
  REQUIRE(status <= 1);  // 0 same, 1 different, 2 trouble
  return text;
}

const std::string kKernel =
    "#include <cuda_runtime.h>\n"
    "\n"
    "__global__ void add(const float* x, const float* y, float* z, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) z[i] = x[i] + y[i];\n"
    "}\n"
    "\n"
    "extern \"C\" int d2k_vector_add(const float* x, const float* y, float* z, int n, cudaStream_t s) {\n"
    "  add<<<(n + 255) / 256, 256, 0, s>>>(x, y, z, n);\n"
    "  return cudaGetLastError();\n"
    "}\n";

std::string numbered(int from, int to, const std::string& tag = "line") {
  std::string s;
  for (int i = from; i <= to; ++i) s += tag + " " + std::to_string(i) + "\n";
  return s;
}

std::string random_text(std::mt19937& rng, int lines) {
  static const char* words[] = {"a", "b", "c", "{", "}", "x = y;", "", "return 0;", "int i;"};
  std::string s;
  for (int i = 0; i < lines; ++i) s += std::string(words[rng() % 9]) + "\n";
  return s;
}

std::string random_edit(std::mt19937& rng, const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  int edits = 1 + static_cast<int>(rng() % 6);
  for (int e = 0; e < edits; ++e) {
    std::size_t at = lines.empty() ? 0 : rng() % (lines.size() + 1);
    switch (rng() % 3) {
      case 0: lines.insert(lines.begin() + static_cast<long>(at), "inserted " + std::to_string(rng() % 100)); break;
      case 1: if (at < lines.size()) lines.erase(lines.begin() + static_cast<long>(at)); break;
      default: if (at < lines.size()) lines[at] = "changed " + std::to_string(rng() % 100); break;
    }
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  if (!out.empty() && rng() % 4 == 0) out.pop_back();  // sometimes no newline at the end
  return out;
}

}  // namespace

TEST_CASE("a hand-written one-hunk diff applies") {
  FileMap files{{"kernel.cu", kKernel}};
  std::string diff =
      "--- a/kernel.cu\n"
      "+++ b/kernel.cu\n"
      "@@ -3,4 +3,4 @@\n"
      " __global__ void add(const float* x, const float* y, float* z, int n) {\n"
      "   int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "-  if (i < n) z[i] = x[i] + y[i];\n"
      "+  if (i < n) z[i] = y[i] + x[i];\n"
      " }\n";
  FileMap out = apply_unified_diff(files, diff);
  std::string expected = kKernel;
  expected.replace(expected.find("x[i] + y[i]"), 11, "y[i] + x[i]");
  CHECK(out.at("kernel.cu") == expected);
  CHECK(files.at("kernel.cu") == kKernel);  // input untouched
}

TEST_CASE("real diff -u output over several files, hunks, creation and deletion applies") {
  FileMap before{{"kernel.cu", numbered(1, 60)}, {"util.cuh", "// util\nint f();\n"}, {"gone.h", "old\nstuff\n"}};
  std::string k = numbered(1, 60);
  k.replace(k.find("line 5\n"), 7, "LINE FIVE\n");
  k.replace(k.find("line 40\n"), 8, "line 40a\nline 40b\n");
  k += "tail\n";
  FileMap after{{"kernel.cu", k}, {"util.cuh", "// util\nint f();\nint g();\n"}, {"sub/new.cuh", "#pragma once\n"}};
  std::string diff = real_diff(before, after);
  INFO(diff);
  REQUIRE(diff.find("@@") != std::string::npos);
  CHECK(apply_unified_diff(before, diff) == after);
}

TEST_CASE("\\ No newline at end of file, on either side and both") {
  std::vector<std::pair<std::string, std::string>> cases = {
      {"a\nb\nc", "a\nb\nc\n"},   // newline added
      {"a\nb\nc\n", "a\nb\nc"},   // newline removed
      {"a\nb\nc", "a\nB\nc"},     // both without
      {"a\nb\nc", "a\nb\nc\nd"},  // appended after a line without newline
      {"x", "y"},
      {"", "only\n"},
  };
  for (const auto& [a, b] : cases) {
    FileMap before{{"k.cu", a}}, after{{"k.cu", b}};
    std::string diff = real_diff(before, after);
    INFO("before=" << a << " after=" << b << "\n" << diff);
    CHECK(apply_unified_diff(before, diff) == after);
    CHECK(apply_unified_diff(before, make_unified_diff(before, after)) == after);
  }
}

TEST_CASE("git diff output (diff --git, index, new file mode, /dev/null) applies") {
  TempDir dir;
  auto [init, init_out] = run(dir.path, "git init -q . && git config user.email t@t && git config user.name t");
  REQUIRE(init == 0);
  FileMap before{{"kernel.cu", kKernel}, {"old.cuh", "remove me\n"}};
  write_tree(dir.path, before);
  REQUIRE(run(dir.path, "git add -A && git commit -qm base").first == 0);
  std::string k = kKernel;
  k.replace(k.find("256"), 3, "512");
  write_file(dir.path / "kernel.cu", k);
  write_file(dir.path / "inc/new.cuh", "#pragma once\n#define N 4\n");
  fs::remove(dir.path / "old.cuh");
  REQUIRE(run(dir.path, "git add -A").first == 0);
  auto [status, diff] = run(dir.path, "git -c core.quotepath=off diff --cached --no-color --no-renames");
  REQUIRE(status == 0);
  INFO(diff);
  REQUIRE(diff.find("diff --git") != std::string::npos);
  FileMap expected{{"kernel.cu", k}, {"inc/new.cuh", "#pragma once\n#define N 4\n"}};
  CHECK(apply_unified_diff(before, diff) == expected);
}

TEST_CASE("random edits: our applier takes real diff -u, and patch(1) takes our diffs") {
  std::mt19937 rng(20240611);
  for (int round = 0; round < 40; ++round) {
    FileMap before, after;
    int nfiles = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < nfiles; ++f) {
      std::string name = "f" + std::to_string(f) + ".cu";
      std::string text = random_text(rng, static_cast<int>(rng() % 40));
      int what = static_cast<int>(rng() % 8);
      if (what == 0) {
        after[name] = text;  // created
      } else if (what == 1) {
        before[name] = text;  // deleted
      } else {
        before[name] = text;
        after[name] = random_edit(rng, text);
      }
    }
    INFO("round " << round);
    std::string ours = make_unified_diff(before, after);
    CHECK(apply_unified_diff(before, ours) == after);
    if (before == after) {
      CHECK(ours.empty());
      continue;
    }
    CHECK(apply_unified_diff(before, real_diff(before, after)) == after);

    // GNU patch must accept our output too (its format is the standard one).
    TempDir dir;
    write_tree(dir.path / "tree", before);
    write_file(dir.path / "ours.diff", ours);
    auto [status, log] = run(dir.path / "tree", "/usr/bin/patch -s -p1 --no-backup-if-mismatch -E < ../ours.diff");
    INFO(ours << "\npatch says: " << log);
    fs::remove(dir.path / "ours.diff");
    CHECK(status == 0);
    CHECK(read_tree(dir.path / "tree") == after);
  }
}

TEST_CASE("make_unified_diff: empty when equal, diff -u shape, empty files round-trip") {
  FileMap same{{"a.cu", "x\n"}};
  CHECK(make_unified_diff(same, same).empty());

  FileMap before{{"k.cu", numbered(1, 20)}};
  std::string changed = numbered(1, 20);
  changed.replace(changed.find("line 10\n"), 8, "line ten\n");
  std::string diff = make_unified_diff(before, {{"k.cu", changed}});
  CHECK(diff ==
        "--- a/k.cu\n+++ b/k.cu\n@@ -7,7 +7,7 @@\n line 7\n line 8\n line 9\n-line 10\n+line ten\n line 11\n"
        " line 12\n line 13\n");

  FileMap with_empty{{"empty.h", ""}, {"k.cu", "a\n"}};
  FileMap without{{"k.cu", "a\n"}};
  CHECK(apply_unified_diff(without, make_unified_diff(without, with_empty)) == with_empty);
  CHECK(apply_unified_diff(with_empty, make_unified_diff(with_empty, without)) == without);
}

TEST_CASE("make_unified_diff on large, very different files stays correct") {
  std::mt19937 rng(7);
  FileMap before{{"big.cu", random_text(rng, 5000)}}, after{{"big.cu", random_text(rng, 5000)}};
  CHECK(apply_unified_diff(before, make_unified_diff(before, after)) == after);
}

TEST_CASE("hunks with wrong line numbers apply at the nearest exact match") {
  FileMap files{{"k.cu", numbered(1, 30)}};
  std::string diff =
      "--- a/k.cu\n+++ b/k.cu\n"
      "@@ -2,3 +2,3 @@\n line 19\n-line 20\n+line twenty\n line 21\n";
  std::string expected = numbered(1, 30);
  expected.replace(expected.find("line 20\n"), 8, "line twenty\n");
  CHECK(apply_unified_diff(files, diff).at("k.cu") == expected);

  // Two identical blocks: the one nearest the stated line wins.
  FileMap twice{{"k.cu", "x\ny\nz\n" + numbered(1, 10) + "x\ny\nz\n"}};
  std::string d2 = "--- k.cu\n+++ k.cu\n@@ -12,3 +12,3 @@\n x\n-y\n+Y\n z\n";
  CHECK(apply_unified_diff(twice, d2).at("k.cu") == "x\ny\nz\n" + numbered(1, 10) + "x\nY\nz\n");
}

TEST_CASE("an empty line inside a hunk is taken as an empty context line") {
  FileMap files{{"k.cu", "a\n\nb\n"}};
  std::string diff = "--- a/k.cu\n+++ b/k.cu\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n";
  CHECK(apply_unified_diff(files, diff).at("k.cu") == "a\n\nc\n");
}

TEST_CASE("a file diffed under another name patches the file that exists") {
  FileMap files{{"kernel.cu", "a\nb\n"}};
  std::string diff = "--- kernel.cu.orig\t2024-01-01 00:00:00\n+++ kernel.cu\t2024-01-01 00:00:01\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n";
  CHECK(apply_unified_diff(files, diff).at("kernel.cu") == "a\nc\n");
  // Other directory prefixes (patch -p1 style).
  std::string p1 = "--- old/kernel.cu\n+++ new/kernel.cu\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n";
  CHECK(apply_unified_diff(files, p1).at("kernel.cu") == "a\nc\n");
}

TEST_CASE("errors name the file and the hunk, and nothing is applied") {
  FileMap files{{"k.cu", numbered(1, 10)}, {"other.cu", "x\n"}};
  auto error_of = [&](const std::string& diff) -> std::string {
    try {
      apply_unified_diff(files, diff);
    } catch (const PatchError& e) {
      return e.what();
    }
    return "(no error)";
  };
  
  SECTION("context mismatch") {
    std::string msg = error_of("--- a/k.cu\n+++ b/k.cu\n@@ -3,2 +3,2 @@\n line 3\n-line FOUR\n+x\n");
    CHECK_THAT(msg, Contains("'k.cu', hunk 1 (@@ -3,2 +3,2 @@)"));
    CHECK_THAT(msg, Contains("line 4 is \"line 4\" but the hunk expects \"line FOUR\""));
  }
  SECTION("second hunk of a file fails after the first matched") {
    std::string msg = error_of("--- a/k.cu\n+++ b/k.cu\n@@ -1,1 +1,1 @@\n-line 1\n+one\n@@ -8,1 +8,1 @@\n-nope\n+x\n");
    CHECK_THAT(msg, Contains("hunk 2"));
  }
  SECTION("all or nothing across files") {
    std::string diff = "--- a/other.cu\n+++ b/other.cu\n@@ -1 +1 @@\n-x\n+y\n--- a/k.cu\n+++ b/k.cu\n@@ -1 +1 @@\n-zzz\n+y\n";
    CHECK_THROWS_AS(apply_unified_diff(files, diff), PatchError);
    CHECK(files.at("other.cu") == "x\n");
  }
  SECTION("a missing file") {
    CHECK_THAT(error_of("--- a/nope.cu\n+++ b/nope.cu\n@@ -1 +1 @@\n-x\n+y\n"), Contains("no file 'nope.cu'"));
  }
  SECTION("creating a file that exists") {
    CHECK_THAT(error_of("--- /dev/null\n+++ b/other.cu\n@@ -0,0 +1 @@\n+y\n"), Contains("'other.cu' already exists"));
  }
  SECTION("deleting a file but leaving content") {
    CHECK_THAT(error_of("--- a/k.cu\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-line 1\n-line 2\n"),
               Contains("deletes the file, but its hunks leave"));
  }
  SECTION("a hunk shorter than its header") {
    CHECK_THAT(error_of("--- a/k.cu\n+++ b/k.cu\n@@ -1,3 +1,3 @@\n line 1\n-line 2\n+two\n"),
               Contains("the diff ends inside the hunk"));
  }
  SECTION("a hunk longer than its header") {
    CHECK_THAT(error_of("--- a/k.cu\n+++ b/k.cu\n@@ -1,2 +1,2 @@\n line 1\n-line 2\n+two\n line 3\n"),
               Contains("more lines than its header says"));
  }
  SECTION("a malformed hunk header") {
    CHECK_THAT(error_of("--- a/k.cu\n+++ b/k.cu\n@@ -x +1 @@\n-a\n"), Contains("malformed hunk header"));
  }
  SECTION("no file sections at all") {
    CHECK_THAT(error_of("just some text\n"), Contains("no file sections"));
    CHECK_THAT(error_of(""), Contains("no file sections"));
  }
  SECTION("a hunk before any header") { CHECK_THAT(error_of("@@ -1 +1 @@\n-a\n+b\n"), Contains("outside a file section")); }
  SECTION("binary and rename sections are refused") {
    CHECK_THAT(error_of("diff --git a/x b/x\nBinary files a/x and b/x differ\n"), Contains("binary"));
    CHECK_THAT(error_of("diff --git a/k.cu b/n.cu\nsimilarity index 100%\nrename from k.cu\nrename to n.cu\n"),
               Contains("renames"));
    CHECK_THAT(error_of("diff --git a/k.cu b/k.cu\nold mode 100644\nnew mode 100755\n"), Contains("not supported"));
    // Issue 22.10: these applied silently as plain edits.
    CHECK_THAT(error_of("diff --git a/k.cu b/k.cu\nold mode 100644\nnew mode 120000\n--- a/k.cu\n+++ b/k.cu\n"
                        "@@ -1 +1 @@\n-old\n+/etc/passwd\n"),
               Contains("mode"));
    CHECK_THAT(error_of("diff --git a/l.cu b/l.cu\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
                        "+++ b/l.cu\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"),
               Contains("120000"));
    CHECK_THAT(error_of("--- a/k.cu\n+++ b/n.cu\n@@ -1 +1 @@\n-old\n+new\n"), Contains("renames"));
  }
  SECTION("the no-newline marker must be on the last line") {
    // "line 10" is the file's last line and has a newline; a hunk claiming it has none does not match.
    CHECK_THAT(error_of("--- a/k.cu\n+++ b/k.cu\n@@ -10 +10 @@\n-line 10\n\\ No newline at end of file\n+x\n"),
               Contains("(no newline at end of file)"));
  }
  CHECK(files.at("k.cu") == numbered(1, 10));
}

TEST_CASE("hostile diffs fail fast with a PatchError, never hang") {
  // Many identical lines and a hunk that almost matches everywhere: bounded by the work limit.
  std::string file(200000, '\n');
  std::string diff = "--- a/k.cu\n+++ b/k.cu\n@@ -1,3000 +1,3000 @@\n";
  for (int i = 0; i < 2999; ++i) diff += " \n";
  diff += "-x\n+y\n";
  FileMap files{{"k.cu", file}};
  CHECK_THROWS_AS(apply_unified_diff(files, diff), PatchError);  // over the work limit
  // Absurd numbers in a header.
  CHECK_THROWS_WITH(apply_unified_diff(files, "--- a/k.cu\n+++ b/k.cu\n@@ -1,99999999999999999 +1 @@\n-a\n"),
                    Contains("malformed hunk header"));
}

// ---- placement cost (issue 22.6: a patch must not hold the server loop) -------------------------

namespace {

std::string repeated(const std::string& line, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += line;
  return out;
}

// One context-only-plus-change hunk: k lines "a", then "-b" "+c", stated at line `at`.
std::string far_hunk(int k, int at) {
  std::string d = "--- a/k.cu\n+++ b/k.cu\n@@ -" + std::to_string(at) + "," + std::to_string(k + 1) + " +" +
                  std::to_string(at) + "," + std::to_string(k + 1) + " @@\n";
  return d + repeated(" a\n", k) + "-b\n+c\n";
}

}  // namespace

TEST_CASE("a hunk moved far from its stated line is placed in O(its lines + the distance)") {
  // 60,000 identical lines, then the one distinct line. A line-by-line search compares about k lines
  // at each of the 60,000 positions (1.2e8 comparisons for k = 2000: refused before as over its
  // work limit); KMP from the stated line outward needs about 2 per line.
  FileMap files{{"k.cu", repeated("a\n", 60000) + "b\n"}};
  FileMap out = apply_unified_diff(files, far_hunk(2000, 1));
  CHECK(out.at("k.cu") == repeated("a\n", 60000) + "c\n");
  // The same hunk stated past the end is found going up.
  CHECK(apply_unified_diff(files, far_hunk(2000, 200000)).at("k.cu") == out.at("k.cu"));
}

TEST_CASE("a diff whose placement work is over the per-patch limit is refused whole") {
  // Many file sections over one large file: each re-reads the whole file. Before the limit this took
  // seconds of the server loop and applied; now it is refused, and nothing is applied.
  FileMap files{{"k.cu", repeated("a\n", 131000) + "b\n"}};
  std::string section = "--- a/k.cu\n+++ b/k.cu\n@@ -131001 +131001 @@\n-b\n+b\n";
  std::string diff = repeated(section, 10000);
  CHECK_THROWS_WITH(apply_unified_diff(files, diff), Contains("units of work"));
  CHECK_THROWS_WITH(apply_unified_diff(files, diff), Contains("exact line numbers"));
  // A diff of more lines than the limit is refused before it is parsed.
  CHECK_THROWS_WITH(apply_unified_diff(files, "--- a/k.cu\n+++ b/k.cu\n@@ -1,1000000 +1,1000000 @@\n" +
                                                  repeated(" a\n", 1000000)),
                    Contains("'the diff': applying this diff needs more than"));
  // An honest patch of the same file: a thousand hunks at their stated lines.
  std::string honest = "--- a/k.cu\n+++ b/k.cu\n";
  for (int i = 0; i < 1000; ++i) {
    int line = 100 * i + 1;
    honest += "@@ -" + std::to_string(line) + " +" + std::to_string(line) + " @@\n-a\n+z\n";
  }
  std::string expected;
  for (int i = 0; i < 131000; ++i) expected += i % 100 == 0 && i < 100000 ? "z\n" : "a\n";
  CHECK(apply_unified_diff(files, honest).at("k.cu") == expected + "b\n");
}

TEST_CASE("placement agrees with a line-by-line nearest-match search on random files") {
  // The reference: try the stated line, then distance 1 above, 1 below, 2 above, ... (ties go up).
  std::mt19937 rng(22);
  for (int round = 0; round < 3000; ++round) {
    int n = 1 + static_cast<int>(rng() % 40);
    std::vector<std::string> lines;
    for (int i = 0; i < n; ++i) lines.push_back(std::string(1, static_cast<char>('a' + rng() % 3)) + "\n");
    int m = 1 + static_cast<int>(rng() % 4);
    std::vector<std::string> old;
    for (int i = 0; i < m; ++i) old.push_back(std::string(1, static_cast<char>('a' + rng() % 3)) + "\n");
    int stated = 1 + static_cast<int>(rng() % static_cast<unsigned>(n + 3));
    std::string diff = "--- a/k.cu\n+++ b/k.cu\n@@ -" + std::to_string(stated) + "," + std::to_string(m) + " +" +
                       std::to_string(stated) + "," + std::to_string(m) + " @@\n";
    for (int i = 0; i < m; ++i) diff += (i == m - 1 ? "-" : " ") + old[static_cast<std::size_t>(i)];
    diff += "+Z\n";
    std::string file;
    for (const auto& l : lines) file += l;
    auto match = [&](int at) {
      if (at < 0 || at + m > n) return false;
      for (int i = 0; i < m; ++i)
        if (lines[static_cast<std::size_t>(at + i)] != old[static_cast<std::size_t>(i)]) return false;
      return true;
    };
    int hi = n - m, start = std::clamp(stated - 1, 0, std::max(hi, 0)), found = -1;
    if (hi >= 0) {
      for (int d = 0; d <= n && found < 0; ++d) {
        if (match(start - d)) found = start - d;
        else if (match(start + d)) found = start + d;
      }
    }
    INFO("file " << file << "diff " << diff);
    if (found < 0) {
      CHECK_THROWS_WITH(apply_unified_diff({{"k.cu", file}}, diff), Contains("does not apply"));
      continue;
    }
    std::string expected;
    for (int i = 0; i < n; ++i) {
      if (i == found + m - 1) expected += "Z\n";
      else expected += lines[static_cast<std::size_t>(i)];
    }
    CHECK(apply_unified_diff({{"k.cu", file}}, diff).at("k.cu") == expected);
  }
}
