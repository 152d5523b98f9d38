#include "star/aggregator_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "fedrt/codecs/payload.h"

namespace fedrt {
namespace {

constexpr char kMagic[8] = {'F', 'E', 'D', 'R', 'T', 'A', 'G', 'G'};
constexpr uint32_t kVersion = 2;
constexpr std::size_t kMaxSpecBytes = 4096;
constexpr std::size_t kMaxDeviceIdBytes = 256;

void PutFloats(std::vector<uint8_t>& out, const std::vector<float>& values) {
  const std::size_t at = out.size();
  out.resize(at + values.size() * 4);
  StoreFloatsLe(values.data(), values.size(), out.data() + at);
}

void Put64(std::vector<uint8_t>& out, uint64_t v) {
  uint8_t b[8];
  StoreLe64(b, v);
  out.insert(out.end(), b, b + 8);
}

void Put32(std::vector<uint8_t>& out, uint32_t v) {
  uint8_t b[4];
  StoreLe32(b, v);
  out.insert(out.end(), b, b + 4);
}

void PutString(std::vector<uint8_t>& out, const std::string& s) {
  Put32(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

// Reads fields front to back; every read checks the bytes left first, and
// the first failure sticks (later reads return zeros).
class Reader {
 public:
  Reader(const uint8_t* data, std::size_t size, std::size_t at) : data_(data), size_(size), at_(at) {}
  bool ok() const { return ok_; }
  std::size_t left() const { return size_ - at_; }
  bool Need(uint64_t bytes) {
    if (ok_ && bytes <= left()) return true;
    ok_ = false;
    return false;
  }
  uint32_t U32() {
    if (!Need(4)) return 0;
    at_ += 4;
    return LoadLe32(data_ + at_ - 4);
  }
  uint64_t U64() {
    if (!Need(8)) return 0;
    at_ += 8;
    return LoadLe64(data_ + at_ - 8);
  }
  std::string String(std::size_t max) {
    const uint32_t n = U32();
    if (n > max || !Need(n)) {
      ok_ = false;
      return std::string();
    }
    at_ += n;
    return std::string(reinterpret_cast<const char*>(data_ + at_ - n), n);
  }
  void Floats(uint64_t count, std::vector<float>* out) {
    if (count > left() / 4 || !Need(count * 4)) {
      ok_ = false;
      return;
    }
    const auto n = static_cast<std::size_t>(count);  // <= the file size (checked above)
    out->resize(n);
    LoadFloatsLe(data_ + at_, n, out->data());
    at_ += n * 4;
  }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t at_;
  bool ok_ = true;
};

void PutCodecState(std::vector<uint8_t>& bytes, const AggregatorCheckpoint& c) {
  PutString(bytes, c.codec);
  Put32(bytes, c.level_table_version);
  Put32(bytes, static_cast<uint32_t>(c.level_table.size()));
  PutFloats(bytes, c.level_table);
  Put32(bytes, static_cast<uint32_t>(c.rho.size()));
  for (const auto& [device, rho] : c.rho) {
    PutString(bytes, device);
    Put32(bytes, static_cast<uint32_t>(rho));
  }
  Put32(bytes, static_cast<uint32_t>(c.forced_anchors.size()));
  for (const std::string& device : c.forced_anchors) PutString(bytes, device);
  PutString(bytes, c.downlink_codec);
  Put64(bytes, static_cast<uint64_t>(c.device_model_round));
  Put64(bytes, c.device_model.size());
  PutFloats(bytes, c.device_model);
  Put32(bytes, static_cast<uint32_t>(c.synced.size()));
  for (const auto& [device, round] : c.synced) {
    PutString(bytes, device);
    Put64(bytes, static_cast<uint64_t>(round));
  }
}

bool ReadCodecState(Reader& r, AggregatorCheckpoint* c) {
  c->codec = r.String(kMaxSpecBytes);
  c->level_table_version = r.U32();
  r.Floats(r.U32(), &c->level_table);
  // Each entry takes at least 4 bytes, so a count is bounded by the bytes left.
  for (uint32_t n = r.U32(); r.ok() && n > 0; --n) {
    std::string device = r.String(kMaxDeviceIdBytes);
    c->rho[device] = static_cast<int32_t>(r.U32());
  }
  for (uint32_t n = r.U32(); r.ok() && n > 0; --n) c->forced_anchors.insert(r.String(kMaxDeviceIdBytes));
  c->downlink_codec = r.String(kMaxSpecBytes);
  c->device_model_round = static_cast<int64_t>(r.U64());
  r.Floats(r.U64(), &c->device_model);
  for (uint32_t n = r.U32(); r.ok() && n > 0; --n) {
    std::string device = r.String(kMaxDeviceIdBytes);
    c->synced[device] = static_cast<int64_t>(r.U64());
  }
  return r.ok() && r.left() == 0;
}

}  // namespace

Status WriteAggregatorCheckpoint(const std::string& path, const AggregatorCheckpoint& checkpoint) {
  std::vector<uint8_t> bytes(kMagic, kMagic + sizeof(kMagic));
  Put32(bytes, kVersion);
  Put32(bytes, checkpoint.round);
  PutString(bytes, checkpoint.model);
  Put64(bytes, checkpoint.parameters.size());
  Put64(bytes, checkpoint.first_moment.size());
  Put64(bytes, checkpoint.second_moment.size());
  PutFloats(bytes, checkpoint.parameters);
  PutFloats(bytes, checkpoint.first_moment);
  PutFloats(bytes, checkpoint.second_moment);
  PutCodecState(bytes, checkpoint);
  Put32(bytes, Crc32c(bytes.data(), bytes.size()));

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(tmp + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return IoError(tmp + ": write failed");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return IoError(tmp + ": fsync failed");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return IoError(path + ": " + std::strerror(errno));
  return Status();
}

Result<AggregatorCheckpoint> ReadAggregatorCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": no such file");
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t n = bytes.size();
  if (n < sizeof(kMagic) + 12 + 24 + 4 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return Corrupt(path + ": not an aggregator checkpoint");
  }
  if (Crc32c(bytes.data(), n - 4) != LoadLe32(bytes.data() + n - 4)) return Corrupt(path + ": checksum mismatch");
  const uint32_t version = LoadLe32(bytes.data() + sizeof(kMagic));
  if (version != 1 && version != 2) {
    return Unsupported(path + ": checkpoint version " + std::to_string(version) +
                       " (this build reads versions 1 and 2)");
  }
  Reader r(bytes.data(), n - 4, sizeof(kMagic) + 4);
  AggregatorCheckpoint checkpoint;
  checkpoint.round = r.U32();
  checkpoint.model = r.String(kMaxSpecBytes);
  if (!r.ok()) return Corrupt(path + ": bad model spec length");
  uint64_t counts[3];
  for (uint64_t& count : counts) count = r.U64();
  std::vector<float>* arrays[3] = {&checkpoint.parameters, &checkpoint.first_moment, &checkpoint.second_moment};
  for (int i = 0; i < 3; ++i) r.Floats(counts[i], arrays[i]);
  if (!r.ok() || (version == 1 && r.left() != 0)) return Corrupt(path + ": array sizes do not match the file size");
  if (version == 2 && !ReadCodecState(r, &checkpoint)) return Corrupt(path + ": bad codec state");
  return checkpoint;
}

}  // namespace fedrt
