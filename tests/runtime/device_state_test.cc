// The device's residual file: what SaveResidual writes LoadResidual returns
// bit for bit; the file is little-endian and sealed with a CRC-32C; a
// missing file is not found, while an unreadable, foreign, truncated,
// damaged, padded, resized or non-finite one gives a typed error naming the
// file; files of the earlier unframed format still load.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "fedrt/codecs/payload.h"
#include "star/device_state.h"
#include "temp_dir.h"

namespace fedrt::star {
namespace {

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<float> Residual(std::size_t d) {
  std::vector<float> r(d);
  for (std::size_t i = 0; i < d; ++i) r[i] = static_cast<float>(i % 13) * 0.125f - 0.7f;
  if (d > 2) {
    r[1] = std::numeric_limits<float>::denorm_min();
    r[2] = -0.0f;
  }
  return r;
}

TEST_CASE("a saved residual loads back bit for bit and replaces the previous one") {
  testing::TempDir dir;
  const std::string path = dir.File("device.state");
  for (std::size_t d : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1007}}) {
    const std::vector<float> saved = Residual(d);
    REQUIRE(SaveResidual(path, saved.data(), d).ok());
    const std::string bytes = testing::ReadFileBytes(path);
    REQUIRE(bytes.size() == 8 + 4 + 8 + 4 * d + 4);
    const auto* b = reinterpret_cast<const uint8_t*>(bytes.data());
    CHECK(bytes.compare(0, 8, "FEDRTDST") == 0);
    CHECK(LoadLe32(b + 8) == 1);
    CHECK(LoadLe64(b + 12) == d);
    CHECK(LoadLe32(b + bytes.size() - 4) == Crc32c(b, bytes.size() - 4));
    Result<std::vector<float>> loaded = LoadResidual(path, d);
    REQUIRE(loaded.ok());
    REQUIRE(loaded->size() == d);
    CHECK((d == 0 || std::memcmp(loaded->data(), saved.data(), d * sizeof(float)) == 0));
  }
  CHECK(testing::ReadFileBytes(path + ".tmp").empty());  // renamed away
}

// Replaces the trailing CRC-32C after a deliberate change.
std::string Resealed(std::string bytes) {
  auto* b = reinterpret_cast<uint8_t*>(&bytes[0]);
  StoreLe32(b + bytes.size() - 4, Crc32c(b, bytes.size() - 4));
  return bytes;
}

TEST_CASE("a missing residual file is not found and a foreign or damaged one is refused naming the file") {
  testing::TempDir dir;
  const std::string path = dir.File("device.state");
  CHECK(LoadResidual(path, 8).status().code() == StatusCode::kNotFound);

  const std::vector<float> saved = Residual(100);
  REQUIRE(SaveResidual(path, saved.data(), saved.size()).ok());
  const std::string good = testing::ReadFileBytes(path);

  WriteAll(path, good.substr(0, good.size() / 2));
  Status s = LoadResidual(path, 100).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message() == path + ": checksum mismatch (truncated or damaged)");

  WriteAll(path, good.substr(0, 11));
  s = LoadResidual(path, 100).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find(path + ": truncated") == 0);

  for (std::size_t at : {std::size_t{9}, std::size_t{13}, std::size_t{20}, good.size() / 2, good.size() - 1}) {
    std::string flipped = good;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x08);
    WriteAll(path, flipped);
    CHECK(LoadResidual(path, 100).status().code() == StatusCode::kCorrupt);
  }

  WriteAll(path, "FEDRTCK1" + good.substr(8));
  s = LoadResidual(path, 100).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message() == path + ": not a fedrt device state file (bad magic)");

  WriteAll(path, "");
  CHECK(LoadResidual(path, 100).status().code() == StatusCode::kCorrupt);

  // Sealed but inconsistent: a count that does not match the values.
  std::string padded = good.substr(0, good.size() - 4) + "xxxx" + "CRC!";
  WriteAll(path, Resealed(padded));
  s = LoadResidual(path, 100).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find("extra bytes") != std::string::npos);
  WriteAll(path, Resealed(good.substr(0, good.size() - 8) + "CRC!"));
  s = LoadResidual(path, 100).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find("truncated residual") != std::string::npos);

  std::string newer = good;
  newer[8] = 2;
  WriteAll(path, Resealed(newer));
  s = LoadResidual(path, 100).status();
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("version 2") != std::string::npos);

  WriteAll(path, good);
  s = LoadResidual(path, 101).status();
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK(s.message().find("100 values, this model has 101") != std::string::npos);
  s = LoadResidual(path, 7).status();  // a file far larger than this model's residual
  CHECK(s.code() == StatusCode::kFailedPrecondition);

  std::vector<float> bad = saved;
  bad[42] = std::numeric_limits<float>::infinity();
  REQUIRE(SaveResidual(path, bad.data(), bad.size()).ok());
  s = LoadResidual(path, 100).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find("not finite") != std::string::npos);
}

