#include "env/cli/render.hpp"

#include <cstdio>
#include <sstream>

namespace d2k::cli {

using protocol::Value;

namespace {
std::string str(const Value& v, const char* key) {
  auto it = v.find(key);
  return it != v.end() && it->is_string() ? it->get<std::string>() : std::string();
}
}  // namespace

std::string render_task(const Value& o) {
  std::ostringstream out;
  const Value& t = o["task"];
  out << "task " << str(t, "id") << ": " << str(t, "title") << "\n"
      << str(t, "statement") << "\n"
      << "entry point: " << str(t, "signature") << "\n"
      << "visible workloads:";
  for (const auto& w : t["workloads"]) {
    out << "  " << str(w, "name") << " (";
    bool first = true;
    for (const auto& [k, v] : w["sizes"].items()) {
      out << (first ? "" : ", ") << k << "=" << v.dump();
      first = false;
    }
    out << ")";
  }
  out << "\nyour file: " << str(t, "main_file") << "\n";
  return out.str();
}

std::string render_guidance_titles(const Value& o) {
  std::ostringstream out;
  if (o["guidance"].empty()) {
    out << "guidance: none (layer 0) — the reward target is the full expert design\n";
  } else {
    out << "guidance (`guidance` shows the texts):\n";
    for (const auto& g : o["guidance"]) out << "  L" << g["layer"].dump() << ": " << str(g, "title") << "\n";
  }
  return out.str();
}

std::string render_guidance(const Value& o) {
  std::ostringstream out;
  if (o["guidance"].empty()) out << "no guidance at layer 0\n";
  for (const auto& g : o["guidance"])
    out << "== L" << g["layer"].dump() << ": " << str(g, "title") << " ==\n" << str(g, "text") << "\n\n";
  return out.str();
}

std::string render_status(const Value& o) {
  std::ostringstream out;
  const Value& b = o["budget"];
  out << "step " << o["step"].dump() << "; steps " << b["steps_used"].dump() << "/" << b["max_steps"].dump()
      << ", compiles " << b["compiles_used"].dump() << "/" << b["max_compiles"].dump() << ", evaluations "
      << b["evaluations_used"].dump() << "/" << b["max_evaluations"].dump();
  if (o["done"].get<bool>()) out << "; episode ended: " << str(o, "end_reason");
  out << "\n";
  if (!o["last"].is_null()) out << render_last(o["last"]);
  return out.str();
}

std::string render_last(const Value& last) {
  std::ostringstream out;
  out << str(last, "action") << ": " << (last.value("ok", false) ? "ok" : "FAILED");
  if (last.contains("error"))
    out << " [" << str(last["error"], "code") << "] " << str(last["error"], "message");
  out << "\n";
  if (last.contains("compile")) {
    const Value& c = last["compile"];
    char buf[128];
    std::snprintf(buf, sizeof buf, "  compile %s in %.2f s%s\n", c.value("ok", false) ? "ok" : "failed",
                  c.value("seconds", 0.0), c.value("cached", false) ? " (cached: nvcc not run)" : "");
    out << buf;
    for (const auto& d : c["diagnostics"])
      out << "  " << str(d, "file") << ":" << d["line"].dump() << ":" << d["column"].dump() << ": "
          << str(d, "severity") << ": " << str(d, "message") << "\n";
    if (c.value("diagnostics_dropped", 0) > 0) out << "  (" << c["diagnostics_dropped"].dump() << " more)\n";
  }
  if (last.contains("evaluation")) out << "  evaluation: " << last["evaluation"].dump() << "\n";
  return out.str();
}

std::string render_step(const Value& r) {
  std::ostringstream out;
  out << render_last(r["observation"]["last"]);
  char buf[160];
  std::snprintf(buf, sizeof buf, "  reward %.3f%s%s\n", r.value("reward", 0.0),
                r.value("terminated", false) ? ", terminated" : "", r.value("truncated", false) ? ", truncated" : "");
  out << buf;
  if (r["observation"].value("done", false)) out << "  episode ended: " << str(r["observation"], "end_reason") << "\n";
  return out.str();
}

}  // namespace d2k::cli
