// The task loader against the model task and against a table of broken task folders built in a
// temporary directory at test time.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "catch.hpp"
#include "contains.hpp"
#include "tasks/loader/task.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace d2k::tasks;

namespace {

const fs::path kVectorAdd = fs::path(D2K_TASKS_DIR) / "vector_add";

// A scratch folder removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("d2k-tasks-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
}

// Copies vector_add into root/name and returns the new folder.
fs::path copy_task(const fs::path& root, const std::string& name = "vector_add") {
  const fs::path dst = root / name;
  fs::copy(kVectorAdd, dst, fs::copy_options::recursive);
  return dst;
}

json read_json(const fs::path& dir) { return json::parse(read(dir / "task.json")); }
void write_json(const fs::path& dir, const json& j) { write(dir / "task.json", j.dump(2)); }

struct Broken {
  std::string name;
  std::function<void(const fs::path&)> mutate;  // applied to a fresh copy of vector_add
  std::string file;                             // expected TaskError::file suffix
  std::string field;                            // expected TaskError::field (exact)
  std::string message;                          // expected substring of what()
  std::string folder = "vector_add";
};

std::function<void(const fs::path&)> set_json(const std::string& pointer, json value) {
  return [pointer, value](const fs::path& dir) {
    json j = read_json(dir);
    j[json::json_pointer(pointer)] = value;
    write_json(dir, j);
  };
}

std::function<void(const fs::path&)> erase_json(const std::string& parent, const std::string& key) {
  return [parent, key](const fs::path& dir) {
    json j = read_json(dir);
    j[json::json_pointer(parent)].erase(key);
    write_json(dir, j);
  };
}

}  // namespace

TEST_CASE("vector_add loads with every field", "[tasks]") {
  const Task t = load_task(kVectorAdd);
  CHECK(t.id == "vector_add");
  CHECK(t.entry == "d2k_vector_add");
  CHECK(t.main_file == "kernel.cu");
  CHECK(t.dir == fs::canonical(kVectorAdd));
  // Tiny workloads are for correctness only; the large ones are timed.
  CHECK_FALSE(t.find_workload("single")->timed);
  CHECK_FALSE(t.find_workload("odd_1m")->timed);
  CHECK(t.find_workload("pow2_64m")->timed);
  REQUIRE(t.args.size() == 4);
  CHECK(t.args[0].name == "a");
  CHECK(t.args[0].role == Role::input);
  CHECK(t.args[0].init["dist"] == "uniform");
  CHECK(t.args[2].role == Role::output);
  CHECK(t.args[3].role == Role::scalar);
  CHECK(t.args[3].dtype == Dtype::i64);
  CHECK(t.args[3].value == "n");

  CHECK(t.visible_workloads().size() == 2);
  CHECK(t.workloads.size() == 5);
  const Workload* w = t.find_workload("pow2_64m");
  REQUIRE(w != nullptr);
  CHECK(w->sizes.at("n") == (std::int64_t{1} << 26));
  CHECK(t.find_workload("nope") == nullptr);
  CHECK(t.flops_of(*w) == double(1 << 26));
  CHECK(t.bytes_of(*w) == 12.0 * double(1 << 26));

  REQUIRE(t.tolerances.count("f32") == 1);
  CHECK(t.tolerances.at("f32").atol == 1e-6);
  CHECK_FALSE(t.tolerances.at("f32").why.empty());
  CHECK(t.properties.size() >= 3);

  REQUIRE(t.guidance.size() == 3);
  CHECK(t.guidance_up_to(0).empty());
  CHECK(t.guidance_up_to(2).size() == 2);
  CHECK(t.guidance_up_to(3).back().layer == 3);
  CHECK_FALSE(t.guidance[0].title.empty());
  CHECK(t.guidance[0].text.rfind("# ", 0) != 0);  // the title line is not part of the text
  CHECK_THROWS_AS(t.guidance_up_to(4), std::invalid_argument);

  CHECK_THAT(t.starter, ContainsSubstring("d2k_vector_add"));
  CHECK(t.expert_path(3) == t.dir / "experts" / "L3.cu");
  CHECK(t.baseline_path() == t.dir / "baseline.cu");
  CHECK(t.content_hash.size() == 32);
  CHECK(t.content_hash.find_first_not_of("0123456789abcdef") == std::string::npos);
}

