// check_task: content checks beyond what load_task validates (guidance free of CUDA code, every
// kernel file exports the entry, a starter without a real kernel, enough hidden workloads).
#include <algorithm>
#include <cctype>
#include <regex>

#include "tasks/loader/task.hpp"

namespace d2k::tasks {
namespace {

// Words that only CUDA/C++ source contains; guidance must describe designs, not paste code.
const char* const kCudaMarkers[] = {
    "__global__",        "__device__",   "__host__", "__shared__", "__syncthreads", "__syncwarp",
    "__launch_bounds__", "__ldg",        "__shfl",   "<<<",        ">>>",           "threadIdx",
    "blockIdx",          "blockDim",     "gridDim",  "cudaMalloc", "cudaMemcpy",    "cudaLaunch",
    "cudaStream_t",      "#include",     "#define",  "#pragma",    "asm(",          "asm volatile",
    "reinterpret_cast",  "extern \"C\"",
};

bool mentions_identifier(std::string_view text, std::string_view name) {
  for (std::size_t pos = text.find(name); pos != std::string_view::npos; pos = text.find(name, pos + 1)) {
    const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    const bool left_ok = pos == 0 || !word(text[pos - 1]);
    const bool right_ok = pos + name.size() == text.size() || !word(text[pos + name.size()]);
    if (left_ok && right_ok) return true;
  }
  return false;
}

std::string squash_space(std::string_view s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

// Removes // and /* */ comments so that a comment cannot satisfy or fail a code check.
std::string strip_comments(std::string_view src) {
  std::string out;
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (src.compare(i, 2, "//") == 0) {
      while (i < src.size() && src[i] != '\n') ++i;
      out += '\n';
    } else if (src.compare(i, 2, "/*") == 0) {
      const std::size_t end = src.find("*/", i + 2);
      i = end == std::string_view::npos ? src.size() : end + 1;
      out += ' ';
    } else {
      out += src[i];
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> find_cuda_code(std::string_view text) {
  std::vector<std::string> problems;
  std::size_t line_no = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    ++line_no;
    const std::string where = "line " + std::to_string(line_no) + ": ";
    std::size_t b = 0;
    while (b < line.size() && (line[b] == ' ' || line[b] == '\t')) ++b;
    const std::string_view body = line.substr(b);
    if (body.rfind("```", 0) == 0 || body.rfind("~~~", 0) == 0) {
      problems.push_back(where + "fenced code block (guidance must not contain code)");
    }
    for (const char* marker : kCudaMarkers) {
      if (line.find(marker) != std::string_view::npos) {
        problems.push_back(where + "CUDA code marker '" + marker + "'");
      }
    }
    std::string_view trimmed = body;
    while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back())))
      trimmed.remove_suffix(1);
    if (!trimmed.empty() && (trimmed.back() == '{' || trimmed == "}" || trimmed == "};")) {
      problems.push_back(where + "brace-delimited code block");
    }
    if (end == text.size()) break;
    start = end + 1;
  }
  return problems;
}

std::vector<std::string> check_task(const Task& task) {
  std::vector<std::string> problems;
  auto problem = [&](const std::string& where, const std::string& what) {
    problems.push_back(where + ": " + what);
  };

  // Kernel files: present, non-empty, exporting the entry with C linkage.
  std::vector<std::string> kernel_files = {"reference.cu",  "baseline.cu",   "starter.cu",
                                           "experts/L1.cu", "experts/L2.cu", "experts/L3.cu"};
  for (const std::string& rel : kernel_files) {
    std::string src;
    try {
      src = read_task_file(task.dir, rel);
    } catch (const TaskError& e) {
      problem(rel, e.what());
      continue;
    }
    const std::string code = strip_comments(src);
    if (code.find_first_not_of(" \t\r\n") == std::string::npos) {
      problem(rel, "empty");
      continue;
    }
    if (!mentions_identifier(code, task.entry)) problem(rel, "does not define the entry " + task.entry);
    if (code.find("extern \"C\"") == std::string::npos)
      problem(rel, "entry must have C linkage (extern \"C\")");
    if (rel == "starter.cu") {
      const std::string want =
          squash_space(task.signature.substr(0, task.signature.find_last_not_of("; \t\r\n") + 1));
      if (squash_space(code).find(want) == std::string::npos) {
        problem(rel, "does not contain the task signature verbatim: " + want);
      }
      if (code.find("<<<") != std::string::npos || code.find("cudaLaunch") != std::string::npos) {
        problem(rel, "launches a kernel; the starter must not contain a solution");
      }
    }
  }
  if (task.starter.empty()) problem("starter.cu", "empty");

  // Guidance: three layers of prose and pseudo-code, never CUDA code.
  if (task.guidance.size() != 3) problem("guidance", "needs L1, L2 and L3");
  for (const Guidance& g : task.guidance) {
    const std::string rel = "guidance/L" + std::to_string(g.layer) + ".md";
    if (g.title.empty()) problem(rel, "no title");
    if (g.text.empty()) problem(rel, "no text");
    // The title line is line 1 of the file; the text starts after it.
    for (const std::string& p : find_cuda_code(g.title)) problem(rel, "title: " + p);
    for (const std::string& p : find_cuda_code(g.text)) problem(rel, p);
  }

  // Workloads: enough visible ones to iterate on, enough hidden ones to catch shape hard-coding.
  std::size_t visible = 0, hidden = 0;
  for (const Workload& w : task.workloads) (w.visible ? visible : hidden)++;
  if (visible < 2)
    problem("task.json: workloads", "needs at least 2 visible workloads, has " + std::to_string(visible));
  if (hidden < 2)
    problem("task.json: workloads", "needs at least 2 hidden workloads, has " + std::to_string(hidden));
  for (const Workload& h : task.workloads) {
    if (h.visible) continue;
    for (const Workload& v : task.workloads) {
      if (!v.visible) continue;
      if (h.name == v.name)
        problem("task.json: workloads", "hidden workload '" + h.name + "' has a visible one's name");
      if (h.sizes == v.sizes && h.params == v.params) {
        problem("task.json: workloads", "hidden workload '" + h.name + "' repeats visible '" + v.name + "'");
      }
    }
  }

  // Every property's layer must have guidance that introduces it.
  for (const Property& p : task.properties) {
    if (p.layer < 1 || p.layer > static_cast<int>(task.guidance.size())) {
      problem("task.json: properties", p.id + " has a layer without guidance");
    }
  }
  return problems;
}

}  // namespace d2k::tasks
