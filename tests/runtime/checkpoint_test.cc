#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "fedrt/runtime/checkpoint.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

struct Trained {
  Model model;
  Sgd sgd;
};

Trained Make(const char* spec, uint64_t seed, float momentum) {
  Result<Model> model = Model::Create(spec, seed);
  REQUIRE(model.ok());
  SgdOptions o;
  o.momentum = momentum;
  Result<Sgd> sgd = Sgd::Create(o, model->parameter_count());
  REQUIRE(sgd.ok());
  return {std::move(model).value(), std::move(sgd).value()};
}

TEST_CASE("a checkpoint file round-trips parameters, momentum, step and epoch") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  Trained a = Make("mlp:6-5-3", 1, 0.9f);
  for (std::size_t i = 0; i < a.sgd.velocity_size(); ++i) a.sgd.velocity()[i] = static_cast<float>(i) * 0.25f;
  a.sgd.set_step(1234);
  const std::string path = dir.File("model.ckpt");
  REQUIRE(WriteCheckpointFile(path, CaptureCheckpoint(a.model, a.sgd, 7)).ok());
  FILE* temp = std::fopen((path + ".tmp").c_str(), "rb");
  CHECK(temp == nullptr);  // renamed into place, nothing left behind
  if (temp != nullptr) std::fclose(temp);

  Result<Checkpoint> read = ReadCheckpointFile(path);
  REQUIRE(read.ok());
  CHECK(read->epoch == 7);
  CHECK(read->spec == "mlp:6-5-3");
  Trained b = Make("mlp:6-5-3", 2, 0.9f);
  REQUIRE(RestoreCheckpoint(*read, b.model, b.sgd).ok());
  CHECK(b.sgd.step() == 1234);
  CHECK(std::vector<float>(b.model.parameters(), b.model.parameters() + b.model.parameter_count()) ==
        std::vector<float>(a.model.parameters(), a.model.parameters() + a.model.parameter_count()));
  CHECK(b.sgd.velocity()[4] == 1.0f);
}

TEST_CASE("every truncation of a checkpoint is rejected cleanly") {
  Trained a = Make("mlp:3-2", 1, 0.5f);
  const std::vector<uint8_t> bytes = EncodeCheckpoint(CaptureCheckpoint(a.model, a.sgd, 1));
  for (std::size_t size = 0; size < bytes.size(); ++size) {
    Result<Checkpoint> c = DecodeCheckpoint(bytes.data(), size, "cut.ckpt");
    REQUIRE_FALSE(c.ok());
    REQUIRE(c.status().code() == StatusCode::kCorrupt);
  }
  CHECK(DecodeCheckpoint(bytes.data(), bytes.size(), "whole.ckpt").ok());
}

TEST_CASE("a damaged byte anywhere in a checkpoint is detected") {
  Trained a = Make("mlp:3-2", 1, 0.0f);
  const std::vector<uint8_t> bytes = EncodeCheckpoint(CaptureCheckpoint(a.model, a.sgd, 1));
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> damaged = bytes;
    damaged[i] ^= 0x10;
    REQUIRE_FALSE(DecodeCheckpoint(damaged.data(), damaged.size(), "bad.ckpt").ok());
  }
}

TEST_CASE("foreign files and newer format versions are rejected with the file named") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("notes.txt");
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  std::fputs("these are not the weights you are looking for\n", f);
  std::fclose(f);
  Result<Checkpoint> foreign = ReadCheckpointFile(path);
  CHECK(foreign.status().code() == StatusCode::kCorrupt);
  CHECK(foreign.status().message().find("notes.txt") != std::string::npos);
  CHECK(ReadCheckpointFile(dir.File("absent.ckpt")).status().code() == StatusCode::kNotFound);

  Trained a = Make("mlp:3-2", 1, 0.0f);
  std::vector<uint8_t> bytes = EncodeCheckpoint(CaptureCheckpoint(a.model, a.sgd, 1));
  bytes[8] = 2;  // version 2
  CHECK(DecodeCheckpoint(bytes.data(), bytes.size(), "new.ckpt").status().code() == StatusCode::kUnsupported);
}

TEST_CASE("a checkpoint for another model or optimizer is refused") {
  Trained a = Make("mlp:3-2", 1, 0.9f);
  const Checkpoint c = CaptureCheckpoint(a.model, a.sgd, 1);
  Trained other = Make("mlp:3-3", 1, 0.9f);
  CHECK(RestoreCheckpoint(c, other.model, other.sgd).code() == StatusCode::kFailedPrecondition);
  Trained plain = Make("mlp:3-2", 1, 0.0f);
  CHECK(RestoreCheckpoint(c, plain.model, plain.sgd).code() == StatusCode::kFailedPrecondition);
  // Without momentum in the checkpoint, a momentum optimizer starts from zero.
  Trained b = Make("mlp:3-2", 1, 0.0f);
  Trained c2 = Make("mlp:3-2", 1, 0.9f);
  c2.sgd.velocity()[0] = 3.0f;
  CHECK(RestoreCheckpoint(CaptureCheckpoint(b.model, b.sgd, 0), c2.model, c2.sgd).ok());
  CHECK(c2.sgd.velocity()[0] == 0.0f);
}

TEST_CASE("writing a checkpoint into a missing directory fails with the path named") {
  Trained a = Make("mlp:3-2", 1, 0.0f);
  const Status s = WriteCheckpointFile("/nonexistent/fedrt/dir/model.ckpt", CaptureCheckpoint(a.model, a.sgd, 0));
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find("/nonexistent/fedrt/dir/model.ckpt") != std::string::npos);
}

}  // namespace
}  // namespace fedrt
