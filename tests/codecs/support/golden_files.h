// Reading and writing the golden files of the codec tests (payload bytes and
// little-endian float32 vectors under FEDRT_TEST_DATA_DIR).
#ifndef FEDRT_TESTS_CODECS_GOLDEN_FILES_H_
#define FEDRT_TESTS_CODECS_GOLDEN_FILES_H_

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fedrt/codecs/payload.h"

namespace fedrt::testing {

// The whole file, or nothing when it cannot be opened.
inline std::vector<uint8_t> ReadGoldenFile(const std::string& path) {
  std::vector<uint8_t> bytes;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    uint8_t buffer[4096];
    std::size_t n;
    while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) bytes.insert(bytes.end(), buffer, buffer + n);
    std::fclose(f);
  }
  return bytes;
}

inline void WriteGoldenFile(const std::string& path, const void* data, std::size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE_MESSAGE(f != nullptr, "cannot write " << path);
  REQUIRE(std::fwrite(data, 1, size, f) == size);
  std::fclose(f);
}

// float32 values as little-endian bytes (the golden files' layout on every target).
inline std::vector<uint8_t> FloatsLe(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(4 * values.size());
  for (std::size_t i = 0; i < values.size(); ++i) StoreFloatLe(bytes.data() + 4 * i, values[i]);
  return bytes;
}

// A little-endian float32 file; fails the test when missing or ragged.
inline std::vector<float> ReadGoldenFloats(const std::string& path) {
  const std::vector<uint8_t> bytes = ReadGoldenFile(path);
  REQUIRE_MESSAGE(!bytes.empty(), "missing or empty " << path);
  REQUIRE_MESSAGE(bytes.size() % 4 == 0, path << " is not a float32 file");
  std::vector<float> values(bytes.size() / 4);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = LoadFloatLe(bytes.data() + 4 * i);
  return values;
}

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_CODECS_GOLDEN_FILES_H_
