#include "cli/float_files.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "fedrt/runtime/npy.h"

namespace fedrt::cli {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

bool EndsWith(const std::string& s, const char* suffix) {
  const std::size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

Status ErrnoStatus(const std::string& what, const std::string& path) {
  const int error = errno;
  const std::string message = what + " " + path + ": " + std::strerror(error);
  return error == ENOENT ? NotFound(message) : IoError(message);
}

std::vector<float> FloatsFromLe(const uint8_t* data, std::size_t count) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    const uint32_t bits = static_cast<uint32_t>(data[4 * i]) | (static_cast<uint32_t>(data[4 * i + 1]) << 8) |
                          (static_cast<uint32_t>(data[4 * i + 2]) << 16) |
                          (static_cast<uint32_t>(data[4 * i + 3]) << 24);
    std::memcpy(&values[i], &bits, 4);
  }
  return values;
}

std::vector<uint8_t> FloatsToLe(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(4 * values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    for (int b = 0; b < 4; ++b) bytes[4 * i + static_cast<std::size_t>(b)] = static_cast<uint8_t>(bits >> (8 * b));
  }
  return bytes;
}

}  // namespace

Result<std::vector<uint8_t>> ReadBytes(const std::string& path, std::size_t max_bytes) {
  File file(std::fopen(path.c_str(), "rb"));
  if (!file) return ErrnoStatus("cannot open", path);
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  std::size_t n;
  while (bytes.size() < max_bytes &&
         (n = std::fread(buffer, 1, std::min(sizeof buffer, max_bytes - bytes.size()), file.get())) > 0) {
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
  if (std::ferror(file.get())) return ErrnoStatus("cannot read", path);
  return bytes;
}

Status WriteBytes(const std::string& path, const uint8_t* data, std::size_t size) {
  File file(std::fopen(path.c_str(), "wb"));
  if (!file) return ErrnoStatus("cannot create", path);
  if (size > 0 && std::fwrite(data, 1, size, file.get()) != size) return ErrnoStatus("cannot write", path);
  if (std::fclose(file.release()) != 0) return ErrnoStatus("cannot write", path);
  return Status::Ok();
}

Result<std::vector<float>> ReadFloatFile(const std::string& path) {
  auto bytes = ReadBytes(path);
  FEDRT_RETURN_IF_ERROR(bytes.status());
  // By content, not by name: x.bin holding a .npy is still a .npy.
  if (LooksLikeNpy(bytes->data(), bytes->size())) {
    auto array = ParseNpy(bytes->data(), bytes->size(), path);
    FEDRT_RETURN_IF_ERROR(array.status());
    return NpyFloats(*array, path);
  }
  if (LooksLikeZip(bytes->data(), bytes->size())) {
    return InvalidArgument(path + " is a ZIP archive (.npz): save one array of it as .npy (numpy.save)");
  }
  if (bytes->size() % 4 != 0) {
    return InvalidArgument(path + ": " + std::to_string(bytes->size()) +
                           " bytes is not a whole number of float32 values");
  }
  return FloatsFromLe(bytes->data(), bytes->size() / 4);
}

Status WriteFloatFile(const std::string& path, const std::vector<float>& values) {
  if (EndsWith(path, ".npy")) {
    const std::vector<uint8_t> file = SerializeNpy(Float32Array(values.data(), {values.size()}));
    return WriteBytes(path, file.data(), file.size());
  }
  std::vector<uint8_t> bytes = FloatsToLe(values);
  return WriteBytes(path, bytes.data(), bytes.size());
}

}  // namespace fedrt::cli
