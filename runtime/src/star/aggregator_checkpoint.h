// The aggregator's checkpoint: global model, server optimizer state and the
// number of completed rounds, so a restarted aggregator resumes where it was.
//
// Layout (little-endian, version 1): magic "FEDRTAGG", u32 version, u32 round,
// u32 model spec length, spec bytes, u64 parameter count, u64 first moment
// count, u64 second moment count, the three float arrays, CRC-32C of all
// bytes before it. Written to <path>.tmp, fsync'ed, renamed over <path>.
// Reading checks the magic, version, every count against the file size and
// the checksum before using anything.
#ifndef FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_CHECKPOINT_H_
#define FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt {

struct AggregatorCheckpoint {
  std::string model;
  uint32_t round = 0;
  std::vector<float> parameters;
  std::vector<float> first_moment;
  std::vector<float> second_moment;
};

Status WriteAggregatorCheckpoint(const std::string& path, const AggregatorCheckpoint& checkpoint);
// kNotFound when there is no file, kCorrupt when it fails a check.
Result<AggregatorCheckpoint> ReadAggregatorCheckpoint(const std::string& path);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_CHECKPOINT_H_
