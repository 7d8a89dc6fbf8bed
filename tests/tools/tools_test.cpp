// sandbox/tools: disassemble and the cuobjdump cache on a kernel nvcc builds here (cuobjdump runs
// jailed, as in the server), and the tools' parsers on their real output formats.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "catch.hpp"

#include "sandbox/eval/properties.hpp"
#include "sandbox/tools/disassemble.hpp"
#include "skip.hpp"

namespace fs = std::filesystem;
using namespace d2k;
using nlohmann::json;

namespace {

std::optional<fs::path> cuobjdump_path() {
  if (std::string(D2K_CUOBJDUMP_PATH).size() > 0 && fs::exists(D2K_CUOBJDUMP_PATH)) return fs::path(D2K_CUOBJDUMP_PATH);
  return runner::find_cuobjdump(D2K_NVCC);
}

// cuobjdump, or a skip (said once per test) when there is none.
std::optional<fs::path> cuobjdump_or_skip() {
  auto tool = cuobjdump_path();
  if (!tool) test::skip("no cuobjdump beside nvcc or on PATH (configure with -DD2K_CUOBJDUMP=...)");
  return tool;
}

// A kernel file with a plain kernel, a spilling one (a local array indexed at run time) and a
// templated one, built once per test binary into a shared object.
const char* kKernels = R"(
#include <cuda_runtime.h>
__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
template <int N> __global__ void spill_kernel(float* out, int k) {
  float acc[N];
  for (int j = 0; j < N; ++j) acc[j] = out[j * k + threadIdx.x];
  float s = 0;
  for (int j = 0; j < N; ++j) s += acc[(j * k) % N] * acc[j];
  out[threadIdx.x] = s;
}
template __global__ void spill_kernel<256>(float*, int);
extern "C" int run(const float* a, const float* b, float* c, int n, cudaStream_t s) {
  add_kernel<<<(n + 255) / 256, 256, 0, s>>>(a, b, c, n);
  return (int)cudaGetLastError();
}
)";

const fs::path& built_object() {
  static fs::path so = [] {
    const fs::path dir = fs::temp_directory_path() / ("d2k-tools-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "k.cu") << kKernels;
    const std::string cmd = std::string("\"") + D2K_NVCC + "\" -shared -Xcompiler -fPIC -arch=sm_90 -lineinfo -o \"" +
                            (dir / "k.so").string() + "\" \"" + (dir / "k.cu").string() + "\" > \"" +
                            (dir / "nvcc.log").string() + "\" 2>&1";
    if (std::system(cmd.c_str()) != 0) return fs::path();
    return dir / "k.so";
  }();
  return so;
}

const json* kernel_named(const json& d, const std::string& part) {
  for (const auto& k : d["kernels"])
    if (k["name"].get<std::string>().find(part) != std::string::npos) return &k;
  return nullptr;
}

}  // namespace

TEST_CASE("split_sass keeps one listing per kernel, drops encodings and counts local traffic", "[tools][disassemble]") {
  const std::string text =
      "\tcode for sm_90\n"
      "\t\tFunction : _Z3fooPf\n"
      "\t.headerflags\t@\"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)\"\n"
      "        /*0000*/                   LDC R1, c[0x0][0x28] ;                          /* 0x00000a00ff017b82 */\n"
      "                                                                                   /* 0x000e220000000800 */\n"
      "        /*0010*/                   STL [R1], R2 ;                                  /* 0x0000000201007387 */\n"
      "        /*0020*/               @P0 LDL R3, [R1+0x4] ;                              /* 0x0000040001030983 */\n"
      "        /*0030*/                   EXIT ;                                          /* 0x000000000000794d */\n"
      "        /*0040*/                   NOP;                                            /* 0x0000000000007918 */\n"
      "\t\t..........\n"
      "\t\tFunction : _Z3fooPf\n"
      "        /*0000*/                   EXIT ;                                          /* 0x000000000000794d */\n";
  const auto s = tools::split_sass(text);
  REQUIRE(s.size() == 1);
  CHECK(s[0].name == "_Z3fooPf");
  CHECK(s[0].instructions == 5);
  CHECK(s[0].lines.size() == 4);  // the trailing NOP padding is not listed
  CHECK(s[0].local_stores == 1);
  CHECK(s[0].local_loads == 1);
  CHECK(s[0].lines[0] == "/*0000*/ LDC R1, c[0x0][0x28] ;");
  CHECK(s[0].lines[2] == "/*0020*/ @P0 LDL R3, [R1+0x4] ;");
}

TEST_CASE("split_ptx cuts .entry blocks and demangle/name_matches read C++ names", "[tools][disassemble]") {
  const std::string text =
      ".version 9.0\n.target sm_90\n.address_size 64\n\n"
      ".visible .entry _Z10add_kernelPKfS0_Pfi(\n.param .u64 p0\n)\n{\n.reg .b32 %r<6>;\nret;\n\n}\n"
      ".entry plain(\n)\n{\nret;\n}\n";
  const auto p = tools::split_ptx(text);
  REQUIRE(p.size() == 2);
  CHECK(p[0].name == "_Z10add_kernelPKfS0_Pfi");
  CHECK(p[0].text.find("ret;") != std::string::npos);
  CHECK(p[0].text.find(".version") == std::string::npos);
  CHECK(p[1].name == "plain");
  CHECK(tools::demangle("_Z10add_kernelPKfS0_Pfi") == "add_kernel(float const*, float const*, float*, int)");
  CHECK(tools::demangle("plain") == "plain");
  CHECK(tools::name_matches("_Z10add_kernelPKfS0_Pfi", "add_kernel(float const*"));
  CHECK_FALSE(tools::name_matches("_Z10add_kernelPKfS0_Pfi", "softmax"));
}