TEST_CASE("every built-in task passes check_task", "[tasks]") {
  const TaskSet set = load_tasks(D2K_TASKS_DIR);
  REQUIRE(set.errors.empty());
  CHECK(set.tasks.size() >= 7);  // vector_add + the six of task suite part 1
  for (const Task& t : set.tasks) {
    const std::vector<std::string> problems = check_task(t);
    for (const std::string& p : problems) UNSCOPED_INFO(t.id << ": " << p);
    CHECK(problems.empty());
  }
}

TEST_CASE("content hash covers every file and its path", "[tasks]") {
  TempDir tmp;
  const fs::path dir = copy_task(tmp.path);
  const std::string original = load_task(dir).content_hash;
  CHECK(load_task(kVectorAdd).content_hash == original);  // same bytes, other location

  write(dir / "notes.txt", "x");
  const std::string with_note = load_task(dir).content_hash;
  CHECK(with_note != original);
  fs::rename(dir / "notes.txt", dir / "notes2.txt");  // same bytes, other name
  CHECK(load_task(dir).content_hash != with_note);
  fs::remove(dir / "notes2.txt");
  CHECK(load_task(dir).content_hash == original);
  write(dir / "experts/L2.cu", read(dir / "experts/L2.cu") + "\n");
  CHECK(load_task(dir).content_hash != original);
}

