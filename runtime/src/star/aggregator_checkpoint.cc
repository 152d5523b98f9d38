// The aggregator's checkpoint file (star/aggregator_checkpoint.h), coded and
// written through the persistence helper (persist/).
#include "star/aggregator_checkpoint.h"

#include <algorithm>
#include <cstring>

#include "persist/coding.h"
#include "persist/file.h"

namespace fedrt {
namespace {

constexpr char kMagic[persist::kMagicSize] = {'F', 'E', 'D', 'R', 'T', 'A', 'G', 'G'};
constexpr uint32_t kVersion = 3;
constexpr uint32_t kMaxRdpOrders = 4096;
constexpr std::size_t kMaxSpecBytes = 4096;
constexpr std::size_t kMaxDeviceIdBytes = 256;
// Four model-sized arrays of up to 2^28 floats (4 GiB) and the rest: larger
// files are not read (a wrong path, say). Clamped to a 32-bit host's size_t.
constexpr uint64_t kMaxFileBytes = uint64_t{5} << 30;

void PutCodecState(persist::Writer& w, const AggregatorCheckpoint& c) {
  w.String(c.codec);
  w.U32(c.level_table_version);
  w.U32(static_cast<uint32_t>(c.level_table.size()));
  w.F32s(c.level_table);
  w.U32(static_cast<uint32_t>(c.rho.size()));
  for (const auto& [device, rho] : c.rho) {
    w.String(device);
    w.I32(rho);
  }
  w.U32(static_cast<uint32_t>(c.forced_anchors.size()));
  for (const std::string& device : c.forced_anchors) w.String(device);
  w.String(c.downlink_codec);
  w.I64(c.device_model_round);
  w.U64(c.device_model.size());
  w.F32s(c.device_model);
  w.U32(static_cast<uint32_t>(c.synced.size()));
  for (const auto& [device, round] : c.synced) {
    w.String(device);
    w.I64(round);
  }
}

bool ReadCodecState(persist::Reader& r, AggregatorCheckpoint* c) {
  c->codec = r.String(kMaxSpecBytes);
  c->level_table_version = r.U32();
  r.F32s(r.U32(), &c->level_table);
  // Each entry takes at least 4 bytes, so a count is bounded by the bytes left.
  for (uint32_t n = r.U32(); r.ok() && n > 0; --n) {
    std::string device = r.String(kMaxDeviceIdBytes);
    c->rho[device] = r.I32();
  }
  for (uint32_t n = r.U32(); r.ok() && n > 0; --n) c->forced_anchors.insert(r.String(kMaxDeviceIdBytes));
  c->downlink_codec = r.String(kMaxSpecBytes);
  c->device_model_round = r.I64();
  r.F32s(r.U64(), &c->device_model);
  for (uint32_t n = r.U32(); r.ok() && n > 0; --n) {
    std::string device = r.String(kMaxDeviceIdBytes);
    c->synced[device] = r.I64();
  }
  return r.ok();
}

void PutPrivacyState(persist::Writer& w, const AggregatorCheckpoint& c) {
  w.U32(static_cast<uint32_t>(c.dp_rdp.size()));
  for (double v : c.dp_rdp) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    w.U64(bits);
  }
}

bool ReadPrivacyState(persist::Reader& r, AggregatorCheckpoint* c) {
  const uint32_t n = r.U32();
  if (n > kMaxRdpOrders) return false;
  for (uint32_t k = 0; r.ok() && k < n; ++k) {
    const uint64_t bits = r.U64();
    double v = 0;
    std::memcpy(&v, &bits, sizeof(v));
    c->dp_rdp.push_back(v);
  }
  return r.ok();
}

}  // namespace

Status WriteAggregatorCheckpoint(const std::string& path, const AggregatorCheckpoint& checkpoint) {
  persist::Writer w(kMagic, kVersion);
  w.U32(checkpoint.round);
  w.String(checkpoint.model);
  w.U64(checkpoint.parameters.size());
  w.U64(checkpoint.first_moment.size());
  w.U64(checkpoint.second_moment.size());
  w.F32s(checkpoint.parameters);
  w.F32s(checkpoint.first_moment);
  w.F32s(checkpoint.second_moment);
  PutCodecState(w, checkpoint);
  PutPrivacyState(w, checkpoint);
  return persist::WriteFileAtomically(path, std::move(w).Finish());
}

Result<AggregatorCheckpoint> ReadAggregatorCheckpoint(const std::string& path) {
  Result<std::vector<uint8_t>> file =
      persist::ReadWholeFile(path, static_cast<std::size_t>(std::min<uint64_t>(kMaxFileBytes, SIZE_MAX)));
  if (!file.ok()) return file.status();
  return DecodeAggregatorCheckpoint(file->data(), file->size(), path);
}

Result<AggregatorCheckpoint> DecodeAggregatorCheckpoint(const uint8_t* bytes, std::size_t size,
                                                        const std::string& path) {
  uint32_t version = 0;
  persist::Reader r;
  FEDRT_RETURN_IF_ERROR(persist::OpenFrame(bytes, size, kMagic, path, "an aggregator checkpoint", &version, &r));
  if (!persist::Crc32cTrailerMatches(bytes, size)) return Corrupt(path + ": checksum mismatch");
  if (version < 1 || version > 3) {
    return Unsupported(path + ": checkpoint version " + std::to_string(version) +
                       " (this build reads versions 1 to 3)");
  }
  AggregatorCheckpoint checkpoint;
  checkpoint.round = r.U32();
  checkpoint.model = r.String(kMaxSpecBytes);
  if (!r.ok()) return Corrupt(path + ": bad model spec length");
  uint64_t counts[3];
  for (uint64_t& count : counts) count = r.U64();
  std::vector<float>* arrays[3] = {&checkpoint.parameters, &checkpoint.first_moment, &checkpoint.second_moment};
  for (int i = 0; i < 3; ++i) r.F32s(counts[i], arrays[i]);
  if (!r.ok() || (version == 1 && !r.AtEnd())) return Corrupt(path + ": array sizes do not match the file size");
  if (version >= 2 && !ReadCodecState(r, &checkpoint)) return Corrupt(path + ": bad codec state");
  if (version >= 3 && !ReadPrivacyState(r, &checkpoint)) return Corrupt(path + ": bad privacy state");
  if (!r.AtEnd()) return Corrupt(path + ": " + (version == 2 ? "bad codec state" : "bad privacy state"));
  return checkpoint;
}

}  // namespace fedrt
