// Checkpoint files (fedrt/runtime/checkpoint.h) through the persistence
// helper: atomic writes, and "no file" told apart from "cannot read".
#include "fedrt/runtime/checkpoint.h"

#include <algorithm>
#include <cstdint>

#include "persist/coding.h"
#include "persist/file.h"

namespace fedrt {
namespace {

// Header, spec, two tensors and the aggregator's section at their limits, and
// the CRC: reading stops before loading anything larger (a data set given by
// mistake, say).
constexpr uint64_t kMaxCheckpointBytes = persist::kFrameOverhead + 4 + 8 + 8 + 4 + kMaxCheckpointSpecBytes +
                                         2 * (8 + 4 * kMaxCheckpointFloats) + 8 + kMaxCheckpointAggregatorBytes;

}  // namespace

Status WriteCheckpointFile(const std::string& path, const Checkpoint& checkpoint) {
  return persist::WriteFileAtomically(path, EncodeCheckpoint(checkpoint));
}

Result<Checkpoint> ReadCheckpointFile(const std::string& path) {
  Result<std::vector<uint8_t>> bytes =
      persist::ReadWholeFile(path, static_cast<std::size_t>(std::min<uint64_t>(kMaxCheckpointBytes, SIZE_MAX)));
  if (!bytes.ok()) return bytes.status();
  return DecodeCheckpoint(bytes->data(), bytes->size(), path);
}

}  // namespace fedrt
