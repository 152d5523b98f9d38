// The device's state file (star/device_state.h), coded and written through
// the persistence helper (persist/).
#include "star/device_state.h"

#include <cstdint>
#include <cstring>

#include "fedrt/codecs/error_feedback.h"
#include "persist/coding.h"
#include "persist/file.h"

namespace fedrt::star {
namespace {

constexpr char kMagic[persist::kMagicSize] = {'F', 'E', 'D', 'R', 'T', 'D', 'S', 'T'};
constexpr uint32_t kVersion = 1;
// A residual of up to 2^28 floats (1 GiB), whatever this model's size, so
// that a file made for another model reads far enough to say so.
constexpr std::size_t kMaxFileBytes = persist::kFrameOverhead + 8 + (std::size_t{4} << 28);
// The format before the persistence helper: magic, u64 d, the values.
constexpr char kUnframedMagic[persist::kMagicSize] = {'F', 'E', 'D', 'R', 'T', 'E', 'F', '1'};

Status CheckCount(const std::string& path, uint64_t n, std::size_t d) {
  if (n == d) return Status::Ok();
  return Status(StatusCode::kFailedPrecondition, path + ": holds a residual of " + std::to_string(n) +
                                                     " values, this model has " + std::to_string(d));
}

// The values after the count; the count was checked against d.
Result<std::vector<float>> ReadValues(const std::string& path, persist::Reader& r, std::size_t d) {
  std::vector<float> values;
  const std::size_t available = r.left() / 4;
  r.F32s(d, &values);
  if (!r.ok()) {
    return Corrupt(path + ": truncated residual (" + std::to_string(available * 4) + " of " +
                   std::to_string(d * sizeof(float)) + " value bytes)");
  }
  if (!r.AtEnd()) return Corrupt(path + ": extra bytes after the residual");
  if (!CheckFinite(values.data(), d).ok()) return Corrupt(path + ": residual is not finite");
  return values;
}

Result<std::vector<float>> DecodeUnframed(const std::string& path, const uint8_t* bytes, std::size_t size,
                                          std::size_t d) {
  persist::Reader r(bytes + persist::kMagicSize, size - persist::kMagicSize);
  const uint64_t n = r.U64();
  if (!r.ok()) return Corrupt(path + ": truncated residual header");
  FEDRT_RETURN_IF_ERROR(CheckCount(path, n, d));
  return ReadValues(path, r, d);
}

}  // namespace

Status SaveResidual(const std::string& path, const float* residual, std::size_t d) {
  persist::Writer w(kMagic, kVersion);
  w.U64(d);
  w.F32s(residual, d);
  return persist::WriteFileAtomically(path, std::move(w).Finish());
}

Result<std::vector<float>> LoadResidual(const std::string& path, std::size_t d) {
  Result<std::vector<uint8_t>> file = persist::ReadWholeFile(path, kMaxFileBytes);
  if (!file.ok()) return file.status();
  return DecodeResidual(file->data(), file->size(), d, path);
}

Result<std::vector<float>> DecodeResidual(const uint8_t* bytes, std::size_t size, std::size_t d,
                                          const std::string& path) {
  if (size >= persist::kMagicSize && std::memcmp(bytes, kUnframedMagic, persist::kMagicSize) == 0) {
    return DecodeUnframed(path, bytes, size, d);
  }
  uint32_t version = 0;
  persist::Reader r;
  FEDRT_RETURN_IF_ERROR(persist::OpenFrame(bytes, size, kMagic, path, "a fedrt device state file", &version, &r));
  if (!persist::Crc32cTrailerMatches(bytes, size)) {
    return Corrupt(path + ": checksum mismatch (truncated or damaged)");
  }
  if (version != kVersion) {
    return Unsupported(path + ": device state version " + std::to_string(version) + " (this build reads version " +
                       std::to_string(kVersion) + ")");
  }
  const uint64_t n = r.U64();
  if (!r.ok()) return Corrupt(path + ": truncated residual header");
  FEDRT_RETURN_IF_ERROR(CheckCount(path, n, d));
  return ReadValues(path, r, d);
}

}  // namespace fedrt::star
