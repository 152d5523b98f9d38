// IDX files: a 4-byte magic {0, 0, type, ndims}, ndims big-endian uint32
// dimensions, then the elements. Only unsigned bytes (type 0x08) are read:
// that is what image and label sets use.
#include <sys/stat.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <utility>

#include "fedrt/platform/config.h"
#include "fedrt/runtime/dataset.h"

#if FEDRT_HAVE_ZLIB
#include <zlib.h>
#endif

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

namespace {

// A file's bytes, gunzipped on the way when zlib is in the build (gz* reads
// plain files as they are). Without zlib a gzip file is refused by name.
class IdxSource {
 public:
  Status Open(const std::string& path) {
    path_ = path;
    errno = 0;
#if FEDRT_HAVE_ZLIB
    file_ = gzopen(path.c_str(), "rb");
#else
    file_ = std::fopen(path.c_str(), "rb");
#endif
    if (file_ == nullptr) {
      const int error = errno;
      if (error == ENOENT) return NotFound(path + ": no such file");
      return IoError(path + ": cannot open: " + (error != 0 ? std::strerror(error) : "out of memory"));
    }
    return Status::Ok();
  }
  // Bytes read into `out` (0 at the end), or the error.
  Result<std::size_t> Read(uint8_t* out, std::size_t size) {
#if FEDRT_HAVE_ZLIB
    const int got = gzread(file_, out, static_cast<unsigned>(size));
    if (got < 0) {
      int code = 0;
      return Corrupt(path_ + ": cannot decompress: " + gzerror(file_, &code));
    }
    return static_cast<std::size_t>(got);
#else
    const std::size_t got = std::fread(out, 1, size, file_);
    if (got == 0 && std::ferror(file_)) return IoError(path_ + ": cannot read: " + std::strerror(errno));
    if (first_ && got >= 2 && out[0] == 0x1f && out[1] == 0x8b) {
      return Unsupported(path_ + ": gzip-compressed, and this build has no zlib (FEDRT_WITH_ZLIB=OFF): "
                                 "gunzip it first");
    }
    first_ = false;
    return got;
#endif
  }
  Status Close() {
#if FEDRT_HAVE_ZLIB
    const int closed = gzclose(file_);
    file_ = nullptr;
    if (closed != Z_OK) return Corrupt(path_ + ": gzip stream is damaged (zlib error " + std::to_string(closed) + ")");
#else
    std::fclose(file_);
    file_ = nullptr;
#endif
    return Status::Ok();
  }
  ~IdxSource() {
    if (file_ != nullptr) (void)Close();
  }

 private:
  std::string path_;
#if FEDRT_HAVE_ZLIB
  gzFile file_ = nullptr;
#else
  std::FILE* file_ = nullptr;
  bool first_ = true;
#endif
};

}  // namespace

Result<IdxArray> ReadIdxFile(const std::string& path) {
  IdxSource source;
  FEDRT_RETURN_IF_ERROR(source.Open(path));
  struct stat info{};
  const std::size_t file_size = stat(path.c_str(), &info) == 0 ? static_cast<std::size_t>(info.st_size) : 0;
  std::vector<uint8_t> bytes;
  bool reserved = false;
  uint8_t chunk[1 << 14];  // 16 KiB: small enough for a thread stack on a board
  for (;;) {
    Result<std::size_t> got = source.Read(chunk, sizeof(chunk));
    if (!got.ok()) return got.status();
    if (*got == 0) break;
    if (bytes.size() + *got > kMaxIdxBytes + 4 + 4 * kMaxIdxDims) {
      return Corrupt(path + ": larger than the IDX size limit");
    }
    bytes.insert(bytes.end(), chunk, chunk + *got);
    if (!reserved && bytes.size() >= 4 && bytes.size() >= 4 + 4 * static_cast<std::size_t>(bytes[3])) {
      // Grow once to the announced size (when the file can hold that much),
      // rather than doubling, which would briefly need 1.5x the data set.
      reserved = true;
      std::vector<uint32_t> dims;
      Result<std::size_t> total = ParseIdxHeader(bytes.data(), bytes.size(), path, &dims);
      if (total.ok() && *total <= MostBytesIn(file_size)) bytes.reserve(*total);
    }
  }
  FEDRT_RETURN_IF_ERROR(source.Close());
  // ParseIdx's checks, then the payload moves out of the buffer (no copy).
  IdxArray array;
  Result<std::size_t> total = ParseIdxHeader(bytes.data(), bytes.size(), path, &array.dims);
  if (!total.ok()) return total.status();
  if (bytes.size() != *total) return ParseIdx(bytes.data(), bytes.size(), path).status();
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(4 + 4 * array.dims.size()));
  array.data = std::move(bytes);
  return array;
}

Status StreamIdxRows(const std::string& path, std::vector<uint32_t>* dims,
                     const std::function<Status(std::size_t row, const uint8_t* bytes)>& visit) {
  IdxSource source;
  FEDRT_RETURN_IF_ERROR(source.Open(path));
  // The header first (at most 4 + 4 * kMaxIdxDims bytes), read a byte range at a time.
  uint8_t header[4 + 4 * kMaxIdxDims];
  std::size_t have = 0, need = 4;
  while (have < need) {
    Result<std::size_t> got = source.Read(header + have, need - have);
    if (!got.ok()) return got.status();
    if (*got == 0) break;
    have += *got;
    if (have == 4 && header[3] >= 1 && header[3] <= kMaxIdxDims) need = 4 + 4 * static_cast<std::size_t>(header[3]);
  }
  Result<std::size_t> total = ParseIdxHeader(header, have, path, dims);
  if (!total.ok()) return total.status();
  const std::size_t rows = (*dims)[0];
  const std::size_t payload = *total - have;
  const std::size_t row_bytes = rows == 0 ? 0 : payload / rows;
  // One row at a time through a row buffer (a 28 x 28 image: 784 bytes).
  std::vector<uint8_t> row(row_bytes);
  for (std::size_t r = 0; r < rows; ++r) {
    std::size_t filled = 0;
    while (filled < row_bytes) {
      Result<std::size_t> got = source.Read(row.data() + filled, row_bytes - filled);
      if (!got.ok()) return got.status();
      if (*got == 0) {
        return Corrupt(path + ": IDX payload has " + std::to_string(r * row_bytes + filled) +
                       " bytes, the header announces " + std::to_string(payload) + " (truncated)");
      }
      filled += *got;
    }
    FEDRT_RETURN_IF_ERROR(visit(r, row.data()));
  }
  uint8_t extra = 0;
  Result<std::size_t> more = source.Read(&extra, 1);
  if (!more.ok()) return more.status();
  if (*more != 0) return Corrupt(path + ": IDX payload is longer than the header announces");
  return source.Close();
}

}  // namespace fedrt
