// Checkpoint encoding and decoding (fedrt/runtime/checkpoint.h); portable,
// no files: checkpoint_file.cc reads and writes them.
#include "fedrt/runtime/checkpoint.h"

#include <cstring>

#include "fedrt/platform/config.h"
#if FEDRT_HAVE_ZLIB
#include <zlib.h>
#endif

#include "persist/coding.h"

namespace fedrt {
namespace {

constexpr char kMagic[persist::kMagicSize] = {'F', 'E', 'D', 'R', 'T', 'C', 'K', 'P'};

// Version 1 files end with a zlib CRC-32; only builds with zlib can check it.
constexpr uint32_t kZlibCrcVersion = 1;
// Version 2: no aggregator section.
constexpr uint32_t kNoAggregatorVersion = 2;

#if FEDRT_HAVE_ZLIB
bool ZlibCrc32TrailerMatches(const uint8_t* bytes, std::size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const uint8_t* p = bytes;
  for (std::size_t left = size - 4; left > 0;) {
    const uInt chunk = left > (1u << 30) ? (1u << 30) : static_cast<uInt>(left);
    crc = crc32(crc, p, chunk);
    p += chunk;
    left -= chunk;
  }
  persist::Reader trailer(bytes + size - 4, 4);
  return static_cast<uint32_t>(crc) == trailer.U32();
}
#endif

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
  persist::Writer w(kMagic, kCheckpointVersion);
  w.U32(0);  // reserved
  w.U64(c.step);
  w.U64(c.epoch);
  w.String(c.spec);
  w.U64(c.parameters.size());
  w.F32s(c.parameters);
  w.U64(c.velocity.size());
  w.F32s(c.velocity);
  w.U64(c.aggregator_state.size());
  w.Bytes(c.aggregator_state.data(), c.aggregator_state.size());
  return std::move(w).Finish();
}

Result<Checkpoint> DecodeCheckpoint(const uint8_t* bytes, std::size_t size, const std::string& name) {
  auto corrupt = [&name](const std::string& what) { return Corrupt(name + ": " + what); };
  uint32_t version = 0;
  persist::Reader r;
  FEDRT_RETURN_IF_ERROR(persist::OpenFrame(bytes, size, kMagic, name, "a fedrt checkpoint", &version, &r));
  // The version first: it decides the checksum.
  if (version == kCheckpointVersion || version == kNoAggregatorVersion) {
    if (!persist::Crc32cTrailerMatches(bytes, size)) return corrupt("checksum mismatch (truncated or damaged)");
  } else if (version == kZlibCrcVersion) {
#if FEDRT_HAVE_ZLIB
    if (!ZlibCrc32TrailerMatches(bytes, size)) return corrupt("checksum mismatch (truncated or damaged)");
#else
    return Unsupported(name + ": checkpoint format version 1 (zlib CRC-32) needs a build with zlib; this build "
                       "reads version " + std::to_string(kCheckpointVersion));
#endif
  } else {
    return Unsupported(name + ": checkpoint format version " + std::to_string(version) +
                       " (this build reads versions 1 to " + std::to_string(kCheckpointVersion) + ")");
  }

  Checkpoint c;
  r.U32();  // reserved
  c.step = r.U64();
  c.epoch = r.U64();
  c.spec = r.String(kMaxCheckpointSpecBytes);
  if (!r.ok()) return corrupt("bad header");
  for (std::vector<float>* tensor : {&c.parameters, &c.velocity}) {
    const uint64_t count = r.U64();
    if (count > kMaxCheckpointFloats) r.Fail();
    r.F32s(count, tensor);
  }
  if (!r.ok()) return corrupt("bad tensor length");
  if (!c.velocity.empty() && c.velocity.size() != c.parameters.size()) return corrupt("momentum buffer size differs");
  if (version >= 3) {
    const uint64_t section = r.U64();
    if (section > kMaxCheckpointAggregatorBytes || section > r.left()) r.Fail();
    const uint8_t* bytes_in = r.Bytes(static_cast<std::size_t>(section));
    if (!r.ok()) return corrupt("bad aggregator section length");
    c.aggregator_state.assign(bytes_in, bytes_in + section);
  }
  if (!r.AtEnd()) return corrupt("unexpected bytes after the tensors");
  return c;
}

}  // namespace fedrt