TEST_CASE("broken task folders give TaskError naming file and field", "[tasks]") {
  const std::vector<Broken> cases = {
      {"missing expert", [](const fs::path& d) { fs::remove(d / "experts/L2.cu"); }, "experts/L2.cu", "",
       "missing"},
      {"missing task.json", [](const fs::path& d) { fs::remove(d / "task.json"); }, "task.json", "",
       "missing"},
      {"bad JSON", [](const fs::path& d) { write(d / "task.json", "{\"id\": \"vector_add\", "); },
       "task.json", "", "malformed JSON"},
      {"not an object", [](const fs::path& d) { write(d / "task.json", "[1,2]"); }, "task.json", "",
       "must be an object"},
      {"deep nesting",
       [](const fs::path& d) { write(d / "task.json", std::string(100000, '[') + std::string(100000, ']')); },
       "task.json", "", "nested deeper"},
      {"id wrong type", set_json("/id", 5), "task.json", "id", "must be a string"},
      {"title wrong type", set_json("/title", json::array()), "task.json", "title", "must be a string"},
      {"statement empty", set_json("/statement", ""), "task.json", "statement", "must not be empty"},
      {"entry without prefix", set_json("/entry", "vector_add"), "task.json", "entry", "d2k_"},
      {"signature without stream",
       set_json("/signature",
                "extern \"C\" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n)"),
       "task.json", "signature", "parameters"},
      {"signature other name",
       set_json(
           "/signature",
           "extern \"C\" int d2k_other(const float* a, const float* b, float* y, int64_t n, cudaStream_t s)"),
       "task.json", "signature", "entry is"},
      {"args out of order", set_json("/args/0/name", "b2"), "task.json", "args[0].name", "signature"},
      {"input not const",
       set_json("/signature",
                "extern \"C\" int d2k_vector_add(float* a, const float* b, float* y, int64_t n, cudaStream_t "
                "stream)"),
       "task.json", "args[0].role", "const"},
      {"dtype mismatch", set_json("/args/2/dtype", "f64"), "task.json", "args[2].dtype", "does not match"},
      {"args wrong type", set_json("/args", json::object()), "task.json", "args", "must be a list"},
      {"unknown dtype", set_json("/args/0/dtype", "f8"), "task.json", "args[0].dtype", "unknown dtype"},
      {"bad role", set_json("/args/0/role", "inout"), "task.json", "args[0].role", "input, output or scalar"},
      {"shape not a list", set_json("/args/0/shape", "n"), "task.json", "args[0].shape", "must be a list"},
      {"shape item not a string", set_json("/args/0/shape/0", 7), "task.json", "args[0].shape[0]",
       "size expression"},
      {"input without init", erase_json("/args/0", "init"), "task.json", "args[0].init", "missing"},
      {"unknown distribution", set_json("/args/0/init/dist", "poisson"), "task.json", "args[0].init.dist",
       "unknown distribution"},
      {"uniform bounds reversed", set_json("/args/0/init/high", -2.0), "task.json", "args[0].init.high",
       "greater than low"},
      {"normal std wrong type", set_json("/args/1/init/std", "one"), "task.json", "args[1].init.std",
       "must be a number"},
      {"undefined symbol in shape", set_json("/args/0/shape", json::array({"m"})), "task.json",
       "args[0].shape[0]", "unknown identifier 'm'"},
      {"undefined symbol in flops", set_json("/flops", "n * k"), "task.json", "flops",
       "unknown identifier 'k'"},
      {"syntax error in bytes", set_json("/bytes", "12 *"), "task.json", "bytes", "unexpected end"},
      {"symbol missing in one workload", set_json("/workloads/3/sizes", json{{"m", 5}}), "task.json",
       "args[0].shape[0]", "odd_48m"},
      {"visible wrong type", set_json("/workloads/1/visible", "yes"), "task.json", "workloads[1].visible",
       "true or false"},
      {"size wrong type", set_json("/workloads/0/sizes/n", "big"), "task.json", "workloads[0].sizes.n",
       "integer"},
      {"size not positive", set_json("/workloads/0/sizes/n", 0), "task.json", "workloads[0].sizes.n",
       "positive"},
      {"size too large for int64", set_json("/workloads/0/sizes/n", json(std::uint64_t{1} << 63)),
       "task.json", "workloads[0].sizes.n", "out of range"},
      {"tensor too large", set_json("/workloads/0/sizes/n", std::int64_t{1} << 32), "task.json",
       "args[0].shape", "2^31"},
      {"duplicate workload name", set_json("/workloads/1/name", "odd_1m"), "task.json", "workloads[1].name",
       "duplicate"},
      {"missing tolerance", set_json("/tolerances", json::object()), "task.json", "tolerances.f32",
       "missing"},
      {"tolerance without why", set_json("/tolerances/f32/why", "  "), "task.json", "tolerances.f32.why",
       "blank"},
      {"tolerance for no output", set_json("/tolerances/bf16", json{{"atol", 1}, {"rtol", 1}, {"why", "x"}}),
       "task.json", "tolerances.bf16", "no output"},
      {"property layer out of range", set_json("/properties/0/layer", 4), "task.json", "properties[0].layer",
       "1, 2 or 3"},
      {"property unknown kind", set_json("/properties/0/check/kind", "vibes"), "task.json",
       "properties[0].check.kind", "sass"},
      {"property bad regex", set_json("/properties/2/check/pattern", "LDG(("), "task.json",
       "properties[2].check.pattern", "regular expression"},
      {"property unknown workload", set_json("/properties/0/check/workloads", json::array({"nope"})),
       "task.json", "properties[0].check.workloads", "nope"},
      {"compile flag not allowed", set_json("/compile_flags", json::array({"-I/etc"})), "task.json",
       "compile_flags[0]", "allowed"},
      {"main_file with path", set_json("/main_file", "../x.cu"), "task.json", "main_file", "plain file name"},
      {"unknown field", set_json("/colour", "blue"), "task.json", "colour", "unknown field"},
      {"id mismatch", [](const fs::path&) {}, "task.json", "id", "folder name", "vector_add_copy"},
      {"guidance without title",
       [](const fs::path& d) { write(d / "guidance/L1.md", "no title here\nbody\n"); }, "guidance/L1.md",
       "title", "# <title>"},
      {"symlink escape",
       [](const fs::path& d) {
         fs::remove(d / "reference.cu");
         fs::create_symlink("/etc/passwd", d / "reference.cu");
       },
       "reference.cu", "", "outside the task folder"},
      {"relative symlink escape",
       [](const fs::path& d) {
         fs::remove(d / "guidance/L2.md");
         fs::create_symlink("../../../../../../../../etc/hostname", d / "guidance/L2.md");
       },
       "guidance/L2.md", "", "outside the task folder"},
      {"file too large",
       [](const fs::path& d) { write(d / "starter.cu", std::string(kMaxFileBytes + 1, ' ')); }, "starter.cu",
       "", "larger than"},
      {"fifo in folder", [](const fs::path& d) { REQUIRE(::mkfifo((d / "pipe").c_str(), 0600) == 0); },
       "pipe", "", "not a regular file"},
  };
  for (const Broken& c : cases) {
    DYNAMIC_SECTION(c.name) {
      TempDir tmp;
      const fs::path dir = copy_task(tmp.path, c.folder);
      c.mutate(dir);
      try {
        load_task(dir);
        FAIL("no TaskError for: " << c.name);
      } catch (const TaskError& e) {
        INFO(e.what());
        CHECK_THAT(e.file, Catch::Matchers::EndsWith(c.file));
        CHECK(e.field == c.field);
        CHECK_THAT(std::string(e.what()), ContainsSubstring(c.message));
      }
    }
  }
}

