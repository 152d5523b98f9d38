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
constexpr uint32_t kVersion = 1;
constexpr std::size_t kMaxSpecBytes = 4096;

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

}  // namespace

Status WriteAggregatorCheckpoint(const std::string& path, const AggregatorCheckpoint& checkpoint) {
  std::vector<uint8_t> bytes(kMagic, kMagic + sizeof(kMagic));
  Put32(bytes, kVersion);
  Put32(bytes, checkpoint.round);
  Put32(bytes, static_cast<uint32_t>(checkpoint.model.size()));
  bytes.insert(bytes.end(), checkpoint.model.begin(), checkpoint.model.end());
  Put64(bytes, checkpoint.parameters.size());
  Put64(bytes, checkpoint.first_moment.size());
  Put64(bytes, checkpoint.second_moment.size());
  PutFloats(bytes, checkpoint.parameters);
  PutFloats(bytes, checkpoint.first_moment);
  PutFloats(bytes, checkpoint.second_moment);
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
  std::size_t at = sizeof(kMagic);
  if (LoadLe32(bytes.data() + at) != kVersion) return Unsupported(path + ": checkpoint version is not 1");
  AggregatorCheckpoint checkpoint;
  checkpoint.round = LoadLe32(bytes.data() + at + 4);
  const uint32_t spec_size = LoadLe32(bytes.data() + at + 8);
  at += 12;
  if (spec_size > kMaxSpecBytes || at + spec_size + 24 + 4 > n) return Corrupt(path + ": bad model spec length");
  checkpoint.model.assign(reinterpret_cast<const char*>(bytes.data() + at), spec_size);
  at += spec_size;
  uint64_t counts[3];
  for (uint64_t& count : counts) {
    count = LoadLe64(bytes.data() + at);
    at += 8;
  }
  const uint64_t left = n - 4 - at;
  if (counts[0] > left / 4 || counts[1] > left / 4 || counts[2] > left / 4 ||
      (counts[0] + counts[1] + counts[2]) * 4 != left) {
    return Corrupt(path + ": array sizes do not match the file size");
  }
  std::vector<float>* arrays[3] = {&checkpoint.parameters, &checkpoint.first_moment, &checkpoint.second_moment};
  for (int i = 0; i < 3; ++i) {
    const auto count = static_cast<std::size_t>(counts[i]);  // <= the file size (checked above)
    arrays[i]->resize(count);
    LoadFloatsLe(bytes.data() + at, count, arrays[i]->data());
    at += count * 4;
  }
  return checkpoint;
}

}  // namespace fedrt
