#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>
extern "C" int d2k_moe_permute(const void* topk_ids, const void* x, int* order, int* offsets, void* rows,
                               int64_t tokens, int64_t k, int64_t experts, int64_t hidden, void* stream);
int main(int argc, char** argv) {
  const int64_t T = atoll(argv[1]), k = atoll(argv[2]), E = atoll(argv[3]), H = atoll(argv[4]);
  const int64_t n = T * k;
  std::mt19937 rng(7);
  std::vector<int> ids(n);
  for (auto& v : ids) v = static_cast<int>(rng() % E);
  uint16_t* x = static_cast<uint16_t*>(std::aligned_alloc(16, ((T * H * 2 + 15) / 16) * 16 + 16));
  for (int64_t i = 0; i < T * H; ++i) x[i] = static_cast<uint16_t>(rng());
  const size_t rows_bytes = ((n * H * 2 + 15) / 16) * 16 + 16;
  uint16_t* rows = static_cast<uint16_t*>(std::aligned_alloc(16, rows_bytes));
  std::memset(rows, 0xFF, rows_bytes);
  std::vector<int> order(n + 4, -7), offsets(E + 1 + 4, -7);
  const int rc = d2k_moe_permute(ids.data(), x, order.data(), offsets.data(), rows, T, k, E, H, nullptr);
  std::vector<int> want(n);
  std::iota(want.begin(), want.end(), 0);
  std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return ids[a] < ids[b]; });
  int64_t bad = 0;
  for (int64_t p = 0; p < n; ++p) if (order[p] != want[p]) { if (bad < 3) std::printf("  order[%lld] = %d, want %d\n", (long long)p, order[p], want[p]); ++bad; }
  for (int64_t e = 0; e <= E; ++e) {
    int64_t c = 0;
    for (int v : ids) c += v < e;
    if (offsets[e] != c) { if (bad < 6) std::printf("  offsets[%lld] = %d, want %lld\n", (long long)e, offsets[e], (long long)c); ++bad; }
  }
  for (int64_t p = 0; p < n; ++p)
    if (std::memcmp(rows + p * H, x + (want[p] / k) * H, H * 2) != 0) { if (bad < 9) std::printf("  row %lld differs\n", (long long)p); ++bad; }
  for (int i = 0; i < 4; ++i) if (order[n + i] != -7 || offsets[E + 1 + i] != -7) ++bad;
  for (size_t b = n * H * 2; b < rows_bytes; ++b) if (reinterpret_cast<unsigned char*>(rows)[b] != 0xFF) { ++bad; break; }
  std::printf("moe T=%lld k=%lld E=%lld H=%lld rc=%d bad=%lld\n", (long long)T, (long long)k, (long long)E, (long long)H, rc, (long long)bad);
  return bad != 0 || rc != 0;
}