TEST_CASE("a symlink that stays inside the folder is allowed", "[tasks]") {
  TempDir tmp;
  const fs::path dir = copy_task(tmp.path);
  fs::rename(dir / "starter.cu", dir / "starter_source.cu");
  fs::create_symlink("starter_source.cu", dir / "starter.cu");
  const Task t = load_task(dir);
  CHECK_THAT(t.starter, ContainsSubstring("d2k_vector_add"));
  CHECK_THROWS_AS(read_task_file(dir, "../vector_add/task.json"), TaskError);
  CHECK_THROWS_AS(read_task_file(dir, "/etc/passwd"), TaskError);
}

TEST_CASE("check_task reports content problems", "[tasks]") {
  struct Case {
    std::string name;
    std::function<void(const fs::path&)> mutate;
    std::string problem;  // substring of one reported problem
  };
  const std::string l2 = "guidance/L2.md";
  const std::vector<Case> cases = {
      {"guidance with a kernel qualifier",
       [&](const fs::path& d) { write(d / l2, "# Title\nWrite a __global__ function that adds.\n"); },
       "guidance/L2.md: line 1: CUDA code marker '__global__'"},
      {"guidance with a fenced block",
       [&](const fs::path& d) { write(d / l2, "# Title\nLike this:\n```\ny = a + b\n```\n"); },
       "guidance/L2.md: line 2: fenced code block"},
      {"guidance with a launch", [&](const fs::path& d) { write(d / l2, "# Title\nCall k<<<g, b>>>(x).\n"); },
       "'<<<'"},
      {"guidance with thread indices",
       [&](const fs::path& d) { write(d / l2, "# Title\nUse i = blockIdx.x * 256 + threadIdx.x.\n"); },
       "threadIdx"},
      {"guidance with an include",
       [&](const fs::path& d) { write(d / "guidance/L3.md", "# T\n#include <cuda.h>\n"); },
       "guidance/L3.md: line 1: CUDA code marker '#include'"},
      {"guidance with a C block",
       [&](const fs::path& d) { write(d / l2, "# Title\nfor (int i = 0; i < n; ++i) {\n  y = a;\n}\n"); },
       "brace-delimited"},
      {"starter with a real kernel",
       [](const fs::path& d) {
         fs::copy_file(d / "experts/L1.cu", d / "starter.cu", fs::copy_options::overwrite_existing);
       },
       "starter.cu: launches a kernel"},
      {"starter without the signature",
       [](const fs::path& d) { write(d / "starter.cu", "extern \"C\" int d2k_vector_add(float* y);\n"); },
       "starter.cu: does not contain the task signature"},
      {"expert without the entry",
       [](const fs::path& d) { write(d / "experts/L3.cu", "// d2k_vector_add\nint x;\n"); },
       "experts/L3.cu: does not define the entry"},
      {"empty baseline", [](const fs::path& d) { write(d / "baseline.cu", "\n"); }, "baseline.cu: empty"},
      {"one hidden workload",
       [](const fs::path& d) {
         json j = read_json(d);
         j["workloads"][3]["visible"] = true;
         j["workloads"][4]["visible"] = true;
         write_json(d, j);
       },
       "at least 2 hidden workloads, has 1"},
      {"one visible workload", set_json("/workloads/0/visible", false),
       "at least 2 visible workloads, has 1"},
      {"hidden repeats visible", set_json("/workloads/2/sizes/n", 1000003),
       "hidden workload 'pow2_64m_plus_7' repeats visible 'odd_1m'"},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      TempDir tmp;
      const fs::path dir = copy_task(tmp.path);
      c.mutate(dir);
      const std::vector<std::string> problems = check_task(load_task(dir));
      std::string all;
      for (const std::string& p : problems) all += p + "\n";
      INFO(all);
      CHECK_THAT(all, ContainsSubstring(c.problem));
    }
  }
}

