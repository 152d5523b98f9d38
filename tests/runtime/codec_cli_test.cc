// The `fedrt codec` tools as a user runs them: real files, the real binary.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "run_cli.h"

namespace {

using Run = fedrt::testing::CliRun;
using fedrt::testing::RunCli;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/fedrt_codec_cli_" + std::to_string(getpid()) + "_" + name;
}

std::vector<float> WriteRandomVector(const std::string& path, std::size_t d) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> v(d);
  for (float& x : v) x = normal(rng);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), static_cast<long>(4 * d));
  return v;
}

std::vector<float> ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const auto size = static_cast<std::size_t>(in.tellg());
  std::vector<float> v(size / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<long>(size));
  return v;
}

TEST_CASE("codec encode then decode reproduces an fp32 vector exactly") {
  const std::string in = TempPath("in.f32"), payload = TempPath("payload"), out = TempPath("out.f32");
  const auto input = WriteRandomVector(in, 1234);
  Run encode = RunCli("codec encode --codec fp32 --seed 9 --round 2 --sender 5 " + in + " " + payload);
  INFO(encode.output);
  REQUIRE(encode.exit_code == 0);
  CHECK(encode.output.find("1234 floats") != std::string::npos);
  Run decode = RunCli("codec decode --seed 9 " + payload + " " + out);
  INFO(decode.output);
  REQUIRE(decode.exit_code == 0);
  CHECK(ReadRaw(out) == input);
  for (const std::string& p : {in, payload, out}) std::remove(p.c_str());
}

TEST_CASE("codec stats prints bits per coordinate and error as JSON") {
  const std::string in = TempPath("stats.f32");
  WriteRandomVector(in, 4096);
  Run stats = RunCli("codec stats --codec fp32 --json " + in);
  INFO(stats.output);
  REQUIRE(stats.exit_code == 0);
  CHECK(stats.output.find("\"bits_per_coordinate\"") != std::string::npos);
  CHECK(stats.output.find("\"normalized_error\":0.0") != std::string::npos);
  std::remove(in.c_str());
}

TEST_CASE("codec tools fail clearly on a missing file, a bad spec and a corrupt payload") {
  Run missing = RunCli("codec stats --codec fp32 /nonexistent/file.f32");
  CHECK(missing.exit_code != 0);
  CHECK(missing.output.find("/nonexistent/file.f32") != std::string::npos);
  const std::string in = TempPath("bad.f32"), payload = TempPath("bad.payload");
  WriteRandomVector(in, 16);
  Run bad_spec = RunCli("codec encode --codec fp32:bogus=1 --seed 1 --round 1 --sender 1 " + in + " " + payload);
  CHECK(bad_spec.exit_code == 2);
  CHECK(bad_spec.output.find("bogus") != std::string::npos);
  std::ofstream(payload, std::ios::binary) << "FRTC not really a payload";
  Run corrupt = RunCli("codec decode --seed 1 " + payload + " " + TempPath("never"));
  CHECK(corrupt.exit_code != 0);
  CHECK(corrupt.output.find("corrupt") != std::string::npos);
  std::remove(in.c_str());
  std::remove(payload.c_str());
}

TEST_CASE("bench codecs and bench train --record append a dated markdown section per run") {
  const std::string md = TempPath("bench-record.md");
  std::remove(md.c_str());
  Run first = RunCli("bench codecs --quick --codec fp32 --min-time 0.01 --record " + md);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(first.output.find("recorded in " + md) != std::string::npos);
  Run second = RunCli("bench train --model mlp:784-16-10 --batch 8 --steps 5 --warmup 1 --record " + md);
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  std::ostringstream read;
  read << std::ifstream(md).rdbuf();
  const std::string text = read.str();
  INFO(text);
  CHECK(text.rfind("# Benchmark results\n\n## fedrt bench codecs (wall-clock time, one core) (20", 0) == 0);
  CHECK(text.find("- command: `fedrt bench codecs --quick --codec fp32 --min-time 0.01 --record " + md + "`\n") !=
        std::string::npos);
  CHECK(text.find(" cores; load average ") != std::string::npos);
  CHECK(text.find("| codec | isa | vector | enc GB/s | dec GB/s | bits/coord | norm. error |\n|---|---|---|---|---|---|---|\n") !=
        std::string::npos);
  CHECK(text.find("| memcpy (the ceiling) |") != std::string::npos);
  CHECK(text.find("| fp32:ef=off | scalar | gaussian-2^16 | ") != std::string::npos);
  // The second run is a section of its own after the first, in the same file.
  const std::size_t train = text.find("\n## fedrt bench train (20");
  CHECK(train != std::string::npos);
  CHECK(train > text.find("| fp32:ef=off | scalar | gaussian-2^16 | "));
  CHECK(text.find("| mlp:784-16-10 | 8 | 1 | 5 | ", train) != std::string::npos);
  CHECK(text.find("# Benchmark results", 1) == std::string::npos);  // one heading per file
  Run unwritable = RunCli("bench train --model mlp:784-16-10 --batch 8 --steps 2 --warmup 0 --record /nonexistent/x.md");
  CHECK(unwritable.exit_code == 1);
  CHECK(unwritable.output.find("/nonexistent/x.md: cannot open for appending") != std::string::npos);
  std::remove(md.c_str());
}

}  // namespace
