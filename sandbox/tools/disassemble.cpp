#include "sandbox/tools/disassemble.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <set>

#include "sandbox/eval/properties.hpp"
#include "sandbox/tools/text.hpp"

namespace d2k::tools {
namespace {

using nlohmann::json;

using text::for_each_line;
using text::trim;

// "/*0040*/ OP ... ;  /* 0x... */" → the address and the instruction, without the encoding.
std::optional<std::string> instruction_line(std::string_view t) {
  if (t.size() < 5 || t.substr(0, 2) != "/*") return std::nullopt;
  const auto close = t.find("*/");
  if (close == std::string_view::npos || close < 3) return std::nullopt;
  for (char c : t.substr(2, close - 2))
    if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;  // an encoding-only line
  std::string_view body = t.substr(close + 2);
  if (const auto enc = body.find("/*"); enc != std::string_view::npos) body = body.substr(0, enc);
  body = trim(body);
  if (body.empty()) return std::nullopt;
  return std::string(t.substr(0, close + 2)) + " " + std::string(body);
}

std::string opcode_of(std::string_view instr) {  // after the address: [@P] [{] OPCODE ...
  std::string_view rest = trim(instr.substr(instr.find("*/") + 2));
  auto next = [&rest]() {
    rest = trim(rest);
    const auto sp = rest.find_first_of(" \t;");
    std::string_view tok = rest.substr(0, sp);
    rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp);
    return tok;
  };
  std::string_view tok = next();
  if (tok == "{") tok = next();
  if (!tok.empty() && tok[0] == '@') tok = next();
  return std::string(tok);
}

}  // namespace

std::vector<SassListing> split_sass(std::string_view text) {
  std::vector<SassListing> out;
  std::set<std::string> seen;
  SassListing* cur = nullptr;
  bool skipping = false;
  for_each_line(text, [&](std::string_view line) {
    const std::string_view t = trim(line);
    if (t.rfind("Function : ", 0) == 0) {
      std::string name(trim(t.substr(11)));
      skipping = !seen.insert(name).second;
      if (!skipping) {
        out.push_back({std::move(name), {}, 0, 0, 0});
        cur = &out.back();
      }
      return;
    }
    if (skipping || cur == nullptr) return;
    auto instr = instruction_line(t);
    if (!instr) return;
    const std::string op = opcode_of(*instr);
    ++cur->instructions;
    if (op.rfind("LDL", 0) == 0) ++cur->local_loads;
    if (op.rfind("STL", 0) == 0) ++cur->local_stores;
    cur->lines.push_back(std::move(*instr));
  });
  // The padding after the final branch-to-self says nothing: drop trailing NOPs from the listing
  // (they stay in the instruction count, which is the code size).
  for (auto& f : out)
    while (!f.lines.empty() && opcode_of(f.lines.back()) == "NOP") f.lines.pop_back();
  return out;
}

std::vector<PtxEntry> split_ptx(std::string_view text) {
  std::vector<PtxEntry> out;
  std::set<std::string> seen;
  std::string block, name;
  bool in = false;
  for_each_line(text, [&](std::string_view line) {
    const std::string_view t = trim(line);
    if (!in) {
      std::string_view head = t;
      for (std::string_view linkage : {".visible ", ".weak "})
        if (head.rfind(linkage, 0) == 0) head.remove_prefix(linkage.size());
      if (head.rfind(".entry ", 0) != 0) return;
      std::string_view rest = trim(head.substr(7));
      name = std::string(rest.substr(0, rest.find_first_of("( \t")));
      block.clear();
      in = true;
    }
    block.append(line).push_back('\n');
    if (t == "}") {
      in = false;
      if (seen.insert(name).second) out.push_back({name, block});
    }
  });
  return out;
}

std::string demangle(const std::string& name) {
  if (name.size() > 4096 || name.rfind("_Z", 0) != 0) return name;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : name;
}

bool name_matches(const std::string& mangled, const std::string& filter) {
  if (filter.empty()) return true;
  return mangled.find(filter) != std::string::npos || demangle(mangled).find(filter) != std::string::npos;
}

