// The spawn helper as its callers see it: exit status, signal, deadline, output cap, descriptors,
// argv and environment passed verbatim (no shell), redirections, start failures.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <system_error>

#include "catch.hpp"
#include "helpers.hpp"
#include "sandbox/process.hpp"

using namespace d2k::sandbox;
using d2k::sandbox::testing::TempDir;

namespace {

const std::string kProbe = D2K_SANDBOX_PROBE;

RunSpec command(std::vector<std::string> argv) {
  RunSpec spec;
  spec.argv = std::move(argv);
  spec.deadline = std::chrono::seconds(20);
  return spec;
}

RunSpec shell(const std::string& script) { return command({"/bin/sh", "-c", script}); }

// Gone, or a zombie waiting for a reaper that is not us.
bool dead(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return true;
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

}  // namespace

TEST_CASE("process: exit status, signal, and output of each stream", "[process]") {
  auto r = run(shell("echo out; echo err >&2; exit 7"));
  CHECK(r.exit.exited);
  CHECK(r.exit.status == 7);
  CHECK_FALSE(r.exit.ok());
  CHECK(r.out == "out\n");
  CHECK(r.err == "err\n");
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit.describe() == "exited with status 7");

  r = run(shell("kill -TERM $$; sleep 5"));
  CHECK_FALSE(r.exit.exited);
  CHECK(r.exit.signal == SIGTERM);
  CHECK(r.exit.describe() == "killed by signal SIGTERM");

  auto merged = shell("echo one; echo two >&2");
  merged.err = Stdio::with_stdout();
  r = run(merged);
  CHECK(r.out == "one\ntwo\n");
  CHECK(r.err.empty());
}

TEST_CASE("process: the deadline kills a child that ignores SIGTERM, and its grandchildren", "[process]") {
  auto spec = shell("trap '' TERM; sleep 60 & echo $!; sleep 60");
  spec.deadline = std::chrono::milliseconds(300);
  const auto r = run(spec);
  CHECK(r.timed_out);
  CHECK(r.exit.signal == SIGKILL);
  CHECK(r.seconds < 10);
  const pid_t grandchild = std::stoi(r.out);
  REQUIRE(grandchild > 0);
  for (int i = 0; i < 200 && !dead(grandchild); ++i) usleep(10000);
  CHECK(dead(grandchild));
}

TEST_CASE("process: grandchildren left behind at a normal exit are killed too", "[process]") {
  const auto r = run(shell("sleep 60 & echo $!"));
  CHECK(r.exit.ok());
  CHECK_FALSE(r.timed_out);
  CHECK(r.seconds < 10);  // the orphan held stdout open: run did not wait for it
  const pid_t orphan = std::stoi(r.out);
  for (int i = 0; i < 200 && !dead(orphan); ++i) usleep(10000);
  CHECK(dead(orphan));
}

TEST_CASE("process: captured output is capped and the rest counted", "[process]") {
  auto spec = shell("head -c 100000 /dev/zero; head -c 5000 /dev/zero >&2");
  spec.max_output_bytes = 1000;
  const auto r = run(spec);
  CHECK(r.exit.ok());
  CHECK(r.out.size() == 1000);
  CHECK(r.out_dropped == 99000);
  CHECK(r.err.size() == 1000);
  CHECK(r.err_dropped == 4000);
}

TEST_CASE("process: the child sees only 0, 1, 2 and the descriptors it is given", "[process]") {
  // Descriptors without close-on-exec, as a careless library would leave them.
  const int leaky = ::open("/dev/null", O_RDONLY);
  REQUIRE(leaky >= 0);
  Fd guard(leaky);
  int raw[2];
  REQUIRE(::pipe(raw) == 0);
  Fd pr(raw[0]), pw(raw[1]);

  auto r = run(command({kProbe, "fds"}));
  CHECK(r.out == "0 1 2\n");

  auto kept = command({kProbe, "fds"});
  kept.keep_fds = {{leaky, 5}};
  r = run(kept);
  CHECK(r.out == "0 1 2 5\n");

  // Two descriptors that swap numbers: each source sits on the other's target, and neither is
  // clobbered before it is moved (the pipe's read end must still read what its write end wrote).
  auto swapped = command({"/bin/sh", "-c", "cat <&" + std::to_string(leaky)});
  swapped.keep_fds = {{leaky, pr.get()}, {pr.get(), leaky}};
  REQUIRE(::write(pw.get(), "through the pipe\n", 17) == 17);
  pw.reset();
  r = run(swapped);
  CHECK(r.out == "through the pipe\n");
}

