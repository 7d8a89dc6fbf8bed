// Command-line options of the bench programs: `--help` prints what the program measures and its
// options with their defaults; an unknown option, a missing value or a value that is not a number
// is an error (exit 2) instead of being ignored or read as 0.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace d2k::bench {

class Args {
 public:
  Args(std::string program, std::string about) : program_(std::move(program)), about_(std::move(about)) {}

  void option(const std::string& name, int* out, const std::string& help) {
    add(name, "N", std::to_string(*out), help, [out](const std::string& v, std::string& err) {
      char* end = nullptr;
      errno = 0;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || x < -2147483647L || x > 2147483647L) {
        err = "needs a whole number";
        return false;
      }
      *out = static_cast<int>(x);
      return true;
    });
  }
  void option(const std::string& name, double* out, const std::string& help) {
    std::ostringstream d;
    d << *out;
    add(name, "X", d.str(), help, [out](const std::string& v, std::string& err) {
      char* end = nullptr;
      errno = 0;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(x)) {
        err = "needs a number";
        return false;
      }
      *out = x;
      return true;
    });
  }
  void option(const std::string& name, std::string* out, const std::string& help) {
    add(name, "S", *out, help, [out](const std::string& v, std::string&) {
      *out = v;
      return true;
    });
  }
  // A comma-separated list.
  void option(const std::string& name, std::vector<std::string>* out, const std::string& help) {
    std::string d;
    for (const auto& s : *out) d += (d.empty() ? "" : ",") + s;
    add(name, "A,B", d, help, [out](const std::string& v, std::string& err) {
      std::vector<std::string> parts;
      std::stringstream ss(v);
      for (std::string p; std::getline(ss, p, ',');)
        if (!p.empty()) parts.push_back(p);
      if (parts.empty()) {
        err = "needs a comma-separated list";
        return false;
      }
      *out = std::move(parts);
      return true;
    });
  }
  void flag(const std::string& name, bool* out, const std::string& help) {
    Opt o{name, "", "", help, {}, out};
    opts_.push_back(std::move(o));
  }

  // -1: go on; otherwise the program's exit code (0 after --help, 2 after a bad argument).
  int parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        usage(stdout);
        return 0;
      }
      const Opt* o = nullptr;
      for (const auto& c : opts_)
        if (c.name == a) o = &c;
      if (o == nullptr) {
        std::fprintf(stderr, "%s: unknown argument '%s' (--help lists the options)\n", program_.c_str(), a.c_str());
        return 2;
      }
      if (o->flag != nullptr) {
        *o->flag = true;
        continue;
      }
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value (%s)\n", program_.c_str(), a.c_str(), o->meta.c_str());
        return 2;
      }
      const std::string v = argv[++i];
      std::string err;
      if (!o->set(v, err)) {
        std::fprintf(stderr, "%s: %s '%s': %s\n", program_.c_str(), a.c_str(), v.c_str(), err.c_str());
        return 2;
      }
    }
    return -1;
  }

  void usage(std::FILE* f) const {
    std::fprintf(f, "usage: %s [options]\n\n%s\n\noptions:\n", program_.c_str(), about_.c_str());
    for (const auto& o : opts_) {
      const std::string head = o.flag != nullptr ? o.name : o.name + " " + o.meta;
      std::fprintf(f, "  %-22s %s", head.c_str(), o.help.c_str());
      if (o.flag == nullptr) std::fprintf(f, " (default: %s)", o.def.empty() ? "none" : o.def.c_str());
      std::fprintf(f, "\n");
    }
    std::fprintf(f, "  %-22s %s\n", "--help, -h", "this text");
  }

 private:
  struct Opt {
    std::string name, meta, def, help;
    std::function<bool(const std::string&, std::string&)> set;
    bool* flag = nullptr;
  };
  void add(const std::string& name, const std::string& meta, const std::string& def, const std::string& help,
           std::function<bool(const std::string&, std::string&)> set) {
    opts_.push_back(Opt{name, meta, def, help, std::move(set), nullptr});
  }

  std::string program_, about_;
  std::vector<Opt> opts_;
};

}  // namespace d2k::bench