TEST_CASE("find_cuda_code accepts prose and pseudo-code", "[tasks]") {
  CHECK(find_cuda_code("Map element i to thread i.\n\n    for each i: y[i] = a[i] + b[i]\n").empty());
  CHECK(find_cuda_code("Use 128-bit loads; the grid covers n / 4 vectors.").empty());
  CHECK(find_cuda_code("A block of 256 threads (a set {x, y} of indices).").empty());
}

TEST_CASE("load_tasks returns good tasks and errors for bad folders", "[tasks]") {
  TempDir tmp;
  copy_task(tmp.path);
  const fs::path bad = copy_task(tmp.path, "broken_task");  // id mismatch with its folder
  fs::create_directories(tmp.path / "not_a_task");          // no task.json: ignored
  write(tmp.path / "README.md", "tasks root");
  const TaskSet set = load_tasks(tmp.path);
  REQUIRE(set.tasks.size() == 1);
  CHECK(set.tasks[0].id == "vector_add");
  REQUIRE(set.errors.size() == 1);
  CHECK_THAT(set.errors[0].file, ContainsSubstring("broken_task"));
  CHECK(set.errors[0].field == "id");
  CHECK(set.find("vector_add") == &set.tasks[0]);
  CHECK(set.find("broken_task") == nullptr);

  const TaskSet none = load_tasks(tmp.path / "missing");
  CHECK(none.tasks.empty());
  CHECK(none.errors.size() == 1);
}

TEST_CASE("the real tasks root loads without errors", "[tasks]") {
  const TaskSet set = load_tasks(D2K_TASKS_DIR);
  for (const TaskError& e : set.errors) UNSCOPED_INFO(e.what());
  CHECK(set.errors.empty());
  CHECK(set.find("vector_add") != nullptr);
}

TEST_CASE("corrupted task.json never escapes as anything but TaskError", "[tasks]") {
  TempDir tmp;
  const fs::path dir = copy_task(tmp.path);
  const std::string original = read(dir / "task.json");
  std::mt19937_64 rng(20261130);
  const std::string alphabet = "{}[]\",:0123456789-eE.tfnaxyz \\";
  int loaded = 0, rejected = 0;
  for (int i = 0; i < 300; ++i) {
    std::string text = original;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      const std::size_t pos = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text[pos] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          text.erase(pos, 1 + rng() % 8);
          break;
        default:
          text.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
      }
      if (text.empty()) text = "x";
    }
    write(dir / "task.json", text);
    try {
      load_task(dir);
      ++loaded;
    } catch (const TaskError&) {
      ++rejected;
    }
  }
  CHECK(rejected > 200);  // nearly every corruption is caught, none crashes or escapes
  CHECK(loaded + rejected == 300);
}

// Writes task.json into dir and expects load_task to refuse it with a TaskError naming field_part.
void rejects(const fs::path& dir, const json& bad, const std::string& field_part) {
  write_json(dir, bad);
  try {
    load_task(dir);
    FAIL("accepted: " << field_part);
  } catch (const TaskError& e) {
    INFO(e.what());
    CHECK_THAT(e.field, ContainsSubstring(field_part));
  }
}

