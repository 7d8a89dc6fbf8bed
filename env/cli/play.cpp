// `d2k play`: a REPL for a person at a terminal — connect, reset, read guidance and files, edit
// (through $EDITOR or commands), compile, read diagnostics, evaluate, submit.
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "env/cli/commands.hpp"
#include "env/cli/render.hpp"
#include "protocol/client.hpp"
#include "sandbox/process.hpp"

namespace d2k::cli {

namespace {

using protocol::Value;

// $VISUAL/$EDITOR split into words (no shell) plus the file, on our terminal and in our process
// group (so it can read the terminal). Like system(3), we ignore Ctrl-C and Ctrl-\ while it runs.
sandbox::ProcessExit run_editor(const std::string& editor, const std::string& file) {
  sandbox::SpawnSpec spec;
  spec.argv = sandbox::split_words(editor);
  if (spec.argv.empty()) throw std::runtime_error("the editor command is empty");
  spec.argv.push_back(file);
  spec.in = sandbox::Stdio::inherited();
  spec.own_process_group = false;
  struct IgnoreInterrupts {
    struct sigaction old_int {}, old_quit {};
    IgnoreInterrupts() {
      struct sigaction ign {};
      ign.sa_handler = SIG_IGN;
      sigaction(SIGINT, &ign, &old_int);
      sigaction(SIGQUIT, &ign, &old_quit);
    }
    ~IgnoreInterrupts() {
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGQUIT, &old_quit, nullptr);
    }
  } ignore;
  sandbox::Child child = sandbox::spawn(spec);
  return child.wait();
}

const char* kHelp = R"(commands:
  tasks                        list the server's tasks
  reset TASK [LAYER] [SEED]    start an episode (layer 0-3; default 0)
  guidance                     show the guidance texts of the episode's layer
  task                         show the task statement, signature and visible workloads
  files                        list workspace files
  show [PATH]                  print a workspace file (default: the main file)
  edit [PATH]                  edit a file in $EDITOR (then sent as write_file)
  write PATH LOCAL_FILE        replace a workspace file with a local file's content
  replace PATH                 exact-text edit: type the old text, a line '.', the new text, a line '.'
  patch LOCAL_DIFF             apply a unified diff file to the workspace
  compile                      compile in the sandbox and show diagnostics
  log                          show the last compile's full log
  evaluate | submit            run on the GPU (visible | all workloads; submit ends the episode)
  profile [WORKLOAD] [SECTION...]   Nsight Compute on one visible workload (default: the largest);
                               sections: speed_of_light memory compute occupancy launch warp_stalls
  sanitize [TOOL] [WORKLOAD]   compute-sanitizer: memcheck (default), racecheck, initcheck, synccheck
                               on one visible workload (default: the smallest)
  disassemble [KERNEL] [ptx]   SASS (and PTX) of the kernels whose name contains KERNEL
  status                       step, budget, last outcome
  stats                        server statistics
  close                        close the episode
  help | quit
)";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string read_until_dot(std::istream& in, bool prompt) {
  std::string text, line;
  bool first = true;
  while (true) {
    if (prompt) std::cout << "... " << std::flush;
    if (!std::getline(in, line) || line == ".") break;
    if (!first) text += "\n";
    text += line;
    first = false;
  }
  return text;
}

// The whole of text as an integer in [lo, hi].
template <typename T>
bool parse_number(const std::string& text, T& out, T lo, T hi) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < lo || value > hi) return false;
  out = value;
  return true;
}

bool is_profile_section(const std::string& w) {
  for (const char* s : {"speed_of_light", "memory", "compute", "occupancy", "launch", "warp_stalls"})
    if (w == s) return true;
  return false;
}

std::string num(const Value& v, const char* f = "%.3g") {
  if (!v.is_number()) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v.get<double>());
  return buf;
}

