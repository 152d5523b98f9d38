#include "cli/float_files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

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

// NumPy format 1.0/2.0/3.0: magic, version, header length, a Python dict
// literal with 'descr', 'fortran_order' and 'shape'.
Result<std::vector<float>> ParseNpy(const std::vector<uint8_t>& bytes, const std::string& path) {
  static const uint8_t kMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0) {
    return Corrupt(path + ": not a .npy file (bad magic)");
  }
  const uint8_t major = bytes[6];
  std::size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = bytes[8] | (static_cast<std::size_t>(bytes[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Corrupt(path + ": truncated .npy header");
    header_len = bytes[8] | (static_cast<std::size_t>(bytes[9]) << 8) | (static_cast<std::size_t>(bytes[10]) << 16) |
                 (static_cast<std::size_t>(bytes[11]) << 24);
    offset = 12;
  } else {
    return Corrupt(path + ": unsupported .npy version " + std::to_string(major));
  }
  if (header_len > bytes.size() - offset) return Corrupt(path + ": truncated .npy header");
  const std::string header(reinterpret_cast<const char*>(bytes.data() + offset), header_len);
  if (header.find("'descr': '<f4'") == std::string::npos && header.find("'descr':'<f4'") == std::string::npos) {
    return InvalidArgument(path + ": only little-endian float32 (<f4) arrays are supported; header " + header);
  }
  if (header.find("'fortran_order': True") != std::string::npos) {
    return InvalidArgument(path + ": Fortran-order arrays are not supported");
  }
  const std::size_t shape_at = header.find("'shape'");
  const std::size_t open = header.find('(', shape_at);
  const std::size_t close = header.find(')', open);
  if (shape_at == std::string::npos || open == std::string::npos || close == std::string::npos) {
    return Corrupt(path + ": .npy header has no shape");
  }
  uint64_t count = 1;
  std::string dims = header.substr(open + 1, close - open - 1);
  std::size_t at = 0;
  while (at < dims.size()) {
    while (at < dims.size() && (dims[at] == ' ' || dims[at] == ',')) ++at;
    if (at >= dims.size()) break;
    char* end = nullptr;
    const unsigned long long dim = std::strtoull(dims.c_str() + at, &end, 10);
    if (end == dims.c_str() + at) return Corrupt(path + ": bad shape in .npy header");
    if (dim != 0 && count > UINT64_MAX / dim) return Corrupt(path + ": .npy shape overflows");
    count *= dim;
    at = static_cast<std::size_t>(end - dims.c_str());
  }
  const std::size_t data_at = offset + header_len;
  if ((bytes.size() - data_at) / 4 != count || (bytes.size() - data_at) % 4 != 0) {
    return Corrupt(path + ": .npy data is " + std::to_string(bytes.size() - data_at) + " bytes, shape says " +
                   std::to_string(count) + " floats");
  }
  return FloatsFromLe(bytes.data() + data_at, static_cast<std::size_t>(count));
}

}  // namespace

Result<std::vector<uint8_t>> ReadBytes(const std::string& path) {
  File file(std::fopen(path.c_str(), "rb"));
  if (!file) return ErrnoStatus("cannot open", path);
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) bytes.insert(bytes.end(), buffer, buffer + n);
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
  if (EndsWith(path, ".npy")) return ParseNpy(*bytes, path);
  if (bytes->size() % 4 != 0) {
    return InvalidArgument(path + ": " + std::to_string(bytes->size()) +
                           " bytes is not a whole number of float32 values");
  }
  return FloatsFromLe(bytes->data(), bytes->size() / 4);
}

Status WriteFloatFile(const std::string& path, const std::vector<float>& values) {
  std::vector<uint8_t> bytes = FloatsToLe(values);
  if (!EndsWith(path, ".npy")) return WriteBytes(path, bytes.data(), bytes.size());
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(values.size()) + ",), }";
  // Pad so that magic + version + length + header ends on a multiple of 64 with '\n'.
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<uint8_t> file = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(header.size()),
                               static_cast<uint8_t>(header.size() >> 8)};
  file.insert(file.end(), header.begin(), header.end());
  file.insert(file.end(), bytes.begin(), bytes.end());
  return WriteBytes(path, file.data(), file.size());
}

}  // namespace fedrt::cli