TEST_CASE("per-workload dtype and generator overrides need void* and suit the generator", "[tasks]") {
  TempDir tmp;
  const fs::path dir = copy_task(tmp.path);
  json j = read_json(dir);
  j["signature"] =
      "extern \"C\" int d2k_vector_add(const void* a, const float* b, void* y, int64_t n, cudaStream_t stream)";
  j["workloads"][1]["dtypes"] = {{"a", "f64"}, {"y", "f64"}};
  j["workloads"][2]["dtypes"] = {{"a", "i32"}};
  j["workloads"][2]["inits"] = {{"a", {{"dist", "randint"}, {"low", -3}, {"high", 3}}}};
  j["tolerances"]["f64"] = {{"atol", 0}, {"rtol", 1e-12}, {"why", "one rounding in double"}};
  write_json(dir, j);
  const Task t = load_task(dir);
  const Arg& a = t.args[0];
  CHECK(a.untyped);
  CHECK_FALSE(t.args[1].untyped);
  CHECK(t.dtype_of(a, t.workloads[0]) == Dtype::f32);
  CHECK(t.dtype_of(a, t.workloads[1]) == Dtype::f64);
  CHECK(t.dtype_of(t.args[2], t.workloads[1]) == Dtype::f64);
  CHECK(t.dtype_of(a, t.workloads[2]) == Dtype::i32);
  CHECK(t.init_of(a, t.workloads[2])["dist"] == "randint");
  CHECK(t.init_of(a, t.workloads[1])["dist"] == "uniform");

  auto fails = [&](const json& bad, const std::string& field_part) { rejects(dir, bad, field_part); };
  json x = j;
  x["workloads"][0]["dtypes"] = {{"b", "f64"}};  // b is typed in the signature
  fails(x, "dtypes");
  x = j;
  x["workloads"][2].erase("inits");  // i32 with the declared uniform generator
  fails(x, "dtypes.a");
  x = j;
  x["tolerances"].erase("f64");  // an output is f64 in a workload
  fails(x, "tolerances");
  x = j;
  x["workloads"][0]["inits"] = {{"y", {{"dist", "uniform"}, {"low", 0}, {"high", 1}}}};  // outputs have none
  fails(x, "inits");
}

TEST_CASE("custom generators are checked against the workloads", "[tasks]") {
  TempDir tmp;
  const fs::path dir = copy_task(tmp.path);
  json j = read_json(dir);
  j["signature"] =
      "extern \"C\" int d2k_vector_add(const int* a, const float* b, float* y, int64_t n, cudaStream_t stream)";
  j["args"][0]["dtype"] = "i32";
  j["args"][0]["shape"] = {"rows+1"};
  j["args"][0]["init"] = {{"dist", "custom"}, {"generator", "csr"}, {"params", {{"part", "row_ptr"}}}};
  for (auto& w : j["workloads"]) {
    const std::int64_t n = w["sizes"]["n"];
    w["sizes"] = {{"n", n}, {"rows", 10}, {"cols", 10}, {"nnz", 30}};
    w["params"] = {{"pattern", "power_law"}, {"alpha", 1.5}};
  }
  write_json(dir, j);
  CHECK(load_task(dir).args[0].init["generator"] == "csr");

  auto fails = [&](const json& bad, const std::string& field_part) { rejects(dir, bad, field_part); };
  json x = j;
  x["args"][0]["shape"] = {"rows"};  // row_ptr needs rows + 1
  fails(x, "args[0].shape");
  x = j;
  x["workloads"][1]["sizes"]["nnz"] = 101;  // more than rows x cols
  fails(x, "nnz");
  x = j;
  x["workloads"][1]["params"]["pattern"] = "zigzag";
  fails(x, "pattern");
  x = j;
  x["workloads"][1]["sizes"].erase("cols");
  fails(x, "args[0].init");
  x = j;
  x["args"][0]["init"]["generator"] = "mystery";
  fails(x, "generator");
  x = j;
  x["args"][0]["init"] = {{"dist", "custom"}, {"generator", "zipf_bytes"}};  // u8 only
  fails(x, "generator");
}