// A tool step's result for a person: the profile per launch, the sanitizer's findings, the
// disassembly's listings (the JSON stays in `status`/the episode log for programs).
std::string render_tool(const Value& last) {
  std::ostringstream o;
  if (!last.is_object()) return {};
  if (last.contains("profile")) {
    const Value& p = last["profile"];
    o << "profile of " << p.value("workload", std::string("?")) << " (" << p.value("launches_total", 0)
      << " launch(es))\n";
    for (const auto& l : p.value("launches", Value::array())) {
      o << "  " << l.value("kernel", std::string()) << "  grid " << l.value("grid", std::string()) << " block "
        << l.value("block", std::string()) << "  " << num(l.value("duration_s", Value()), "%.3g") << " s\n";
      for (const char* k : {"speed_of_light", "memory", "compute", "occupancy", "launch"})
        if (l.contains(k)) o << "    " << k << ": " << l[k].dump() << "\n";
      if (l.contains("warp_stalls")) o << "    warp_stalls: " << l["warp_stalls"].dump() << "\n";
    }
    if (p.contains("call")) o << "  call: " << p["call"].dump() << "\n";
  }
  if (last.contains("sanitize")) {
    const Value& z = last["sanitize"];
    o << z.value("tool", std::string("sanitizer")) << " on " << z.value("workload", std::string("?")) << ": "
      << (z.value("clean", false) ? std::string("clean") : std::to_string(z.value("distinct", 0)) + " distinct finding(s)")
      << " (kernel " << z.value("kernel_status", std::string("?")) << ")\n";
    for (const auto& f : z.value("findings", Value::array())) {
      o << "  " << f.value("kind", std::string()) << " ×" << f.value("count", 0) << "  " << f.value("message", std::string());
      if (f.contains("file")) o << "  at " << f["file"].get<std::string>() << ":" << f.value("line", 0);
      if (f.contains("kernel")) o << "  in " << f["kernel"].get<std::string>();
      o << "\n";
      if (f.contains("thread")) o << "    thread " << f["thread"].get<std::string>() << " block " << f.value("block", std::string()) << "\n";
      if (f.contains("address")) o << "    address " << f["address"].get<std::string>() << "\n";
    }
  }
  if (last.contains("disassembly")) {
    const Value& d = last["disassembly"];
    for (const auto& k : d.value("kernels", Value::array())) {
      o << "== " << k.value("demangled", std::string()) << "  registers " << k.value("registers", 0) << ", shared "
        << k.value("shared_bytes", 0) << " B, stack " << k.value("stack_bytes", 0) << " B, local loads/stores "
        << k.value("local_loads", 0) << "/" << k.value("local_stores", 0) << ", " << k.value("instructions", 0)
        << " instructions\n";
      if (k.contains("sass")) o << k["sass"].get<std::string>();
      if (k.contains("ptx")) o << k["ptx"].get<std::string>();
    }
    for (const auto& n : d.value("notes", Value::array())) o << "note: " << n.get<std::string>() << "\n";
  }
  return o.str();
}

struct Repl {
  Client client;
  std::string session;
  Value observation;
  bool interactive;

  Repl(const std::string& endpoint, bool tty) : client(endpoint), interactive(tty) {}

  const Value& obs() {
    if (session.empty()) throw std::runtime_error("no episode: `reset TASK [LAYER]` first");
    return observation;
  }
  void after_step(const Value& reply) {
    observation = reply["observation"];
    std::cout << render_step(reply);
  }
  void step(Value action) { after_step(client.step(session, std::move(action))); }

  std::string file_arg(std::istringstream& args) {
    std::string path;
    args >> path;
    return path.empty() ? obs()["task"]["main_file"].get<std::string>() : path;
  }

