// The smallest useful d2k client: open an episode, write a kernel, compile it, evaluate it when the
// server has a GPU, and close.
//   build/bin/example_minimal_client [tcp://127.0.0.1:5555]
#include <iostream>

#include "protocol/client.hpp"

int main(int argc, char** argv) {
  std::string endpoint = argc > 1 ? argv[1] : "tcp://127.0.0.1:5555";
  try {
    d2k::Client client(endpoint);
    auto hello = client.hello();
    bool gpu = !hello["gpus"].empty();
    auto reset = client.reset("vector_add", 1, 42);
    std::string session = reset["session"];
    std::cout << "episode " << session << " on " << reset["observation"]["task"]["title"] << "\n";
    const char* kernel = R"(#include <cuda_runtime.h>
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
    client.step(session, {{"type", "write_file"}, {"path", "kernel.cu"}, {"content", kernel}});
    auto compiled = client.step(session, {{"type", "compile"}});
    std::cout << "compile ok: " << compiled["observation"]["last"]["ok"] << "\n";
    if (gpu) {
      auto evaluated = client.step(session, {{"type", "evaluate"}});
      std::cout << "evaluate: reward " << evaluated["reward"] << "\n";
    } else {
      std::cout << "no GPU on this server: evaluate/submit skipped\n";
    }
    client.close(session);
    return 0;
  } catch (const d2k::ClientError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
