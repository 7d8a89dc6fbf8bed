// `disassemble` (issue 20, item 3): the SASS (and PTX on request) of the agent's kernels from its
// compiled object, filtered by kernel name, with registers, shared memory, stack and local-memory
// traffic per kernel, size-capped. cuobjdump runs jailed and cached (sandbox/eval/properties.hpp).
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace d2k::tools {

struct SassListing {                 // one "Function : NAME" block of `cuobjdump -sass`
  std::string name;                  // mangled
  std::vector<std::string> lines;    // "/*0040*/ IADD3 R1, R1, -0x400, RZ ;" (encodings dropped)
  std::size_t instructions = 0;
  std::size_t local_loads = 0;       // LDL: spill reloads or local arrays
  std::size_t local_stores = 0;      // STL: spills or local arrays
};
// Splits `cuobjdump -sass` text into kernels; a kernel printed in several fatbin entries is kept
// once (the first).
std::vector<SassListing> split_sass(std::string_view text);

struct PtxEntry {
  std::string name;                  // the .entry's (mangled) name
  std::string text;                  // from ".entry" to its closing brace
};
// The `.entry` blocks of `cuobjdump -ptx` text.
std::vector<PtxEntry> split_ptx(std::string_view text);

// The demangled name, or `name` itself when it is not a mangled C++ name (or too long to try).
std::string demangle(const std::string& name);

// True when `filter` is empty or a substring of the mangled or the demangled name.
bool name_matches(const std::string& mangled, const std::string& filter);

struct DisassembleRequest {
  std::string kernel;                // substring of the kernel's name; empty: every kernel
  bool sass = true;
  bool ptx = false;
  std::size_t max_bytes = 64u << 10; // listing text in the reply, all kernels together
};

// The reply's `disassembly` object from the three cuobjdump outputs (nullopt: that output is
// missing; the matching *_error says why):
//   {kernels: [{name, demangled, registers, shared_bytes, stack_bytes, local_bytes, instructions,
//     local_loads, local_stores, sass?, ptx?}], kernels_total, matched, truncated, filter, notes[]}
nlohmann::json build_disassembly(const DisassembleRequest& request, const std::optional<std::string>& sass_text,
                                 const std::optional<std::string>& ptx_text,
                                 const std::optional<std::string>& res_usage_text, const std::string& sass_error,
                                 const std::string& ptx_error);

// Runs cuobjdump (jailed, cached) on `object` and builds the reply; `cuobjdump` nullopt: the
// reply says the tool is missing.
nlohmann::json disassemble(const std::optional<std::filesystem::path>& cuobjdump, const std::filesystem::path& object,
                           const DisassembleRequest& request);

}  // namespace d2k::tools