  bool command(const std::string& line, std::istream& in) {
    std::istringstream args(line);
    std::string cmd;
    args >> cmd;
    if (cmd.empty() || cmd[0] == '#') return true;
    if (cmd == "quit" || cmd == "exit") return false;
    if (cmd == "help") {
      std::cout << kHelp;
    } else if (cmd == "tasks") {
      const Value reply = client.list_tasks();  // named: a range-for over a member of a temporary dangles
      for (const auto& t : reply["tasks"])
        std::cout << "  " << t["id"].get<std::string>() << "  " << t["title"].get<std::string>() << "\n";
    } else if (cmd == "reset") {
      std::string task, layer_text, seed_text, extra;
      args >> task >> layer_text >> seed_text >> extra;
      if (task.empty() || !extra.empty()) throw std::runtime_error("usage: reset TASK [LAYER] [SEED]");
      int layer = 0;
      if (!layer_text.empty() && !parse_number(layer_text, layer, 0, 3))
        throw std::runtime_error("the layer is 0, 1, 2 or 3, not '" + layer_text +
                                 "' (usage: reset TASK [LAYER] [SEED])");
      std::optional<std::uint64_t> seed;
      if (std::uint64_t s = 0; !seed_text.empty()) {
        if (!parse_number(seed_text, s, std::uint64_t{0}, std::numeric_limits<std::uint64_t>::max()))
          throw std::runtime_error("the seed is a non-negative integer, not '" + seed_text + "'");
        seed = s;
      }
      Value reply = client.reset(task, layer, seed, {{"label", "d2k play"}});
      session = reply["session"].get<std::string>();
      observation = reply["observation"];
      std::cout << "session " << session << ": " << task << " at L" << layer << "\n"
                << render_task(observation) << render_guidance_titles(observation);
    } else if (cmd == "guidance") {
      std::cout << render_guidance(obs());
    } else if (cmd == "task") {
      std::cout << render_task(obs());
    } else if (cmd == "files") {
      for (const auto& [path, content] : obs()["files"].items())
        std::cout << "  " << path << "  (" << content.get<std::string>().size() << " bytes)\n";
    } else if (cmd == "show") {
      std::string path = file_arg(args);
      const Value& files = obs()["files"];
      if (!files.contains(path)) throw std::runtime_error("no file " + path);
      std::cout << files[path].get<std::string>() << "\n";
    } else if (cmd == "edit") {
      std::string path = file_arg(args);
      const Value& files = obs()["files"];
      std::string content = files.contains(path) ? files[path].get<std::string>() : std::string();
      char tmpl[] = "/tmp/d2k-play-XXXXXX.cu";
      int fd = mkstemps(tmpl, 3);
      if (fd < 0) throw std::runtime_error("cannot create a temporary file");
      [[maybe_unused]] auto n = ::write(fd, content.data(), content.size());
      ::close(fd);
      const char* editor = std::getenv("VISUAL");
      if (!editor || !*editor) editor = std::getenv("EDITOR");
      const std::string ed = editor && *editor ? editor : "vi";
      sandbox::ProcessExit ended;
      std::string start_error;
      try {
        ended = run_editor(ed, tmpl);
      } catch (const std::exception& e) {
        start_error = e.what();
      }
      std::string edited = read_file(tmpl);
      ::unlink(tmpl);
      if (!start_error.empty()) throw std::runtime_error("cannot start the editor: " + start_error + "; nothing sent");
      if (!ended.ok()) throw std::runtime_error("editor " + ended.describe() + "; nothing sent");
      if (edited == content) {
        std::cout << "unchanged; nothing sent\n";
      } else {
        step({{"type", "write_file"}, {"path", path}, {"content", edited}});
      }
    } else if (cmd == "write") {
      std::string path, local;
      args >> path >> local;
      if (local.empty()) throw std::runtime_error("usage: write PATH LOCAL_FILE");
      step({{"type", "write_file"}, {"path", path}, {"content", read_file(local)}});
    } else if (cmd == "replace") {
      std::string path = file_arg(args);
      if (interactive) std::cout << "old text, then a line with a single '.':\n";
      std::string old_text = read_until_dot(in, interactive);
      if (interactive) std::cout << "new text, then a line with a single '.':\n";
      std::string new_text = read_until_dot(in, interactive);
      step({{"type", "edit"}, {"path", path}, {"old", old_text}, {"new", new_text}});
    } else if (cmd == "patch") {
      std::string local;
      args >> local;
      if (local.empty()) throw std::runtime_error("usage: patch LOCAL_DIFF");
      step({{"type", "patch"}, {"diff", read_file(local)}});
    } else if (cmd == "compile" || cmd == "evaluate" || cmd == "submit") {
      obs();
      step({{"type", cmd}});
    } else if (cmd == "profile") {
      obs();
      Value action = {{"type", "profile"}};
      std::string word;
      Value sections = Value::array();
      while (args >> word) {
        if (is_profile_section(word)) sections.push_back(word);
        else if (!action.contains("workload")) action["workload"] = word;
        else throw std::runtime_error("usage: profile [WORKLOAD] [SECTION...]");
      }
      if (!sections.empty()) action["sections"] = sections;
      step(std::move(action));
      std::cout << render_tool(observation["last"]);
    } else if (cmd == "sanitize") {
      obs();
      Value action = {{"type", "sanitize"}};
      std::string word;
      while (args >> word) {
        if (word == "memcheck" || word == "racecheck" || word == "initcheck" || word == "synccheck") action["tool"] = word;
        else if (!action.contains("workload")) action["workload"] = word;
        else throw std::runtime_error("usage: sanitize [TOOL] [WORKLOAD]");
      }
      step(std::move(action));
      std::cout << render_tool(observation["last"]);
    } else if (cmd == "disassemble") {
      obs();
      Value action = {{"type", "disassemble"}};
      std::string word;
      while (args >> word) {
        if (word == "ptx") action["ptx"] = true;
        else if (!action.contains("kernel")) action["kernel"] = word;
        else throw std::runtime_error("usage: disassemble [KERNEL] [ptx]");
      }
      step(std::move(action));
      std::cout << render_tool(observation["last"]);
    } else if (cmd == "log") {
      const Value& last = obs()["last"];
      if (last.is_object() && last.contains("compile"))
        std::cout << last["compile"]["log"].get<std::string>() << "\n";
      else
        std::cout << "no compile yet\n";
    } else if (cmd == "status") {
      Value reply = client.observe(session.empty() ? throw std::runtime_error("no episode") : session);
      observation = reply["observation"];
      std::cout << render_status(observation);
    } else if (cmd == "stats") {
      std::cout << client.stats().dump(2) << "\n";
    } else if (cmd == "close") {
      obs();
      Value reply = client.close(session);
      std::cout << "closed " << session << " after " << reply["steps"] << " steps\n";
      session.clear();
    } else {
      std::cout << "unknown command '" << cmd << "' (help lists them)\n";
    }
    return true;
  }
};

}  // namespace