TEST_CASE("a residual file that exists but cannot be read is an error with the reason, never not found") {
  testing::TempDir dir;
  const std::string path = dir.File("device.state");
  REQUIRE(::mkdir(path.c_str(), 0755) == 0);  // unreadable as a file for root too
  Status s = LoadResidual(path, 8).status();
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message() == path + ": cannot read: " + std::strerror(EISDIR));
  REQUIRE(::rmdir(path.c_str()) == 0);

  if (::geteuid() != 0) {  // root reads a mode-000 file
    const std::vector<float> saved = Residual(8);
    REQUIRE(SaveResidual(path, saved.data(), saved.size()).ok());
    REQUIRE(::chmod(path.c_str(), 0) == 0);
    s = LoadResidual(path, 8).status();
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(s.message().find(std::strerror(EACCES)) != std::string::npos);
  }
}

TEST_CASE("a residual file of the earlier unframed format still loads, and damage to it is caught where it shows") {
  testing::TempDir dir;
  const std::string path = dir.File("device.state");
  const std::vector<float> saved = Residual(10);
  // "FEDRTEF1", u64 d, d x f32, little-endian.
  std::string old = "FEDRTEF1";
  uint8_t b[8];
  StoreLe64(b, saved.size());
  old.append(reinterpret_cast<const char*>(b), 8);
  for (float v : saved) {
    StoreFloatLe(b, v);
    old.append(reinterpret_cast<const char*>(b), 4);
  }
  WriteAll(path, old);
  Result<std::vector<float>> loaded = LoadResidual(path, 10);
  REQUIRE(loaded.ok());
  CHECK(std::memcmp(loaded->data(), saved.data(), sizeof(float) * 10) == 0);

  CHECK(LoadResidual(path, 11).status().code() == StatusCode::kFailedPrecondition);
  WriteAll(path, old.substr(0, old.size() - 1));
  CHECK(LoadResidual(path, 10).status().message().find("truncated residual") != std::string::npos);
  WriteAll(path, old.substr(0, 12));
  CHECK(LoadResidual(path, 10).status().message().find("truncated residual header") != std::string::npos);
  WriteAll(path, old + "x");
  CHECK(LoadResidual(path, 10).status().message().find("extra bytes") != std::string::npos);

  // The next save writes the current format.
  REQUIRE(SaveResidual(path, saved.data(), saved.size()).ok());
  CHECK(testing::ReadFileBytes(path).compare(0, 8, "FEDRTDST") == 0);
}

TEST_CASE("saving a residual into a folder that does not exist is an io error") {
  testing::TempDir dir;
  const std::vector<float> saved = Residual(4);
  const Status s = SaveResidual(dir.File("absent/device.state"), saved.data(), saved.size());
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find(dir.File("absent/device.state.tmp")) == 0);
}

TEST_CASE("a failed save leaves the previous residual whole") {
  testing::TempDir dir;
  const std::string path = dir.File("device.state");
  const std::vector<float> first = Residual(6);
  REQUIRE(SaveResidual(path, first.data(), first.size()).ok());
  REQUIRE(::mkdir((path + ".tmp").c_str(), 0755) == 0);  // the temporary file cannot be created
  const std::vector<float> second(6, 0.5f);
  CHECK(SaveResidual(path, second.data(), second.size()).code() == StatusCode::kIoError);
  Result<std::vector<float>> kept = LoadResidual(path, 6);
  REQUIRE(kept.ok());
  CHECK(std::memcmp(kept->data(), first.data(), sizeof(float) * 6) == 0);
}

}  // namespace
}  // namespace fedrt::star
