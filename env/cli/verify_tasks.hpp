// `d2k verify-tasks`: proves on a GPU machine that each task is sound (every kernel correct, the
// speed ladder baseline < L1 < L2 < L3, L3 near the speed of light, the design properties where
// the guidance puts them) and writes each task's report beside it, tasks/<task>/RESULTS.md.
#pragma once

#include "env/cli/commands.hpp"

namespace d2k::cli {

void add_verify_tasks(CLI::App& app, Runner& run);

}  // namespace d2k::cli
