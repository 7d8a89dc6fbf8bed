// The trusted CSR structure generator behind task.json's {"dist":"custom","generator":"csr"}:
// row pointers and column indices of a rows x cols sparse matrix with exactly nnz nonzeros, in one
// of three patterns (uniform, power_law, banded), a pure function of (seed, shape, pattern). Host
// code, single-threaded (the agent-mode runner must not start threads), testable on a CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sandbox/runner/wire.hpp"

namespace d2k::runner {

struct CsrStructure {
  std::vector<std::int32_t> row_ptr;   // rows + 1, row_ptr[0] = 0, row_ptr[rows] = nnz, non-decreasing
  std::vector<std::int32_t> col_idx;   // nnz, sorted and unique within each row, in [0, cols)
};

// Throws WireError("bad_job") for shapes it cannot satisfy (nnz > rows * cap, sizes out of range).
//  - uniform: row lengths drawn around nnz/rows (between about 1/3 and 5/3 of it), columns uniform;
//  - power_law: row lengths ~ Pareto with tail exponent alpha (g.a), rows independent (heavy rows
//    scattered), lengths capped at max_row (or cols), columns uniform; empty rows possible;
//  - banded: lengths nnz/rows (the remainder spread), contiguous columns centred on r*cols/rows.
// `progress` (optional) is called every 65536 rows, so a long build can tell its parent it is alive
// (the runner sends a heartbeat: the parent kills a runner silent for 10 s).
CsrStructure make_csr(const Generator& g, std::uint64_t seed, const std::function<void()>& progress = {});

}  // namespace d2k::runner
