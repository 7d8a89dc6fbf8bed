// The bench programs' command line (bench/bench_args.hpp): --help, unknown options, missing values
// and values that are not numbers.
#include "catch.hpp"

#include <string>
#include <vector>

#include "bench/bench_args.hpp"

namespace {

struct Argv {
  std::vector<std::string> words;
  std::vector<char*> ptrs;
  explicit Argv(std::vector<std::string> w) : words(std::move(w)) {
    for (auto& s : words) ptrs.push_back(s.data());
  }
  int argc() const { return static_cast<int>(ptrs.size()); }
  char** argv() { return ptrs.data(); }
};

struct Opts {
  int runs = 20;
  double seconds = 30;
  std::string endpoint = "tcp://127.0.0.1:5599";
  std::vector<std::string> tasks = {"vector_add", "softmax"};
  bool no_train = false;
  d2k::bench::Args args{"bench_x", "what it measures"};
  Opts() {
    args.option("--runs", &runs, "runs");
    args.option("--seconds", &seconds, "seconds");
    args.option("--endpoint", &endpoint, "endpoint");
    args.option("--tasks", &tasks, "tasks");
    args.flag("--no-train", &no_train, "no train");
  }
  int parse(std::vector<std::string> w) {
    w.insert(w.begin(), "bench_x");
    Argv a(std::move(w));
    return args.parse(a.argc(), a.argv());
  }
};

}  // namespace

TEST_CASE("bench options: values, flags and lists are taken", "[bench]") {
  Opts o;
  CHECK(o.parse({"--runs", "7", "--seconds", "2.5", "--endpoint", "ipc:///tmp/x", "--tasks", "a,,b", "--no-train"}) == -1);
  CHECK(o.runs == 7);
  CHECK(o.seconds == 2.5);
  CHECK(o.endpoint == "ipc:///tmp/x");
  CHECK(o.tasks == std::vector<std::string>{"a", "b"});
  CHECK(o.no_train);
  Opts d;
  CHECK(d.parse({}) == -1);  // defaults stay
  CHECK(d.runs == 20);
  CHECK_FALSE(d.no_train);
}

TEST_CASE("bench options: --help stops with 0, bad arguments with 2 and leave the defaults", "[bench]") {
  CHECK(Opts().parse({"--help"}) == 0);
  CHECK(Opts().parse({"-h", "--bogus"}) == 0);
  Opts o;
  CHECK(o.parse({"--bogus"}) == 2);
  CHECK(o.parse({"--runs"}) == 2);             // missing value
  CHECK(o.parse({"--runs", "x"}) == 2);        // not a number
  CHECK(o.parse({"--runs", "3x"}) == 2);       // trailing junk
  CHECK(o.parse({"--runs", "99999999999"}) == 2);
  CHECK(o.parse({"--seconds", "nan"}) == 2);
  CHECK(o.parse({"--seconds", ""}) == 2);
  CHECK(o.parse({"--tasks", ","}) == 2);       // an empty list
  CHECK(o.runs == 20);
  CHECK(o.seconds == 30);
  CHECK(o.tasks == std::vector<std::string>{"vector_add", "softmax"});
}
