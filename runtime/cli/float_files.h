// Reading and writing the float vectors the codec tools work on: raw
// little-endian float32 files, or NumPy .npy files holding a float32 array
// (any shape, C order; it is used flat).
#ifndef FEDRT_RUNTIME_CLI_FLOAT_FILES_H_
#define FEDRT_RUNTIME_CLI_FLOAT_FILES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt::cli {

// By content: a file that starts like a .npy is parsed as NumPy (float32,
// any shape, used flat), anything else is raw float32.
Result<std::vector<float>> ReadFloatFile(const std::string& path);
// ".npy" writes a 1-D float32 NumPy array, anything else raw float32.
Status WriteFloatFile(const std::string& path, const std::vector<float>& values);

// The file's bytes, at most `max_bytes` of them (its start, e.g. a magic).
Result<std::vector<uint8_t>> ReadBytes(const std::string& path, std::size_t max_bytes = SIZE_MAX);
Status WriteBytes(const std::string& path, const uint8_t* data, std::size_t size);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_FLOAT_FILES_H_
