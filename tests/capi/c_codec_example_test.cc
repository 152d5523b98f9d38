// examples/01_c_codec (the C API) against `fedrt codec encode` (the C++
// codecs through the CLI): for every registered codec, in several
// configurations, both programs encode the same vector in the same context
// and must write the same payload, byte for byte. Cross builds run both
// under the emulator.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "run_cli.h"

namespace {

using fedrt::testing::CliRun;
using fedrt::testing::RunCommand;

// Specs the CLI accepts, for every name CodecNames() lists: defaults, each
// symbol coding, side-information codecs (ndqsg; moniqua needs theta), the
// sparsifiers' value formats, error feedback.
const std::map<std::string, std::vector<std::string>>& SpecsByCodec() {
  static const std::map<std::string, std::vector<std::string>> specs = {
      {"fp32", {"fp32"}},
      {"qsgd", {"qsgd", "qsgd:ec=pack", "qsgd:s=4,b=128,ec=none"}},
      {"terngrad", {"terngrad", "terngrad:ec=pack"}},
      {"sign", {"sign", "sign:ec=pack"}},
      {"alq", {"alq", "alq:bits=3,b=256,ec=pack"}},
      {"amq", {"amq", "amq:ec=pack"}},
      {"fp16", {"fp16"}},
      {"bf16", {"bf16"}},
      {"dqsg", {"dqsg", "dqsg:s=2,ec=pack", "dqsg:ec=none", "dqsg:ef=on"}},
      {"ndqsg", {"ndqsg", "ndqsg:ec=pack"}},
      {"topk", {"topk:k=0.05", "topk:k=0.05,v=fp16"}},
      {"randk", {"randk:k=0.05"}},
      {"rtopk", {"rtopk:k=0.05,r=0.2"}},
      {"moniqua", {"moniqua:theta=0.5", "moniqua:bits=4,theta=0.5"}},
  };
  return specs;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/fedrt_c_codec_" + std::to_string(getpid()) + "_" + name;
}

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// `program` with arguments, behind the emulator of a cross build.
CliRun Run(const std::string& program, const std::string& arguments) {
  return RunCommand(std::string(FEDRT_TEST_EMULATOR) + " " + program + " " + arguments);
}

TEST_CASE("01_c_codec writes the payload of fedrt codec encode for every registered codec") {
  const std::string input = TempPath("in.f32");
  {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    std::vector<float> v(3001);
    for (float& x : v) x = normal(rng);
    v[10] = 0.0f;
    std::ofstream(input, std::ios::binary).write(reinterpret_cast<const char*>(v.data()),
                                                 static_cast<std::streamsize>(4 * v.size()));
  }
  const std::string ours = TempPath("c.bin"), theirs = TempPath("cli.bin");
  int compared = 0;
  for (const std::string& name : fedrt::CodecNames()) {
    const auto specs = SpecsByCodec().find(name);
    INFO("codec " << name);
    REQUIRE_MESSAGE(specs != SpecsByCodec().end(), "a registered codec has no spec in this test");
    for (const std::string& spec : specs->second) {
      INFO("spec " << spec);
      std::remove(ours.c_str());
      std::remove(theirs.c_str());
      const std::string context = spec + " 123456789012 7 4242 ";
      const CliRun c = Run(FEDRT_C_CODEC_PATH, context + input + " " + ours);
      INFO("01_c_codec: " << c.output);
      REQUIRE(c.exit_code == 0);
      const CliRun cli = Run(FEDRT_CLI_PATH, "codec encode --codec " + spec +
                                                 " --seed 123456789012 --round 7 --sender 4242 " + input + " " + theirs);
      INFO("fedrt codec encode: " << cli.output);
      REQUIRE(cli.exit_code == 0);
      const std::vector<char> a = ReadAll(ours), b = ReadAll(theirs);
      CHECK(a.size() > 44);
      CHECK(a.size() == b.size());
      CHECK(a == b);
      ++compared;
    }
  }
  CHECK(compared >= static_cast<int>(fedrt::CodecNames().size()));
  for (const std::string& p : {input, ours, theirs}) std::remove(p.c_str());
}

TEST_CASE("01_c_codec refuses bad arguments with exit status 2 and a message") {
  const std::string input = TempPath("small.f32"), out = TempPath("never.bin");
  std::ofstream(input, std::ios::binary).write("\0\0\x80\x3f", 4);  // 1.0f
  struct Case {
    std::string arguments, message;
  };
  const Case cases[] = {
      {"dqgs 1 1 1 " + input + " " + out, "unknown codec 'dqgs'"},
      {"fp32 x 1 1 " + input + " " + out, "SEED 'x' is not a number"},
      {"fp32 1 4294967296 1 " + input + " " + out, "ROUND '4294967296' is not a number up to 4294967295"},
      {"fp32 1 1 -1 " + input + " " + out, "SENDER '-1' is not a number"},
      {"fp32 1 1 1 in.npy " + out, "reads raw float32 only"},
      {"fp32 1 1", "usage: 01_c_codec SPEC SEED ROUND SENDER IN.f32 OUT.bin"},
  };
  for (const Case& c : cases) {
    const CliRun run = Run(FEDRT_C_CODEC_PATH, c.arguments);
    INFO(c.arguments << " -> " << run.output);
    CHECK(run.exit_code == 2);
    CHECK(run.output.find(c.message) != std::string::npos);
  }
  // Input that cannot be read is exit status 1, and no payload is written.
  const CliRun missing = Run(FEDRT_C_CODEC_PATH, "fp32 1 1 1 " + input + ".absent " + out);
  CHECK(missing.exit_code == 1);
  CHECK(missing.output.find("cannot open") != std::string::npos);
  std::ofstream(input, std::ios::binary).write("\0\0\x80", 3);
  const CliRun ragged = Run(FEDRT_C_CODEC_PATH, "fp32 1 1 1 " + input + " " + out);
  CHECK(ragged.exit_code == 1);
  CHECK(ragged.output.find("3 bytes is not a whole number of float32 values") != std::string::npos);
  CHECK(ReadAll(out).empty());
  std::remove(input.c_str());
}

}  // namespace