json build_disassembly(const DisassembleRequest& request, const std::optional<std::string>& sass_text,
                       const std::optional<std::string>& ptx_text, const std::optional<std::string>& res_usage_text,
                       const std::string& sass_error, const std::string& ptx_error) {
  json notes = json::array();
  std::vector<SassListing> sass;
  std::vector<PtxEntry> ptx;
  std::vector<runner::KernelResources> res;
  if (sass_text) sass = split_sass(*sass_text);
  else notes.push_back("no SASS: " + sass_error);
  if (request.ptx) {
    if (ptx_text) {
      ptx = split_ptx(*ptx_text);
      if (ptx.empty()) notes.push_back("the object holds no PTX (compiled for a real architecture only)");
    } else {
      notes.push_back("no PTX: " + ptx_error);
    }
  }
  if (res_usage_text) res = runner::parse_res_usage(*res_usage_text);

  // Every kernel name any output knows, in SASS order, then the rest.
  std::vector<std::string> names;
  std::set<std::string> known;
  auto add = [&](const std::string& n) {
    if (known.insert(n).second) names.push_back(n);
  };
  for (const auto& s : sass) add(s.name);
  for (const auto& r : res) add(r.name);
  for (const auto& p : ptx) add(p.name);

  std::vector<std::string> selected;
  for (const auto& n : names)
    if (name_matches(n, request.kernel)) selected.push_back(n);
  const std::size_t matched = selected.size();
  // Each selected kernel's listings get an equal share of the reply's budget, so one long kernel
  // does not hide the others; a listing is cut at a line boundary.
  const std::size_t listings = std::max<std::size_t>(1, matched * ((request.sass ? 1 : 0) + (request.ptx ? 1 : 0)));
  const std::size_t share = request.max_bytes / listings;
  bool truncated = false;
  auto take = [&](const std::string& text) {
    if (text.size() <= share) return text;
    truncated = true;
    std::string cut = text.substr(0, share);
    if (const auto nl = cut.rfind('\n'); nl != std::string::npos) cut.resize(nl + 1);
    return cut + "… (truncated at " + std::to_string(share) + " bytes: filter by kernel or raise max_bytes)\n";
  };
  json kernels = json::array();
  for (const auto& n : selected) {
    json k = {{"name", n}, {"demangled", demangle(n)}};
    for (const auto& r : res)
      if (r.name == n) {
        k["registers"] = r.registers;
        k["shared_bytes"] = r.shared_bytes;
        k["stack_bytes"] = r.stack_bytes;
        k["local_bytes"] = r.local_bytes;
      }
    for (const auto& s : sass)
      if (s.name == n) {
        k["instructions"] = s.instructions;
        k["local_loads"] = s.local_loads;
        k["local_stores"] = s.local_stores;
        if (request.sass) {
          std::string text;
          for (const auto& l : s.lines) text.append(l).push_back('\n');
          k["sass"] = take(text);
        }
      }
    if (request.ptx)
      for (const auto& p : ptx)
        if (p.name == n) k["ptx"] = take(p.text);
    kernels.push_back(std::move(k));
  }
  if (matched == 0 && !request.kernel.empty()) {
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + demangle(n);
    notes.push_back("no kernel name contains '" + request.kernel + "'" + (all.empty() ? "" : "; kernels: " + all));
  }
  return {{"kernels", kernels},    {"kernels_total", names.size()}, {"matched", matched},
          {"truncated", truncated}, {"filter", request.kernel},      {"notes", notes}};
}

json disassemble(const std::optional<std::filesystem::path>& cuobjdump, const std::filesystem::path& object,
                 const DisassembleRequest& request) {
  if (!cuobjdump) {
    return build_disassembly(request, std::nullopt, std::nullopt, std::nullopt,
                             "cuobjdump not found beside nvcc or on PATH", "cuobjdump not found beside nvcc or on PATH");
  }
  std::optional<std::string> sass, ptx, res;
  std::string sass_error, ptx_error;
  // -sass is read for the counts even when only PTX is asked for.
  if (auto o = runner::run_cuobjdump(*cuobjdump, "-sass", object); o.ok) sass = std::move(o.text);
  else sass_error = o.error;
  if (request.ptx) {
    if (auto o = runner::run_cuobjdump(*cuobjdump, "-ptx", object); o.ok) ptx = std::move(o.text);
    else ptx_error = o.error;
  }
  if (auto o = runner::run_cuobjdump(*cuobjdump, "-res-usage", object); o.ok) res = std::move(o.text);
  return build_disassembly(request, sass, ptx, res, sass_error, ptx_error);
}

}  // namespace d2k::tools
