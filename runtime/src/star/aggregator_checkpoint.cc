// The aggregator's checkpoint file (star/aggregator_checkpoint.h), coded and
// written through the persistence helper (persist/).
#include "star/aggregator_checkpoint.h"

#include <algorithm>
#include <cstring>

#include "fedrt/runtime/checkpoint.h"
#include "persist/coding.h"
#include "persist/file.h"

namespace fedrt {
namespace {

// The aggregator's files of earlier builds; now a checkpoint (checkpoint.h)
// with an aggregator section.
constexpr std::size_t kLegacyMagicSize = persist::kMagicSize;
constexpr char kLegacyMagic[persist::kMagicSize] = {'F', 'E', 'D', 'R', 'T', 'A', 'G', 'G'};
// The section's own version (its first u32); version 1 (no pending level
// statistics) still loads.
constexpr uint32_t kSectionVersion = 2;
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
  for (double v : c.dp_rdp) w.F64(v);
}

bool ReadPrivacyState(persist::Reader& r, AggregatorCheckpoint* c) {
  const uint32_t n = r.U32();
  if (n > kMaxRdpOrders) return false;
  for (uint32_t k = 0; r.ok() && k < n; ++k) c->dp_rdp.push_back(r.F64());
  return r.ok();
}

}  // namespace

void PutLevelStatistics(persist::Writer& w, const LevelStatistics& s) {
  w.F64(s.count);
  w.F64(s.sum);
  w.F64(s.sum_sq);
  w.U64(s.bucket_norms.size());
  w.F32s(s.bucket_norms);
  w.U64(s.largest_buckets.size());
  for (const BucketMoments& b : s.largest_buckets) {
    w.F32(b.norm);
    w.F64(b.count);
    w.F64(b.sum);
    w.F64(b.sum_sq);
  }
}

bool ReadLevelStatistics(persist::Reader& r, LevelStatistics* s) {
  s->count = r.F64();
  s->sum = r.F64();
  s->sum_sq = r.F64();
  r.F32s(r.U64(), &s->bucket_norms);
  const uint64_t buckets = r.U64();
  if (buckets > r.left() / 28) r.Fail();  // 28 bytes a bucket
  for (uint64_t i = 0; r.ok() && i < buckets; ++i) {
    BucketMoments b;
    b.norm = r.F32();
    b.count = r.F64();
    b.sum = r.F64();
    b.sum_sq = r.F64();
    s->largest_buckets.push_back(b);
  }
  return r.ok();
}

