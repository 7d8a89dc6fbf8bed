#include "sandbox/runner/csr_gen.hpp"

#include <algorithm>
#include <cmath>

namespace d2k::runner {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Rng {  // splitmix64 stream: fast, and the same on every machine
  std::uint64_t state;
  std::uint64_t next() { return splitmix64(state += 0x632BE59BD9B4E019ull); }
  double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
};

// Integer lengths proportional to the weights, each within [0, cap], summing to exactly nnz.
std::vector<std::int64_t> apportion(const std::vector<double>& w, std::int64_t nnz, std::int64_t cap, Rng& rng) {
  const std::size_t rows = w.size();
  double total = 0;
  for (double x : w) total += x;
  std::vector<std::int64_t> len(rows, 0);
  std::int64_t sum = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const double want = total > 0 ? static_cast<double>(nnz) * w[r] / total : 0.0;
    len[r] = std::min<std::int64_t>(cap, static_cast<std::int64_t>(std::floor(want)));
    sum += len[r];
  }
  // Hand out the rest a few at a time over rows with room, starting at a random row.
  std::int64_t deficit = nnz - sum;
  while (deficit > 0) {
    std::int64_t open = 0;
    for (std::size_t r = 0; r < rows; ++r) open += len[r] < cap ? 1 : 0;
    if (open == 0) throw WireError("bad_job", "csr: nnz does not fit rows x row cap");
    const std::int64_t each = std::max<std::int64_t>(1, deficit / open);
    const std::size_t start = static_cast<std::size_t>(rng.below(rows));
    for (std::size_t k = 0; k < rows && deficit > 0; ++k) {
      const std::size_t r = (start + k) % rows;
      const std::int64_t add = std::min({each, cap - len[r], deficit});
      if (add > 0) {
        len[r] += add;
        deficit -= add;
      }
    }
  }
  return len;
}

// k distinct sorted columns of [0, cols), appended to out.
void pick_columns(std::int64_t k, std::int64_t cols, Rng& rng, std::vector<std::int32_t>& out,
                  std::vector<std::int32_t>& scratch) {
  if (k == 0) return;
  if (k * 16 >= cols) {  // dense row: selection sampling (Knuth's algorithm S), sorted by construction
    std::int64_t need = k;
    for (std::int64_t c = 0; c < cols && need > 0; ++c) {
      if (static_cast<double>(cols - c) * rng.unit() < static_cast<double>(need)) {
        out.push_back(static_cast<std::int32_t>(c));
        --need;
      }
    }
    return;
  }
  // Sparse row: draw, sort, drop repeats, draw again for what is missing (repeats are rare).
  scratch.clear();
  while (static_cast<std::int64_t>(scratch.size()) < k) {
    const std::size_t have = scratch.size();
    for (std::int64_t i = static_cast<std::int64_t>(have); i < k; ++i)
      scratch.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(cols))));
    std::sort(scratch.begin(), scratch.end());
    scratch.erase(std::unique(scratch.begin(), scratch.end()), scratch.end());
  }
  out.insert(out.end(), scratch.begin(), scratch.end());
}

}  // namespace

CsrStructure make_csr(const Generator& g, std::uint64_t seed, const std::function<void()>& progress) {
  if (g.rows < 1 || g.cols < 1 || g.nnz < 1 || g.nnz > 0x7fffffffLL || g.rows >= 0x7fffffffLL ||
      g.cols > 0x7fffffffLL)
    throw WireError("bad_job", "csr sizes out of range");
  const std::int64_t cap = g.max_row > 0 ? std::min(g.max_row, g.cols) : g.cols;
  if (static_cast<double>(cap) * static_cast<double>(g.rows) < static_cast<double>(g.nnz))
    throw WireError("bad_job", "csr: nnz exceeds rows x row cap");
  const std::size_t rows = static_cast<std::size_t>(g.rows);
  Rng rng{splitmix64(seed ^ 0xC5C5C5C5A3A3A3A3ull)};

  std::vector<double> w(rows, 1.0);
  if (g.pattern == CsrPattern::uniform) {
    for (double& x : w) x = 0.2 + rng.unit();
  } else if (g.pattern == CsrPattern::power_law) {
    const double inv = 1.0 / (g.a - 1.0);  // Pareto(x_min = 1): P(X > x) = x^-(alpha-1)
    for (double& x : w) x = std::pow(1.0 - rng.unit(), -inv);  // 1 - u in (0, 1]
  }
  const std::vector<std::int64_t> len = apportion(w, g.nnz, cap, rng);

  CsrStructure s;
  s.row_ptr.resize(rows + 1);
  s.col_idx.reserve(static_cast<std::size_t>(g.nnz));
  std::vector<std::int32_t> scratch;
  s.row_ptr[0] = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    if (progress && (r & 0xFFFF) == 0xFFFF) progress();
    if (g.pattern == CsrPattern::banded) {
      const std::int64_t centre = static_cast<std::int64_t>(
          (static_cast<double>(r) + 0.5) * static_cast<double>(g.cols) / static_cast<double>(g.rows));
      const std::int64_t first = std::clamp<std::int64_t>(centre - len[r] / 2, 0, g.cols - len[r]);
      for (std::int64_t c = 0; c < len[r]; ++c) s.col_idx.push_back(static_cast<std::int32_t>(first + c));
    } else {
      pick_columns(len[r], g.cols, rng, s.col_idx, scratch);
    }
    s.row_ptr[r + 1] = static_cast<std::int32_t>(s.col_idx.size());
  }
  return s;
}

}  // namespace d2k::runner