TEST_CASE("a task's vendor yardstick is checked at load", "[tasks]") {
  TempDir tmp;
  const fs::path dir = copy_task(tmp.path);
  write(dir / "vendor.cu", "// vendor\n");
  json j = read_json(dir);
  j["vendor"] = {{"file", "vendor.cu"}, {"what", "cuBLAS"}, {"libs", {"cublasLt"}}, {"min_fraction", 0.7}};
  write_json(dir, j);
  const Task t = load_task(dir);
  REQUIRE(t.vendor.has_value());
  CHECK(t.vendor->what == "cuBLAS");
  auto fails = [&](const json& bad, const std::string& field_part) { rejects(dir, bad, field_part); };
  json x = j;
  x["vendor"]["file"] = "missing.cu";
  fails(x, "vendor.file");
  x = j;
  x["vendor"]["file"] = "../vendor.cu";
  fails(x, "vendor.file");
  x = j;
  x["vendor"]["libs"] = {"ssl"};
  fails(x, "vendor.libs[0]");
  x = j;
  x["vendor"]["min_fraction"] = 1.5;
  fails(x, "vendor.min_fraction");
  x = j;
  x["vendor"]["extra"] = 1;
  fails(x, "vendor");
}

TEST_CASE("a task's speed-of-light target is a fraction from 0.5 to 1.0, 0.75 unless stated", "[tasks]") {
  TempDir tmp;
  const fs::path dir = copy_task(tmp.path);
  json j = read_json(dir);
  CHECK(load_task(dir).speed_of_light_target == 0.75);
  j["speed_of_light_target"] = 0.8;
  write_json(dir, j);
  CHECK(load_task(dir).speed_of_light_target == 0.8);
  for (const json& bad : {json(0.3), json(1.5), json("80%")}) {
    json x = j;
    x["speed_of_light_target"] = bad;
    rejects(dir, x, "speed_of_light_target");
  }
}

TEST_CASE("a task may state whether it is memory-bound, with the reason", "[tasks]") {
  TempDir tmp;
  const fs::path dir = copy_task(tmp.path);
  json j = read_json(dir);
  CHECK_FALSE(load_task(dir).memory_bound.has_value());
  j["memory_bound"] = {{"value", true}, {"why", "tensor cores: far below the ridge point"}};
  write_json(dir, j);
  const auto t = load_task(dir);
  REQUIRE(t.memory_bound.has_value());
  CHECK(*t.memory_bound);
  CHECK(t.memory_bound_why == "tensor cores: far below the ridge point");
  for (const json& bad : {json(true), json{{"value", true}}, json{{"value", true}, {"why", "  "}},
                          json{{"value", "yes"}, {"why", "x"}}, json{{"value", true}, {"why", "x"}, {"extra", 1}}}) {
    json x = j;
    x["memory_bound"] = bad;
    rejects(dir, x, "memory_bound");
  }
}

TEST_CASE("a task's stated bound (bytes a design must touch) is checked at load", "[tasks]") {
  TempDir tmp;
  const fs::path dir = copy_task(tmp.path);
  json j = read_json(dir);
  j["bound"] = {{"bytes", "24*n"}, {"why", "two passes"}};
  write_json(dir, j);
  const Task t = load_task(dir);
  CHECK(t.bound_bytes == "24*n");
  CHECK(t.bound_why == "two passes");
  const Workload& w = t.workloads.front();
  CHECK(t.sol_bytes_of(w) == 2 * t.bytes_of(w));
  auto fails = [&](const json& bad, const std::string& field_part) { rejects(dir, bad, field_part); };
  json x = j;
  x["bound"]["bytes"] = "n";  // less than bytes (12n)
  fails(x, "bound.bytes");
  x = j;
  x["bound"]["bytes"] = "24*nope";
  fails(x, "bound.bytes");
  x = j;
  x["bound"]["why"] = "  ";
  fails(x, "bound.why");
  x = j;
  x["bound"].erase("why");
  fails(x, "bound.why");
  x = j;
  x["bound"]["extra"] = 1;
  fails(x, "bound");
  json plain = read_json(dir);
  plain.erase("bound");
  write_json(dir, plain);
  const Task p = load_task(dir);
  CHECK(p.bound_bytes.empty());
  CHECK(p.sol_bytes_of(p.workloads.front()) == p.bytes_of(p.workloads.front()));
}
