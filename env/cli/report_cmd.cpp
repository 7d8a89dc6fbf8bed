// `d2k report`: the D2K diagnosis over catalogued episodes (text tables; --html for a page with charts).
#include <fstream>
#include <iostream>

#include "env/cli/recording.hpp"
#include "env/report.hpp"

namespace d2k::cli {

void add_report(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "report", "D2K diagnosis per agent and layer: correctness, speedup, fraction of expert, design properties");
  auto o = std::make_shared<CatalogueOptions>();
  auto html = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto title = std::make_shared<std::string>("d2k-gym report");
  add_catalogue_options(cmd, *o);
  cmd->add_option("--html", *html, "Also write one self-contained HTML page (inline SVG charts) to this file");
  cmd->add_option("--title", *title, "Title of the HTML page")->capture_default_str();
  cmd->add_flag("--json", *as_json, "Print the numbers as JSON instead of tables");
  cmd->callback([&run, o, html, as_json, title] {
    run = [o, html, as_json, title]() -> int {
      std::filesystem::path path = catalogue_path(*o);
      if (!std::filesystem::exists(path)) {
        std::cerr << "d2k report: no catalogue at " << path << "\n";
        return 1;
      }
      env::Catalogue catalogue(path);
      env::Report report = env::build_report(catalogue.query(make_filter(*o)));
      if (*as_json)
        std::cout << report.to_json().dump(2) << "\n";
      else
        std::cout << env::render_report_text(report);
      if (!html->empty()) {
        std::ofstream out(*html, std::ios::binary | std::ios::trunc);
        out << env::render_report_html(report, *title);
        if (!out.good()) {
          std::cerr << "d2k report: cannot write " << *html << "\n";
          return 1;
        }
        std::cerr << "d2k report: wrote " << *html << "\n";
      }
      return 0;
    };
  });
}

}  // namespace d2k::cli
