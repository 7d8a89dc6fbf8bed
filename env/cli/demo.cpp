// `d2k demo`: the README's main job. Starts a real `d2k serve` child, plays a scripted episode on
// `vector_add` over the wire, and says plainly what needs a GPU when there is none.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "env/cli/commands.hpp"
#include "env/cli/render.hpp"
#include "protocol/client.hpp"
#include "sandbox/process.hpp"

namespace d2k::cli {

namespace {

using protocol::Value;

const char* kBroken = R"(#include <cuda_runtime.h>
#include <cstdint>

__global__ void add(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i]   // <- missing semicolon: the first compile shows a diagnostic
}

extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream) {
  int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  add<<<(unsigned)blocks, threads, 0, stream>>>(a, b, y, n);
  return (int)cudaGetLastError();
}
)";

struct ChildServer {
  sandbox::Child proc;  // in our process group: a Ctrl-C at the terminal reaches it too
  ~ChildServer() { stop(); }
  void stop() {
    if (proc.pid() <= 0 || proc.reaped()) return;
    proc.signal(SIGTERM);
    proc.wait();
  }
};

void banner(const std::string& s) { std::cout << "\n== " << s << " ==\n" << std::flush; }

}  // namespace

void add_demo(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "demo", "Start a server and play a scripted episode on vector_add (compile-only without a GPU)");
  auto endpoint = std::make_shared<std::string>();
  auto layer = std::make_shared<int>(2);
  cmd->add_option("--endpoint", *endpoint, "Use this running server instead of starting one");
  cmd->add_option("--layer", *layer, "Guidance layer of the episode (0-3)")->capture_default_str();
  auto body = [=]() -> int {
    ChildServer child;
    std::string ep = *endpoint;
    if (ep.empty()) {
      ep = "ipc:///tmp/d2k-demo-" + std::to_string(::getpid()) + ".sock";
      std::string exe = self_exe().string();
      sandbox::SpawnSpec spec;
      spec.argv = {exe, "serve", "--endpoint", ep, "--tasks", default_tasks_dir().string()};
      spec.in = sandbox::Stdio::inherited();
      spec.own_process_group = false;
      banner("starting the server");
      std::cout << "$ d2k serve --endpoint " << ep << "\n" << std::flush;
      try {
        child.proc = sandbox::spawn(spec);
      } catch (const std::exception&) {
        throw std::runtime_error("cannot start " + exe + " serve");
      }
    }
    Client::Options opts;
    opts.timeout = std::chrono::milliseconds(200);
    opts.retries = 0;
    Value hello;
    for (int i = 0;; ++i) {  // the child needs a moment to load tasks and bind
      try {
        Client probe(ep, opts);
        hello = probe.hello();
        break;
      } catch (const ClientError&) {
        if (i > 150) throw std::runtime_error("the server did not answer on " + ep);
        if (child.proc.pid() > 0 && child.proc.try_wait()) {
          throw std::runtime_error("the server exited during start-up (see its messages above)");
        }
      }
    }
    Client client(ep);
    bool has_gpu = !hello["gpus"].empty();
    std::cout << "server d2k-gym " << hello["version"].get<std::string>() << "; GPUs: "
              << (has_gpu ? hello["gpus"].dump() : std::string("none")) << "\n";
    if (!has_gpu)
      std::cout << "NOTE: this machine has no usable GPU. The demo compiles in the sandbox for real; the\n"
                   "      evaluate and submit steps need a GPU and will be answered `no_gpu`.\n";

    banner("reset vector_add at L" + std::to_string(*layer));
    Value reset = client.reset("vector_add", *layer, 1234, {{"label", "d2k demo"}});
    std::string session = reset["session"].get<std::string>();
    std::cout << render_task(reset["observation"]) << render_guidance_titles(reset["observation"]);

    banner("write a kernel with a mistake, and compile it");
    std::cout << render_step(client.step(session, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", kBroken}}));
    std::cout << render_step(client.step(session, {{"type", "compile"}}));

    banner("fix it with an exact-text edit, and compile again");
    std::cout << render_step(client.step(
        session, {{"type", "edit"}, {"path", "kernel.cu"}, {"old", "y[i] = a[i] + b[i]   //"}, {"new", "y[i] = a[i] + b[i];  //"}}));
    std::cout << render_step(client.step(session, {{"type", "compile"}}));

    banner("compile the same source once more: the cache answers");
    std::cout << render_step(client.step(session, {{"type", "compile"}}));

    banner("evaluate and submit");
    for (const char* action : {"evaluate", "submit"}) {
      try {
        std::cout << render_step(client.step(session, {{"type", action}}));
      } catch (const ClientError& e) {
        if (e.code != protocol::ErrorCode::no_gpu) throw;
        std::cout << action << ": not run — " << e.what() << "\n";
      }
    }

    banner("close and server statistics");
    Value closed = client.close(session);
    std::cout << "closed after " << closed["steps"].dump() << " steps, total reward " << closed["total_reward"].dump()
              << "\n";
    Value stats = client.stats();
    std::cout << "compile cache: " << stats["compile"]["cache_hits"].dump() << " hit(s), "
              << stats["compile"]["cache_misses"].dump() << " miss(es); requests " << stats["requests"].dump() << "\n";
    if (child.proc.pid() > 0 && !child.proc.reaped()) {
      banner("stopping the server (SIGTERM)");
      child.stop();
    }
    std::cout << "\ndemo finished" << (has_gpu ? "" : " (compile-only: no GPU here)") << "\n";
    return 0;
  };
  cmd->callback([&run, body] { run = body; });
}

}  // namespace d2k::cli
