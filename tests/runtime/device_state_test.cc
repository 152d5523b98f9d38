// The device's residual file: what SaveResidual writes LoadResidual returns
// bit for bit; a missing, foreign, truncated, padded, resized or non-finite
// file gives a typed error naming the file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

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
    CHECK(testing::ReadFileBytes(path).size() == 16 + 4 * d);
    Result<std::vector<float>> loaded = LoadResidual(path, d);
    REQUIRE(loaded.ok());
    REQUIRE(loaded->size() == d);
    CHECK((d == 0 || std::memcmp(loaded->data(), saved.data(), d * sizeof(float)) == 0));
  }
  CHECK(testing::ReadFileBytes(path + ".tmp").empty());  // renamed away
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
  CHECK(s.message().find("truncated residual") != std::string::npos);
  CHECK(s.message().find(path) != std::string::npos);

  WriteAll(path, good.substr(0, 11));
  s = LoadResidual(path, 100).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find("truncated residual header") != std::string::npos);

  WriteAll(path, "FEDRTCK1" + good.substr(8));
  s = LoadResidual(path, 100).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find("not a fedrt residual file") != std::string::npos);

  WriteAll(path, "");
  CHECK(LoadResidual(path, 100).status().code() == StatusCode::kCorrupt);

  WriteAll(path, good + "x");
  s = LoadResidual(path, 100).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find("extra bytes") != std::string::npos);

  WriteAll(path, good);
  s = LoadResidual(path, 101).status();
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK(s.message().find("100 values, this model has 101") != std::string::npos);

  std::vector<float> bad = saved;
  bad[42] = std::numeric_limits<float>::infinity();
  REQUIRE(SaveResidual(path, bad.data(), bad.size()).ok());
  s = LoadResidual(path, 100).status();
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find("not finite") != std::string::npos);
}

TEST_CASE("saving a residual into a folder that does not exist is an io error") {
  testing::TempDir dir;
  const std::vector<float> saved = Residual(4);
  const Status s = SaveResidual(dir.File("absent/device.state"), saved.data(), saved.size());
  CHECK(s.code() == StatusCode::kIoError);
}

}  // namespace
}  // namespace fedrt::star
