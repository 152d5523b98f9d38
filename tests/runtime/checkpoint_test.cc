// Model checkpoints: round trips, every truncation and damaged byte caught,
// version 2 sealed with CRC-32C and version 1 (zlib CRC-32) still read where
// zlib is built in, and files that exist but cannot be read are errors with
// the reason, never "no checkpoint".
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "fedrt/platform/config.h"
#if FEDRT_HAVE_ZLIB
#include <zlib.h>
#endif

#include "fedrt/codecs/payload.h"
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
  bytes[8] = 4;  // version 4
  StoreLe32(bytes.data() + bytes.size() - 4, Crc32c(bytes.data(), bytes.size() - 4));
  const Status newer = DecodeCheckpoint(bytes.data(), bytes.size(), "new.ckpt").status();
  CHECK(newer.code() == StatusCode::kUnsupported);
  CHECK(newer.message().find("new.ckpt: checkpoint format version 4") == 0);
}

TEST_CASE("a checkpoint is version 3, sealed with the CRC-32C of the bytes before it") {
  Trained a = Make("mlp:3-2", 1, 0.9f);
  const std::vector<uint8_t> bytes = EncodeCheckpoint(CaptureCheckpoint(a.model, a.sgd, 1));
  REQUIRE(bytes.size() > 16);
  CHECK(std::memcmp(bytes.data(), "FEDRTCKP", 8) == 0);
  CHECK(LoadLe32(bytes.data() + 8) == 3);
  CHECK(LoadLe32(bytes.data() + bytes.size() - 4) == Crc32c(bytes.data(), bytes.size() - 4));
  // Encoding twice gives the same bytes.
  CHECK(EncodeCheckpoint(CaptureCheckpoint(a.model, a.sgd, 1)) == bytes);
}

// Version 2 is version 3 without the aggregator section's length (8 bytes of
// zero before the CRC when there is none).
std::vector<uint8_t> AsVersion2(std::vector<uint8_t> v3) {
  REQUIRE(LoadLe64(v3.data() + v3.size() - 12) == 0);
  v3.erase(v3.end() - 12, v3.end() - 4);
  StoreLe32(v3.data() + 8, 2);
  StoreLe32(v3.data() + v3.size() - 4, Crc32c(v3.data(), v3.size() - 4));
  return v3;
}

TEST_CASE("a version 2 checkpoint still loads, and the aggregator's section comes back as it was written") {
  Trained a = Make("mlp:3-2", 1, 0.9f);
  a.sgd.set_step(12);
  Checkpoint c = CaptureCheckpoint(a.model, a.sgd, 2);
  const std::vector<uint8_t> v2 = AsVersion2(EncodeCheckpoint(c));
  Result<Checkpoint> read = DecodeCheckpoint(v2.data(), v2.size(), "v2.ckpt");
  REQUIRE(read.ok());
  CHECK(read->epoch == 2);
  CHECK(read->step == 12);
  CHECK(read->velocity == c.velocity);
  CHECK(read->aggregator_state.empty());

  c.aggregator_state = {1, 2, 3, 4, 5};
  std::vector<uint8_t> v3 = EncodeCheckpoint(c);
  read = DecodeCheckpoint(v3.data(), v3.size(), "v3.ckpt");
  REQUIRE(read.ok());
  CHECK(read->aggregator_state == c.aggregator_state);
  // A section longer than the bytes left is corrupt, never read past the end.
  StoreLe64(v3.data() + v3.size() - 4 - 5 - 8, 1000);
  StoreLe32(v3.data() + v3.size() - 4, Crc32c(v3.data(), v3.size() - 4));
  CHECK(DecodeCheckpoint(v3.data(), v3.size(), "v3.ckpt").status().code() == StatusCode::kCorrupt);
}

