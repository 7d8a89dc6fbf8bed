// Command-line options of the bench programs, on CLI11 as `d2k`'s own commands are (env/cli):
// `--help` prints what the program measures and its options with their defaults; an unknown
// option, a missing value or a value that is not a (finite) number is an error (exit 2) instead of
// being ignored or read as 0.
#pragma once

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace d2k::bench {

class Args {
 public:
  Args(std::string program, std::string about) : app_(std::move(about), std::move(program)) {}

  void option(const std::string& name, int* out, const std::string& help) {
    // Through a long long: CLI11 (2.3) stores an int that overflows, truncated, before it reports it.
    app_.add_option_function<long long>(
            name,
            [out, name](long long v) {
              if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
                throw CLI::ValidationError(name, "out of range");
              *out = static_cast<int>(v);
            },
            help)
        ->default_str(std::to_string(*out));
  }
  void option(const std::string& name, double* out, const std::string& help) {
    app_.add_option(name, *out, help)->capture_default_str()->check(CLI::Validator(
        [](std::string& v) -> std::string {
          char* end = nullptr;
          const double x = std::strtod(v.c_str(), &end);
          return !v.empty() && *end == '\0' && std::isfinite(x) ? "" : "needs a finite number";
        },
        "NUMBER"));
  }
  void option(const std::string& name, std::string* out, const std::string& help) {
    app_.add_option(name, *out, help)->capture_default_str();
  }
  // A comma-separated list; empty items are dropped, an empty list is an error.
  void option(const std::string& name, std::vector<std::string>* out, const std::string& help) {
    std::string def;
    for (const auto& s : *out) def += (def.empty() ? "" : ",") + s;
    app_.add_option_function<std::string>(
            name,
            [out, name](const std::string& v) {
              std::vector<std::string> parts;
              std::stringstream ss(v);
              for (std::string p; std::getline(ss, p, ',');)
                if (!p.empty()) parts.push_back(p);
              if (parts.empty()) throw CLI::ValidationError(name, "needs a comma-separated list");
              *out = std::move(parts);
            },
            help)
        ->default_str(def);
  }
  void flag(const std::string& name, bool* out, const std::string& help) { app_.add_flag(name, *out, help); }

  // -1: go on; otherwise the program's exit code (0 after --help, 2 after a bad argument).
  int parse(int argc, char** argv) {
    try {
      app_.parse(argc, argv);
      return -1;
    } catch (const CLI::Success& e) {  // --help
      app_.exit(e);
      return 0;
    } catch (const CLI::ParseError& e) {
      app_.exit(e);
      return 2;
    }
  }

 private:
  CLI::App app_;
};

}  // namespace d2k::bench