void add_play(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("play", "Play an episode by hand against a running server (a REPL)");
  auto endpoint = std::make_shared<std::string>("tcp://127.0.0.1:5555");
  auto script = std::make_shared<std::string>();
  auto connect_timeout = std::make_shared<double>(30.0);
  cmd->add_option("--endpoint", *endpoint, "Server to connect to")->capture_default_str();
  cmd->add_option("--connect-timeout", *connect_timeout,
                  "Give up when the server does not answer hello within this many seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--script", *script, "Read commands from this file instead of the terminal");
  cmd->footer(kHelp);
  auto body = [=]() -> int {
    std::ifstream file;
    std::istream* in = &std::cin;
    if (!script->empty()) {
      file.open(*script);
      if (!file) throw std::runtime_error("cannot read " + *script);
      in = &file;
    }
    bool tty = script->empty() && ::isatty(0);
    // Is anyone there? A short-lived probe with its own deadline: the REPL's client waits long
    // (compiles and GPU runs), which would make a dead endpoint look like a hang.
    Value hello;
    {
      Client::Options probe;
      probe.timeout = std::chrono::milliseconds(static_cast<long>(*connect_timeout * 1000));
      probe.retries = 0;
      try {
        hello = Client(*endpoint, probe).hello();
      } catch (const ClientError& e) {
        if (e.code != protocol::ErrorCode::timeout) throw;
        std::ostringstream msg;
        msg << "no d2k server answered at " << *endpoint << " within " << *connect_timeout
            << " s (start one with `d2k serve --endpoint " << *endpoint << "`, or pass --endpoint)";
        throw std::runtime_error(msg.str());
      }
    }
    Repl repl(*endpoint, tty);
    std::cout << "connected to " << *endpoint << ": d2k-gym " << hello["version"].get<std::string>() << ", "
              << (hello["gpus"].empty() ? std::string("no GPU (compile only: evaluate/submit are unavailable)")
                                        : std::to_string(hello["gpus"].size()) + " GPU(s)")
              << "\n";
    if (tty) std::cout << "type `help` for commands\n";
    std::string line;
    int failures = 0;
    while (true) {
      if (tty) std::cout << "d2k> " << std::flush;
      if (!std::getline(*in, line)) break;
      if (!tty && !line.empty() && line[0] != '#') std::cout << "d2k> " << line << "\n";
      try {
        if (!repl.command(line, *in)) break;
      } catch (const ClientError& e) {
        ++failures;
        std::cout << "error " << e.what() << (e.field.empty() ? "" : " (field " + e.field + ")") << "\n";
      } catch (const std::exception& e) {
        ++failures;
        std::cout << "error: " << e.what() << "\n";
      }
    }
    return (!tty && failures > 0) ? 1 : 0;  // a script that hit errors says so
  };
  cmd->callback([&run, body] { run = body; });
}

}  // namespace d2k::cli