TEST_CASE("build_disassembly caps the listing text and names the kernels when the filter matches none", "[tools][disassemble]") {
  std::string sass = "\t\tFunction : _Z1kv\n";
  for (int i = 0; i < 2000; ++i) {
    char line[128];
    std::snprintf(line, sizeof line, "        /*%04x*/                   FADD R1, R1, R2 ;   /* 0x0 */\n", i * 16);
    sass += line;
  }
  tools::DisassembleRequest req;
  req.max_bytes = 4096;
  const json d = tools::build_disassembly(req, sass, std::nullopt, std::nullopt, "", "");
  REQUIRE(d["kernels"].size() == 1);
  CHECK(d["truncated"] == true);
  CHECK(d["kernels"][0]["sass"].get<std::string>().size() < 4096 + 100);
  CHECK(d["kernels"][0]["instructions"] == 2000);
  req.kernel = "nothing_like_it";
  const json none = tools::build_disassembly(req, sass, std::nullopt, std::nullopt, "", "");
  CHECK(none["matched"] == 0);
  CHECK(none["notes"][0].get<std::string>().find("k()") != std::string::npos);
}

TEST_CASE("disassemble a real object: per-kernel resources, the spilling kernel's local traffic, PTX on request", "[tools][disassemble][nvcc]") {
  const auto tool = cuobjdump_or_skip();
  if (!tool) return;
  const fs::path so = built_object();
  REQUIRE_FALSE(so.empty());
  tools::DisassembleRequest req;
  req.ptx = true;
  const json d = tools::disassemble(tool, so, req);
  INFO(d.dump(2).substr(0, 3000));
  REQUIRE(d["matched"] == 2);
  const json* add = kernel_named(d, "add_kernel");
  const json* spill = kernel_named(d, "spill_kernel");
  REQUIRE(add != nullptr);
  REQUIRE(spill != nullptr);
  CHECK((*add)["demangled"] == "add_kernel(float const*, float const*, float*, int)");
  CHECK((*add)["registers"].get<int>() > 0);
  CHECK((*add)["local_stores"] == 0);
  CHECK((*add)["sass"].get<std::string>().find("EXIT") != std::string::npos);
  CHECK((*add)["ptx"].get<std::string>().find(".entry _Z10add_kernel") != std::string::npos);
  CHECK((*spill)["stack_bytes"].get<int>() >= 1024);
  CHECK((*spill)["local_stores"].get<int>() > 0);
  CHECK((*spill)["demangled"] == "void spill_kernel<256>(float*, int)");

  req.kernel = "spill_kernel<256>";
  req.ptx = false;
  const json only = tools::disassemble(tool, so, req);
  REQUIRE(only["matched"] == 1);
  CHECK_FALSE(only["kernels"][0].contains("ptx"));
}

TEST_CASE("jailed -sass, its ELF files listed side by side, lists what plain cuobjdump -sass lists", "[tools][disassemble][nvcc]") {
  const auto tool = cuobjdump_or_skip();
  if (!tool) return;
  const fs::path so = built_object();
  REQUIRE_FALSE(so.empty());
  runner::ObjectDumpCache::instance().clear();
  const auto jailed = runner::run_cuobjdump(*tool, "-sass", so);
  REQUIRE(jailed.ok);
  const fs::path plain_out = so.parent_path() / "plain.sass";
  REQUIRE(std::system(("\"" + tool->string() + "\" -sass \"" + so.string() + "\" > \"" + plain_out.string() + "\"").c_str()) == 0);
  std::ifstream in(plain_out);
  const std::string plain((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto by_name = [](const std::vector<runner::SassFunction>& fs) {
    std::map<std::string, std::vector<std::string>> m;
    for (const auto& f : fs) m[f.name] = f.opcodes;
    return m;
  };
  const auto a = by_name(runner::parse_sass(jailed.text)), b = by_name(runner::parse_sass(plain));
  CHECK(a.size() >= 2);  // add_kernel, spill_kernel<256>
  CHECK(a == b);
}

TEST_CASE("cuobjdump outputs are cached by the object's content: a known binary runs no jail", "[tools][cache][nvcc]") {
  const auto tool = cuobjdump_or_skip();
  if (!tool) return;
  const fs::path so = built_object();
  REQUIRE_FALSE(so.empty());
  auto& cache = runner::ObjectDumpCache::instance();
  cache.clear();
  const auto before = cache.stats();
  const auto first = runner::run_cuobjdump(*tool, "-res-usage", so);
  REQUIRE(first.ok);
  const auto mid = cache.stats();
  CHECK(mid.misses == before.misses + 1);
  CHECK(mid.entries == 1);

  // The same bytes under another name: a hit, the same text.
  const fs::path copy = so.parent_path() / "copy.so";
  fs::copy_file(so, copy, fs::copy_options::overwrite_existing);
  const auto second = runner::run_cuobjdump(*tool, "-res-usage", copy);
  REQUIRE(second.ok);
  CHECK(second.text == first.text);
  CHECK(cache.stats().hits == mid.hits + 1);

  // One byte changed: a different key (a miss), whatever cuobjdump then says about it.
  {
    std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  const auto hits = cache.stats().hits;
  (void)runner::run_cuobjdump(*tool, "-res-usage", copy);
  CHECK(cache.stats().hits == hits);

  // A capacity below the text: nothing is kept.
  cache.clear();
  cache.set_capacity(16);
  (void)runner::run_cuobjdump(*tool, "-res-usage", so);
  CHECK(cache.stats().entries == 0);
  cache.set_capacity(256ull << 20);
}