TEST_CASE("process: argv is passed verbatim, no shell", "[process]") {
  const std::vector<std::string> args = {"two words", "'single'", "\"double\"", "$HOME", "*", "; echo x", "", "a\\b"};
  auto spec = command({kProbe, "argv"});
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  const auto r = run(spec);
  std::string want;
  for (const auto& a : args) want += "[" + a + "]\n";
  CHECK(r.out == want);
}

TEST_CASE("process: the environment is given or inherited with overrides", "[process]") {
  auto spec = command({kProbe, "env"});
  spec.env = std::map<std::string, std::string>{{"ONLY", "this one"}};
  CHECK(run(spec).out == "ONLY=this one\n");

  ::setenv("D2K_PROCESS_TEST_INHERITED", "yes", 1);
  spec = command({kProbe, "env"});
  spec.env_overrides = {{"D2K_PROCESS_TEST_ADDED", "1"}};
  const auto r = run(spec);
  CHECK(r.out.find("D2K_PROCESS_TEST_INHERITED=yes\n") != std::string::npos);
  CHECK(r.out.find("D2K_PROCESS_TEST_ADDED=1\n") != std::string::npos);
}

TEST_CASE("process: a bare name is looked up in PATH; files as stdin and stdout", "[process]") {
  TempDir dir;
  const auto in = dir.write("in.txt", "hello\n");
  auto spec = command({"cat"});
  spec.env_overrides = {{"PATH", "/usr/bin:/bin"}};
  spec.in = Stdio::to_file(in);
  spec.out = Stdio::to_file(dir.path() / "out.txt");
  const auto r = run(spec);
  CHECK(r.exit.ok());
  CHECK(r.out.empty());
  std::ifstream f(dir.path() / "out.txt");
  std::stringstream text;
  text << f.rdbuf();
  CHECK(text.str() == "hello\n");

  auto cwd = shell("pwd");
  cwd.cwd = dir.path();
  CHECK(run(cwd).out == std::filesystem::canonical(dir.path()).string() + "\n");
}

TEST_CASE("process: a child that cannot start is an error that says why", "[process]") {
  try {
    run(command({"/nonexistent/d2k-no-such-program"}));
    FAIL("started");
  } catch (const std::system_error& e) {
    CHECK(e.code().value() == ENOENT);
    CHECK(std::string(e.what()).find("execve") != std::string::npos);
  }
  try {
    run(command({"d2k-no-such-program-in-path"}));
    FAIL("started");
  } catch (const std::system_error& e) {
    CHECK(e.code().value() == ENOENT);
  }
  auto bad_cwd = shell("true");
  bad_cwd.cwd = "/nonexistent/dir";
  CHECK_THROWS_AS(run(bad_cwd), std::system_error);
}

TEST_CASE("process: spawn hands back pipes; the child dies with its Child", "[process]") {
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", "read line; echo got $line"};
  spec.in = Stdio::piped();
  spec.out = Stdio::piped();
  pid_t pid = -1;
  {
    Child c = spawn(spec);
    pid = c.pid();
    Fd in = c.take_stdin(), out = c.take_stdout();
    REQUIRE(::write(in.get(), "x\n", 2) == 2);
    in.reset();
    char buf[64];
    const ssize_t n = ::read(out.get(), buf, sizeof buf);
    CHECK(std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0) == "got x\n");
    CHECK(c.wait().ok());
    CHECK(c.reaped());
  }
  spec.argv = {"/bin/sh", "-c", "sleep 60"};
  spec.in = Stdio::dev_null();
  spec.out = Stdio::inherited();
  {
    Child c = spawn(spec);
    pid = c.pid();
    CHECK_FALSE(c.try_wait());
  }  // destroyed while running: killed and reaped
  CHECK(dead(pid));
}

TEST_CASE("process: split_words splits like a shell would, without one", "[process]") {
  using V = std::vector<std::string>;
  CHECK(split_words("vi") == V{"vi"});
  CHECK(split_words("  code   --wait ") == V{"code", "--wait"});
  CHECK(split_words("emacs -nw '/my dir/x'") == V{"emacs", "-nw", "/my dir/x"});
  CHECK(split_words("a\\ b \"c \\\"d\\\"\" 'e'\"f\"") == V{"a b", "c \"d\"", "ef"});
  CHECK(split_words("$EDITOR;rm") == V{"$EDITOR;rm"});
  CHECK(split_words("").empty());
  CHECK_THROWS_AS(split_words("vi 'open"), std::invalid_argument);
}
