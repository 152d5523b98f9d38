#include "fedrt/runtime/checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <zlib.h>

#include <unistd.h>

namespace fedrt {
namespace {

constexpr char kMagic[8] = {'F', 'E', 'D', 'R', 'T', 'C', 'K', 'P'};
constexpr std::size_t kMaxSpecBytes = 4096;
constexpr uint64_t kMaxFloats = uint64_t{1} << 28;

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<uint8_t>(v >> shift));
}
void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int shift = 0; shift < 64; shift += 8) out.push_back(static_cast<uint8_t>(v >> shift));
}
void PutFloats(std::vector<uint8_t>& out, const std::vector<float>& values) {
  PutU64(out, values.size());
  for (float f : values) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    PutU32(out, bits);
  }
}

uint32_t Crc32(const uint8_t* bytes, std::size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (size > 0) {
    const uInt chunk = size > (1u << 30) ? (1u << 30) : static_cast<uInt>(size);
    crc = crc32(crc, bytes, chunk);
    bytes += chunk;
    size -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

// Bounds-checked little-endian reader over validated bytes.
class Reader {
 public:
  Reader(const uint8_t* bytes, std::size_t size) : p_(bytes), left_(size) {}
  bool U32(uint32_t* v) {
    if (left_ < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) *v |= static_cast<uint32_t>(p_[i]) << (8 * i);
    Skip(4);
    return true;
  }
  bool U64(uint64_t* v) {
    if (left_ < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) *v |= static_cast<uint64_t>(p_[i]) << (8 * i);
    Skip(8);
    return true;
  }
  bool Bytes(std::size_t n, const uint8_t** out) {
    if (left_ < n) return false;
    *out = p_;
    Skip(n);
    return true;
  }
  bool Floats(std::vector<float>* out) {
    uint64_t count = 0;
    if (!U64(&count) || count > kMaxFloats || count * 4 > left_) return false;
    out->resize(static_cast<std::size_t>(count));
    for (float& f : *out) {
      uint32_t bits = 0;
      U32(&bits);
      std::memcpy(&f, &bits, sizeof(f));
    }
    return true;
  }
  std::size_t left() const { return left_; }

 private:
  void Skip(std::size_t n) {
    p_ += n;
    left_ -= n;
  }
  const uint8_t* p_;
  std::size_t left_;
};

}  // namespace

Checkpoint CaptureCheckpoint(const Model& model, const Sgd& sgd, uint64_t epoch) {
  Checkpoint c;
  c.spec = model.spec().text;
  c.step = sgd.step();
  c.epoch = epoch;
  c.parameters.assign(model.parameters(), model.parameters() + model.parameter_count());
  c.velocity.assign(sgd.velocity(), sgd.velocity() + sgd.velocity_size());
  return c;
}

Status RestoreCheckpoint(const Checkpoint& c, Model& model, Sgd& sgd) {
  if (c.spec != model.spec().text) {
    return Status(StatusCode::kFailedPrecondition,
                  "checkpoint is for model '" + c.spec + "', not '" + model.spec().text + "'");
  }
  if (c.parameters.size() != model.parameter_count() || sgd.parameter_count() != model.parameter_count()) {
    return Status(StatusCode::kFailedPrecondition, "checkpoint parameter count does not match the model");
  }
  if (!c.velocity.empty() && c.velocity.size() != sgd.velocity_size()) {
    return Status(StatusCode::kFailedPrecondition,
                  "checkpoint has a momentum buffer but the optimizer has no momentum (or another size)");
  }
  std::memcpy(model.parameters(), c.parameters.data(), c.parameters.size() * sizeof(float));
  if (sgd.velocity_size() > 0) {
    if (c.velocity.empty()) {
      std::memset(sgd.velocity(), 0, sgd.velocity_size() * sizeof(float));
    } else {
      std::memcpy(sgd.velocity(), c.velocity.data(), c.velocity.size() * sizeof(float));
    }
  }
  sgd.set_step(c.step);
  return Status::Ok();
}

std::vector<uint8_t> EncodeCheckpoint(const Checkpoint& c) {
  std::vector<uint8_t> out(kMagic, kMagic + sizeof(kMagic));
  PutU32(out, kCheckpointVersion);
  PutU32(out, 0);
  PutU64(out, c.step);
  PutU64(out, c.epoch);
  PutU32(out, static_cast<uint32_t>(c.spec.size()));
  out.insert(out.end(), c.spec.begin(), c.spec.end());
  PutFloats(out, c.parameters);
  PutFloats(out, c.velocity);
  PutU32(out, Crc32(out.data(), out.size()));
  return out;
}

Result<Checkpoint> DecodeCheckpoint(const uint8_t* bytes, std::size_t size, const std::string& name) {
  auto corrupt = [&name](const std::string& what) { return Corrupt(name + ": " + what); };
  if (size < sizeof(kMagic) + 8 || std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) {
    return corrupt("not a fedrt checkpoint (bad magic)");
  }
  Reader header(bytes + sizeof(kMagic), size - sizeof(kMagic));
  uint32_t version = 0;
  header.U32(&version);
  if (version != kCheckpointVersion) {
    return Unsupported(name + ": checkpoint format version " + std::to_string(version) +
                       " (this build reads version " + std::to_string(kCheckpointVersion) + ")");
  }
  if (size < sizeof(kMagic) + 8 + 4) return corrupt("truncated");
  Reader tail(bytes + size - 4, 4);
  uint32_t stored_crc = 0;
  tail.U32(&stored_crc);
  if (Crc32(bytes, size - 4) != stored_crc) return corrupt("checksum mismatch (truncated or damaged)");

  Reader r(bytes + sizeof(kMagic) + 4, size - sizeof(kMagic) - 4 - 4);
  Checkpoint c;
  uint32_t reserved = 0, spec_size = 0;
  const uint8_t* spec = nullptr;
  if (!r.U32(&reserved) || !r.U64(&c.step) || !r.U64(&c.epoch) || !r.U32(&spec_size) ||
      spec_size > kMaxSpecBytes || !r.Bytes(spec_size, &spec)) {
    return corrupt("bad header");
  }
  c.spec.assign(reinterpret_cast<const char*>(spec), spec_size);
  if (!r.Floats(&c.parameters) || !r.Floats(&c.velocity)) return corrupt("bad tensor length");
  if (!c.velocity.empty() && c.velocity.size() != c.parameters.size()) return corrupt("momentum buffer size differs");
  if (r.left() != 0) return corrupt("unexpected bytes after the tensors");
  return c;
}

Status WriteCheckpointFile(const std::string& path, const Checkpoint& checkpoint) {
  const std::vector<uint8_t> bytes = EncodeCheckpoint(checkpoint);
  const std::string temp = path + ".tmp";
  FILE* file = std::fopen(temp.c_str(), "wb");
  if (file == nullptr) return IoError(temp + ": cannot create: " + std::strerror(errno));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  ok = std::fflush(file) == 0 && ok;
  ok = fsync(fileno(file)) == 0 && ok;  // the data is on disk before the rename makes it visible
  ok = std::fclose(file) == 0 && ok;
  if (!ok) {
    const int error = errno;
    std::remove(temp.c_str());
    return IoError(temp + ": write failed: " + std::strerror(error));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temp.c_str());
    return IoError(path + ": cannot rename the temporary file into place: " + std::strerror(error));
  }
  return Status::Ok();
}

Result<Checkpoint> ReadCheckpointFile(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return IoError(path + ": cannot open: " + std::strerror(errno));
  }
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 14];  // 16 KiB: small enough for a thread stack on a board
  std::size_t got;
  while ((got = std::fread(chunk, 1, sizeof(chunk), file)) > 0) {
    bytes.insert(bytes.end(), chunk, chunk + got);
    if (bytes.size() > 16 * kMaxFloats) break;  // larger than any valid checkpoint
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return IoError(path + ": read failed");
  return DecodeCheckpoint(bytes.data(), bytes.size(), path);
}

}  // namespace fedrt
