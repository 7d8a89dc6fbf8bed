// A real server on a real ZeroMQ ipc socket, run on a thread of the test process.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "env/server.hpp"
#include "protocol/client.hpp"
#include "tasks/loader/task.hpp"

namespace d2k::test {

inline std::filesystem::path temp_dir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

// One state dir per test process, so the compile cache is shared by its tests (as in a server).
inline const std::filesystem::path& shared_state_dir() {
  static std::filesystem::path dir = temp_dir("d2k-test-state");
  return dir;
}

inline env::Config test_config() {
  env::Config c;
  static std::atomic<int> counter{0};
  c.endpoint = "ipc:///tmp/d2k-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".sock";
  c.tasks_dir = D2K_TASKS_DIR;
  c.state_dir = shared_state_dir();
  c.compile_workers = 2;
  c.shutdown_grace_s = 10;
  c.finalize();
  return c;
}

struct TestServer {
  // `setup` runs on the server before it binds and runs (test hooks such as Server::set_step_hook).
  explicit TestServer(env::Config config = test_config(), std::shared_ptr<env::GpuBackend> gpu = nullptr,
                      const std::function<void(env::Server&)>& setup = {}) {
    server = std::make_unique<env::Server>(config, tasks::load_tasks(config.tasks_dir), std::move(gpu));
    if (setup) setup(*server);
    server->bind();
    endpoint = server->endpoint();
    thread = std::thread([this] { server->run(); });
  }
  ~TestServer() { stop(); }
  void stop() {
    if (thread.joinable()) {
      server->request_stop();
      thread.join();
    }
  }
  std::unique_ptr<env::Server> server;
  std::string endpoint;
  std::thread thread;
};

// The `d2k` binary of this build.
inline const std::string& d2k_binary() {
  static const std::string bin = std::string(D2K_BINARY_DIR) + "/bin/d2k";
  return bin;
}

struct CommandResult {
  int status;       // exit status, or 128 + signal
  std::string out;  // stdout and stderr
};

// Runs a shell command to completion and collects its output.
inline CommandResult run_command(const std::string& command) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) throw std::runtime_error("popen failed: " + command);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

inline const char* kGoodKernel = R"(#include <cuda_runtime.h>
#include <cstdint>
__global__ void add(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}
extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
  add<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(a, b, y, n);
  return (int)cudaGetLastError();
}
)";

}  // namespace d2k::test
