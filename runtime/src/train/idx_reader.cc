// IDX files: a 4-byte magic {0, 0, type, ndims}, ndims big-endian uint32
// dimensions, then the elements. Only unsigned bytes (type 0x08) are read:
// that is what image and label sets use.
#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include "fedrt/runtime/dataset.h"

namespace fedrt {
namespace {

constexpr uint8_t kIdxUnsignedByte = 0x08;
constexpr int kMaxIdxDims = 4;

uint32_t BigEndian32(const uint8_t* p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | static_cast<uint32_t>(p[3]);
}

// Deflate expands at most 1032:1, so a file of S bytes never holds more than
// this many: the most a reader may reserve on the word of a header.
std::size_t MostBytesIn(std::size_t file_size) { return file_size * 1032 + 1024; }

// The header checks of ParseIdx; fills dims and returns header + payload size.
Result<std::size_t> ParseIdxHeader(const uint8_t* bytes, std::size_t size, const std::string& name,
                                   std::vector<uint32_t>* dims) {
  auto corrupt = [&name](const std::string& what) { return Corrupt(name + ": " + what); };
  if (size < 4) return corrupt("too short for an IDX header (" + std::to_string(size) + " bytes)");
  if (bytes[0] != 0 || bytes[1] != 0) return corrupt("not an IDX file (bad magic)");
  if (bytes[2] != kIdxUnsignedByte) {
    return corrupt("IDX element type " + std::to_string(bytes[2]) + " is not unsigned byte (8)");
  }
  const int ndims = bytes[3];
  if (ndims < 1 || ndims > kMaxIdxDims) return corrupt("IDX with " + std::to_string(ndims) + " dimensions");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndims);
  if (size < header) return corrupt("truncated IDX header");
  std::size_t elements = 1;
  dims->clear();
  for (int d = 0; d < ndims; ++d) {
    const uint32_t dim = BigEndian32(bytes + 4 + 4 * d);
    dims->push_back(dim);
    if (dim != 0 && elements > kMaxIdxBytes / dim) return corrupt("IDX dimensions exceed the size limit");
    elements *= dim;
  }
  return header + elements;
}

}  // namespace

Result<IdxArray> ParseIdx(const uint8_t* bytes, std::size_t size, const std::string& name) {
  IdxArray array;
  Result<std::size_t> total = ParseIdxHeader(bytes, size, name, &array.dims);
  if (!total.ok()) return total.status();
  const std::size_t header = 4 + 4 * array.dims.size();
  const std::size_t elements = *total - header;
  if (size - header != elements) {
    return Corrupt(name + ": IDX payload has " + std::to_string(size - header) + " bytes, the header announces " +
                   std::to_string(elements) + (size - header < elements ? " (truncated)" : ""));
  }
  array.data.assign(bytes + header, bytes + size);
  return array;
}

Result<IdxArray> ReadIdxFile(const std::string& path) {
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    if (error == ENOENT) return NotFound(path + ": no such file");
    return IoError(path + ": cannot open: " + (error != 0 ? std::strerror(error) : "out of memory"));
  }
  struct stat info{};
  const std::size_t file_size = stat(path.c_str(), &info) == 0 ? static_cast<std::size_t>(info.st_size) : 0;
  std::vector<uint8_t> bytes;
  bool reserved = false;
  uint8_t chunk[1 << 14];  // 16 KiB: small enough for a thread stack on a board
  for (;;) {
    const int got = gzread(file, chunk, sizeof(chunk));
    if (got < 0) {
      int code = 0;
      const std::string message = gzerror(file, &code);
      gzclose(file);
      return Corrupt(path + ": cannot decompress: " + message);
    }
    if (got == 0) break;
    if (bytes.size() + static_cast<std::size_t>(got) > kMaxIdxBytes + 4 + 4 * kMaxIdxDims) {
      gzclose(file);
      return Corrupt(path + ": larger than the IDX size limit");
    }
    bytes.insert(bytes.end(), chunk, chunk + got);
    if (!reserved && bytes.size() >= 4 && bytes.size() >= 4 + 4 * static_cast<std::size_t>(bytes[3])) {
      // Grow once to the announced size (when the file can hold that much),
      // rather than doubling, which would briefly need 1.5x the data set.
      reserved = true;
      std::vector<uint32_t> dims;
      Result<std::size_t> total = ParseIdxHeader(bytes.data(), bytes.size(), path, &dims);
      if (total.ok() && *total <= MostBytesIn(file_size)) bytes.reserve(*total);
    }
  }
  const int closed = gzclose(file);
  if (closed != Z_OK) return Corrupt(path + ": gzip stream is damaged (zlib error " + std::to_string(closed) + ")");
  // ParseIdx's checks, then the payload moves out of the buffer (no copy).
  IdxArray array;
  Result<std::size_t> total = ParseIdxHeader(bytes.data(), bytes.size(), path, &array.dims);
  if (!total.ok()) return total.status();
  if (bytes.size() != *total) return ParseIdx(bytes.data(), bytes.size(), path).status();
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(4 + 4 * array.dims.size()));
  array.data = std::move(bytes);
  return array;
}

}  // namespace fedrt