namespace {


// The aggregator's section of a checkpoint (checkpoint.h): everything of the
// aggregator's state but the model.
std::vector<uint8_t> EncodeAggregatorSection(const AggregatorCheckpoint& c) {
  persist::Writer w;
  w.U32(kSectionVersion);
  w.U32(c.round);
  w.U64(c.first_moment.size());
  w.U64(c.second_moment.size());
  w.F32s(c.first_moment);
  w.F32s(c.second_moment);
  PutCodecState(w, c);
  PutPrivacyState(w, c);
  w.U32(c.rounds_since_refit);
  PutLevelStatistics(w, c.pending_levels);
  return std::move(w).Take();
}

Status DecodeAggregatorSection(const std::vector<uint8_t>& bytes, const std::string& path, AggregatorCheckpoint* c) {
  persist::Reader r(bytes.data(), bytes.size());
  const uint32_t version = r.U32();
  if (r.ok() && (version < 1 || version > kSectionVersion)) {
    return Unsupported(path + ": aggregator section version " + std::to_string(version) + " (this build reads " +
                       "1 to " + std::to_string(kSectionVersion) + ")");
  }
  c->round = r.U32();
  const uint64_t first = r.U64(), second = r.U64();
  r.F32s(first, &c->first_moment);
  r.F32s(second, &c->second_moment);
  if (!r.ok()) return Corrupt(path + ": bad aggregator section");
  if (!ReadCodecState(r, c)) return Corrupt(path + ": bad codec state");
  if (!ReadPrivacyState(r, c)) return Corrupt(path + ": bad privacy state");
  if (version >= 2) {
    c->rounds_since_refit = r.U32();
    if (!ReadLevelStatistics(r, &c->pending_levels)) return Corrupt(path + ": bad pending level statistics");
  }
  if (!r.AtEnd()) return Corrupt(path + ": " + (version >= 2 ? "bad pending level statistics" : "bad privacy state"));
  return Status::Ok();
}

// Files of earlier builds: magic "FEDRTAGG", versions 1 to 3.
Result<AggregatorCheckpoint> DecodeLegacy(const uint8_t* bytes, std::size_t size, const std::string& path) {
  uint32_t version = 0;
  persist::Reader r;
  FEDRT_RETURN_IF_ERROR(persist::OpenFrame(bytes, size, kLegacyMagic, path, "an aggregator checkpoint", &version, &r));
  if (!persist::Crc32cTrailerMatches(bytes, size)) return Corrupt(path + ": checksum mismatch");
  if (version < 1 || version > 3) {
    return Unsupported(path + ": aggregator checkpoint version " + std::to_string(version) +
                       " (this build reads versions 1 to 3 of the \"FEDRTAGG\" files, and checkpoints)");
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

}  // namespace

std::vector<uint8_t> EncodeAggregatorCheckpoint(const AggregatorCheckpoint& checkpoint) {
  Checkpoint file;
  file.spec = checkpoint.model;
  file.parameters = checkpoint.parameters;
  file.aggregator_state = EncodeAggregatorSection(checkpoint);
  return EncodeCheckpoint(file);
}

Status WriteAggregatorCheckpoint(const std::string& path, const AggregatorCheckpoint& checkpoint) {
  return persist::WriteFileAtomically(path, EncodeAggregatorCheckpoint(checkpoint));
}

Result<AggregatorCheckpoint> AggregatorStateOf(Checkpoint file, const std::string& path) {
  AggregatorCheckpoint checkpoint;
  if (!file.aggregator_state.empty()) {
    FEDRT_RETURN_IF_ERROR(DecodeAggregatorSection(file.aggregator_state, path, &checkpoint));
  }
  checkpoint.model = std::move(file.spec);
  checkpoint.parameters = std::move(file.parameters);
  return checkpoint;
}

namespace {

// Whether the bytes are an aggregator file of an earlier build ("FEDRTAGG").
bool IsLegacyFile(const uint8_t* bytes, std::size_t size) {
  return size >= kLegacyMagicSize && std::memcmp(bytes, kLegacyMagic, kLegacyMagicSize) == 0;
}

Result<std::vector<uint8_t>> ReadFile(const std::string& path) {
  return persist::ReadWholeFile(path, static_cast<std::size_t>(std::min<uint64_t>(kMaxFileBytes, SIZE_MAX)));
}

}  // namespace

Result<std::vector<uint8_t>> ReadAggregatorCheckpointBytes(const std::string& path) { return ReadFile(path); }

Result<AggregatorCheckpoint> ReadAggregatorCheckpoint(const std::string& path) {
  Result<std::vector<uint8_t>> file = ReadFile(path);
  if (!file.ok()) return file.status();
  return DecodeAggregatorCheckpoint(file->data(), file->size(), path);
}

Result<AggregatorCheckpoint> DecodeAggregatorCheckpoint(const uint8_t* bytes, std::size_t size,
                                                        const std::string& path) {
  if (IsLegacyFile(bytes, size)) return DecodeLegacy(bytes, size, path);
  Result<Checkpoint> checkpoint = DecodeCheckpoint(bytes, size, path);
  if (!checkpoint.ok()) return checkpoint.status();
  return AggregatorStateOf(std::move(*checkpoint), path);
}

Result<Checkpoint> ReadAnyCheckpointFile(const std::string& path) {
  Result<std::vector<uint8_t>> file = ReadFile(path);
  if (!file.ok()) return file.status();
  if (!IsLegacyFile(file->data(), file->size())) return DecodeCheckpoint(file->data(), file->size(), path);
  Result<AggregatorCheckpoint> state = DecodeLegacy(file->data(), file->size(), path);
  if (!state.ok()) return state.status();
  Checkpoint checkpoint;
  checkpoint.spec = state->model;
  checkpoint.parameters = std::move(state->parameters);
  checkpoint.aggregator_state = EncodeAggregatorSection(*state);
  return checkpoint;
}

}  // namespace fedrt
