// Compiler output → Diagnostic records. Hand-written scanners (no std::regex): the input is
// untrusted and may hold very long lines; each line is scanned in linear time.
#include <cctype>
#include <string_view>

#include "sandbox/compiler.hpp"

namespace d2k::sandbox {
namespace {

constexpr std::size_t kMaxMessage = 2000;

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string workspace_file(std::string_view file) {
  file = trim(file);
  if (starts_with(file, "/job/")) file.remove_prefix(5);
  return std::string(file);
}

std::string message(std::string_view s) { return std::string(trim(s).substr(0, kMaxMessage)); }

// Reads digits at s[i...]; returns the count of digits read and the value (capped).
std::size_t read_number(std::string_view s, std::size_t i, int* value) {
  std::size_t j = i;
  long v = 0;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) {
    if (v < 100000000) v = v * 10 + (s[j] - '0');
    ++j;
  }
  *value = static_cast<int>(v);
  return j - i;
}

// "error", "fatal error", "warning", … at the start of s, followed by an optional " #NNN-D" and
// ':'. Returns the normalized severity and sets *rest to the text after the colon.
bool read_severity(std::string_view s, std::string* severity, std::string_view* rest) {
  struct Word {
    std::string_view text, severity;
  };
  static constexpr Word kWords[] = {
      {"fatal error", "fatal"},   {"catastrophic error", "fatal"}, {"internal compiler error", "error"},
      {"error", "error"},         {"warning", "warning"},          {"note", "note"},
      {"remark", "note"},         {"fatal", "fatal"},
  };
  for (const Word& w : kWords) {
    if (!starts_with(s, w.text)) continue;
    std::string_view after = s.substr(w.text.size());
    if (starts_with(after, " #")) {  // nvcc front end: "error #20-D:"
      std::size_t colon = after.find(':');
      if (colon == std::string_view::npos || colon > 16) return false;
      after.remove_prefix(colon);
    }
    std::size_t sp = after.find_first_not_of(' ');
    if (sp == std::string_view::npos || after[sp] != ':') return false;
    after.remove_prefix(sp);
    *severity = std::string(w.severity);
    *rest = after.substr(1);
    return true;
  }
  return false;
}

// gcc: "file:line:col: severity: message" or "file:line: severity: message".
bool parse_gcc(std::string_view line, Diagnostic* d) {
  for (std::size_t i = line.find(':'); i != std::string_view::npos; i = line.find(':', i + 1)) {
    if (i == 0) continue;  // no file name
    int ln = 0, col = 0;
    std::size_t n = read_number(line, i + 1, &ln);
    if (n == 0 || i + 1 + n >= line.size() || line[i + 1 + n] != ':') continue;
    std::size_t j = i + 1 + n + 1;
    std::size_t m = read_number(line, j, &col);
    if (m > 0 && j + m < line.size() && line[j + m] == ':') j += m + 1;
    else col = 0;
    if (j >= line.size() || line[j] != ' ') continue;
    std::string_view rest;
    if (!read_severity(line.substr(j + 1), &d->severity, &rest)) continue;
    d->file = workspace_file(line.substr(0, i));
    d->line = ln;
    d->column = col;
    d->message = message(rest);
    return true;
  }
  return false;
}

// nvcc front end: "file(line): severity: message".
bool parse_nvcc_front_end(std::string_view line, Diagnostic* d) {
  for (std::size_t i = line.find('('); i != std::string_view::npos; i = line.find('(', i + 1)) {
    if (i == 0) continue;  // no file name
    int ln = 0;
    std::size_t n = read_number(line, i + 1, &ln);
    if (n == 0 || line.substr(i + 1 + n, 3) != "): ") continue;
    std::string_view rest;
    if (!read_severity(line.substr(i + 1 + n + 3), &d->severity, &rest)) continue;
    d->file = workspace_file(line.substr(0, i));
    d->line = ln;
    d->column = 0;
    d->message = message(rest);
    return true;
  }
  return false;
}

// "ptxas error   : msg", "ptxas /tmp/x.ptx, line 5; error   : msg", "nvcc fatal   : msg".
bool parse_tool(std::string_view line, Diagnostic* d) {
  for (std::string_view tool : {std::string_view("ptxas "), std::string_view("nvcc "), std::string_view("nvlink "),
                                std::string_view("fatbinary ")}) {
    if (!starts_with(line, tool)) continue;
    std::string_view rest = line.substr(tool.size());
    std::string file;
    int ln = 0;
    if (std::size_t at = rest.find(", line "); at != std::string_view::npos && at < rest.find(':')) {
      file = workspace_file(rest.substr(0, at));
      std::size_t n = read_number(rest, at + 7, &ln);
      rest = rest.substr(at + 7 + n);
      if (starts_with(rest, ";")) rest.remove_prefix(1);
      rest = trim(rest);
    }
    std::string_view msg;
    if (!read_severity(rest, &d->severity, &msg)) return false;
    d->file = file.empty() ? std::string(trim(tool)) : file;
    d->line = ln;
    d->column = 0;
    d->message = message(msg);
    return true;
  }
  return false;
}

// Linker: "file.cu:(.text+0x1a): undefined reference to `f'", "/usr/bin/ld: cannot find -lx",
// "collect2: error: ld returned 1 exit status".
bool parse_linker(std::string_view line, Diagnostic* d) {
  if (line.find("undefined reference to") != std::string_view::npos) {
    std::size_t colon = line.find(":(");
    d->file = colon == std::string_view::npos ? std::string() : workspace_file(line.substr(0, colon));
    std::size_t at = line.find("undefined reference to");
    d->severity = "error";
    d->line = d->column = 0;
    d->message = message(line.substr(at));
    return true;
  }
  for (std::string_view ld : {std::string_view("/usr/bin/ld: "), std::string_view("ld: "), std::string_view("collect2: ")}) {
    if (!starts_with(line, ld)) continue;
    std::string_view rest = line.substr(ld.size());
    std::string severity;
    std::string_view msg;
    if (read_severity(rest, &severity, &msg)) {
      d->severity = severity;
      d->message = message(msg);
    } else if (rest.find("cannot find") != std::string_view::npos || rest.find("error") != std::string_view::npos) {
      d->severity = "error";
      d->message = message(rest);
    } else {
      return false;
    }
    d->file = std::string(trim(ld.substr(0, ld.size() - 2)));
    d->line = d->column = 0;
    return true;
  }
  return false;
}

}  // namespace

std::vector<Diagnostic> parse_diagnostics(const std::string& log) {
  std::vector<Diagnostic> out;
  std::string_view rest(log);
  while (!rest.empty()) {
    std::size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    Diagnostic d;
    if (parse_tool(line, &d) || parse_nvcc_front_end(line, &d) || parse_gcc(line, &d) || parse_linker(line, &d))
      out.push_back(std::move(d));
  }
  return out;
}

}  // namespace d2k::sandbox
