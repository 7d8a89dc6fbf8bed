// CPU check of an embedding_bag kernel (run through tasks/stencil3d/bench's CUDA-on-CPU shim):
// random bags (sizes 0 .. 2 * nnz / rows, some empty), rows summed in double and rounded once, the
// kernel's output compared under the task's tolerance (atol 0.002, rtol 0.016), and nothing written
// past the end of `out`. Usage: check_embedding_bag ROWS COLS AVG_BAG DIM [MISALIGN]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
struct bf16;
extern "C" int d2k_embedding_bag(const int* offsets, const int* indices, const bf16* table, bf16* out, int64_t rows,
                                 int64_t cols, int64_t nnz, int64_t dim, void* stream);
static float to_f(uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f; }
static uint16_t to_b(float f) { uint32_t u; std::memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return uint16_t(u >> 16); }
int main(int argc, char** argv) {
  const int64_t rows = atoll(argv[1]), cols = atoll(argv[2]), avg = atoll(argv[3]), dim = atoll(argv[4]);
  const int misalign = argc > 5 ? atoi(argv[5]) : 0;  // shift table and out by this many elements
  std::mt19937 rng(7);
  std::vector<int> offsets(rows + 1, 0), indices;
  for (int64_t b = 0; b < rows; ++b) {
    const int len = b % 5 == 3 ? 0 : static_cast<int>(rng() % (2 * avg + 1));
    for (int k = 0; k < len; ++k) indices.push_back(static_cast<int>(rng() % cols));
    offsets[b + 1] = static_cast<int>(indices.size());
  }
  const int64_t nnz = static_cast<int64_t>(indices.size());
  if (indices.empty()) indices.push_back(0);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> tbuf(cols * dim + 16), obuf(rows * dim + 16, 0x7fc1);
  uint16_t* table = tbuf.data() + misalign;
  uint16_t* out = obuf.data() + misalign;
  for (int64_t i = 0; i < cols * dim; ++i) table[i] = to_b(nd(rng));
  const int rc = d2k_embedding_bag(offsets.data(), indices.data(), reinterpret_cast<const bf16*>(table),
                                   reinterpret_cast<bf16*>(out), rows, cols, nnz, dim, nullptr);
  int64_t bad = 0;
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t d = 0; d < dim; ++d) {
      double s = 0;
      for (int j = offsets[b]; j < offsets[b + 1]; ++j) s += to_f(table[int64_t(indices[j]) * dim + d]);
      const float ref = to_f(to_b(static_cast<float>(s)));
      const float got = to_f(out[b * dim + d]);
      if (!(std::fabs(got - ref) <= 0.002 + 0.016 * std::fabs(ref))) {
        if (bad < 3) std::printf("  mismatch bag %lld col %lld: %g vs %g\n", (long long)b, (long long)d, got, ref);
        ++bad;
      }
    }
  for (int64_t i = rows * dim; i < rows * dim + 8; ++i) if (out[i] != 0x7fc1) ++bad;  // nothing past the end
  std::printf("embedding_bag rows=%lld cols=%lld dim=%lld misalign=%d rc=%d bad=%lld\n", (long long)rows,
              (long long)cols, (long long)dim, misalign, rc, (long long)bad);
  return bad != 0 || rc != 0;
}
