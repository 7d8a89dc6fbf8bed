// `d2k`: the one binary — server, task tools and clients.
#include <fcntl.h>

#include <iostream>

#include "env/cli/commands.hpp"
#include "env/cli/verify_tasks.hpp"
#include "env/cli/recording.hpp"
#include "env/version.hpp"

int main(int argc, char** argv) {
  // A parent may start us with stdin/stdout/stderr closed; then the first pipes we open would land on
  // 0-2 and be mistaken for (or clobbered as) standard streams by the children we start.
  for (int fd = 0; fd < 3; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0) return 125;
  CLI::App app{"d2k-gym: an environment server for agents that write GPU kernels.\n"
               "Agents open episodes on CUDA tasks at a guidance layer (L0-L3), edit source, compile in a\n"
               "sandbox, evaluate on a GPU and get rewards relative to the expert design.",
               "d2k"};
  app.set_version_flag("--version", std::string("d2k ") + d2k::kVersionString);
  app.require_subcommand(1);
  app.footer("Run `d2k <command> --help` for a command's options. Protocol: protocol/PROTOCOL.md.");
  d2k::cli::Runner run;
  d2k::cli::add_serve(app, run);
  d2k::cli::add_tasks(app, run);
  d2k::cli::add_play(app, run);
  d2k::cli::add_demo(app, run);
  d2k::cli::add_verify_tasks(app, run);
  d2k::cli::add_replay(app, run);
  d2k::cli::add_episodes(app, run);
  d2k::cli::add_report(app, run);
  d2k::cli::add_watch(app, run);
  d2k::cli::add_export(app, run);
  d2k::cli::add_keys(app, run);
  d2k::cli::add_calibrate(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run ? run() : 0;
  } catch (const std::exception& e) {
    std::cerr << "d2k: " << e.what() << "\n";
    return 1;
  }
}