TEST_CASE("a version 1 checkpoint (zlib CRC-32) is read where zlib is built in and refused by version otherwise") {
  Trained a = Make("mlp:3-2", 1, 0.9f);
  a.sgd.set_step(99);
  std::vector<uint8_t> v1 = AsVersion2(EncodeCheckpoint(CaptureCheckpoint(a.model, a.sgd, 4)));
  // Version 1 is version 2's layout with a zlib CRC-32.
  StoreLe32(v1.data() + 8, 1);
#if FEDRT_HAVE_ZLIB
  StoreLe32(v1.data() + v1.size() - 4, static_cast<uint32_t>(crc32(0L, v1.data(), static_cast<uInt>(v1.size() - 4))));
  Result<Checkpoint> read = DecodeCheckpoint(v1.data(), v1.size(), "old.ckpt");
  REQUIRE(read.ok());
  CHECK(read->epoch == 4);
  CHECK(read->step == 99);
  CHECK(read->parameters == std::vector<float>(a.model.parameters(), a.model.parameters() + a.model.parameter_count()));
  // Its checksum is checked too, and a CRC-32C does not pass for it.
  v1[20] ^= 1;
  CHECK(DecodeCheckpoint(v1.data(), v1.size(), "old.ckpt").status().code() == StatusCode::kCorrupt);
  v1[20] ^= 1;
  StoreLe32(v1.data() + v1.size() - 4, Crc32c(v1.data(), v1.size() - 4));
  CHECK(DecodeCheckpoint(v1.data(), v1.size(), "old.ckpt").status().code() == StatusCode::kCorrupt);
#else
  const Status refused = DecodeCheckpoint(v1.data(), v1.size(), "old.ckpt").status();
  CHECK(refused.code() == StatusCode::kUnsupported);
  CHECK(refused.message().find("old.ckpt: checkpoint format version 1") == 0);
#endif
}

void WriteRaw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST_CASE("a checkpoint file that exists but cannot be read is an error with the reason, never not found") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("model.ckpt");
  CHECK(ReadCheckpointFile(path).status().code() == StatusCode::kNotFound);

  // A directory at the path (unreadable as a file for root too).
  REQUIRE(::mkdir(path.c_str(), 0755) == 0);
  Status s = ReadCheckpointFile(path).status();
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message() == path + ": cannot read: " + std::strerror(EISDIR));
  REQUIRE(::rmdir(path.c_str()) == 0);

  Trained a = Make("mlp:3-2", 1, 0.9f);
  REQUIRE(WriteCheckpointFile(path, CaptureCheckpoint(a.model, a.sgd, 2)).ok());
  const std::string good = testing::ReadFileBytes(path);
  const std::vector<uint8_t> bytes(good.begin(), good.end());

  if (::geteuid() != 0) {  // root reads a mode-000 file
    REQUIRE(::chmod(path.c_str(), 0) == 0);
    s = ReadCheckpointFile(path).status();
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(s.message().find(std::strerror(EACCES)) != std::string::npos);
    REQUIRE(::chmod(path.c_str(), 0644) == 0);
  }

  WriteRaw(path, std::vector<uint8_t>(bytes.begin(), bytes.end() - 5));  // truncated
  s = ReadCheckpointFile(path).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find(path + ": checksum mismatch") == 0);

  std::vector<uint8_t> flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x40;
  WriteRaw(path, flipped);
  s = ReadCheckpointFile(path).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find(path + ": checksum mismatch") == 0);

  WriteRaw(path, bytes);
  CHECK(ReadCheckpointFile(path).ok());
}

TEST_CASE("a checkpoint write that fails leaves the previous checkpoint whole") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("model.ckpt");
  Trained a = Make("mlp:3-2", 1, 0.0f);
  REQUIRE(WriteCheckpointFile(path, CaptureCheckpoint(a.model, a.sgd, 1)).ok());
  REQUIRE(::mkdir((path + ".tmp").c_str(), 0755) == 0);  // the temporary file cannot be created
  const Status s = WriteCheckpointFile(path, CaptureCheckpoint(a.model, a.sgd, 2));
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find(path + ".tmp: cannot create: ") == 0);
  Result<Checkpoint> kept = ReadCheckpointFile(path);
  REQUIRE(kept.ok());
  CHECK(kept->epoch == 1);
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
