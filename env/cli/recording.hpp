// The recording commands: replay, episodes, report, watch, export (docs/episode-log.md,
// docs/debugging.md, docs/export.md). Helpers shared by them live here.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "env/catalogue.hpp"
#include "env/cli/commands.hpp"
#include "env/patch.hpp"
#include "protocol/codec.hpp"

namespace d2k::cli {

void add_replay(CLI::App& app, Runner& run);
void add_episodes(CLI::App& app, Runner& run);
void add_report(CLI::App& app, Runner& run);
void add_watch(CLI::App& app, Runner& run);
void add_export(CLI::App& app, Runner& run);

// Catalogue selection options shared by episodes, report and export.
struct CatalogueOptions {
  std::string catalogue;  // --catalogue; default <state dir>/catalogue.sqlite
  std::string state_dir;  // --state-dir
  std::optional<std::string> task, label, outcome, since;
  std::optional<int> layer;
  std::optional<std::size_t> limit;
};
void add_catalogue_options(CLI::App* cmd, CatalogueOptions& o);
std::filesystem::path catalogue_path(const CatalogueOptions& o);
env::EpisodeFilter make_filter(const CatalogueOptions& o);

// Text of one request/reply pair for people (replay, watch): the action, the workspace diff against
// `files` (updated to the reply's files), diagnostics, correctness, timings and the reward.
std::string render_exchange(const protocol::Value& request, const protocol::Value& reply, FileMap& files);

}  // namespace d2k::cli
