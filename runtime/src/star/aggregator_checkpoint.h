// The aggregator's checkpoint: global model, server optimizer state, the
// number of completed rounds and the codec state, so a restarted aggregator
// resumes where it was and sends the instructions it would have sent.
//
// Layout (the persistence helper's frame and coding, persist/coding.h:
// little-endian, CRC-32C): magic "FEDRTAGG", u32 version, u32 round, str
// model spec, u64 parameter count, u64 first moment count, u64 second moment
// count, the three float arrays; version 2 then appends the codec state:
//   str codec spec (the update codec the state belongs to)
//   u32 level table version, u32 level count, the levels (f32)
//   u32 count, then per device: str id, i32 rho       (NDQSG rho, when not the codec's)
//   u32 count, then per device: str id                (NDQSG devices sent plain DQSG next)
//   str downlink codec spec, i64 device model round, u64 count, the device model (f32)
//   u32 count, then per device: str id, i64 round     (last round whose model it acknowledged)
// and version 3 the privacy state:
//   u32 count, then count f64 (as u64 bits)           (DP: the accountant's RDP at orders 2..)
// where str is a u32 length and the bytes. Then the CRC-32C of all bytes
// before it. Written atomically (persist/file.h: <path>.tmp, fsync, rename,
// fsync of the directory). Reading checks the magic, the checksum, the
// version and every count against the bytes left before using anything;
// version 1 and 2 files still load (with no codec or privacy state).
//
// Thread-safety: plain functions; one writer per file.
#ifndef FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_CHECKPOINT_H_
#define FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/aggregator_engine.h"

namespace fedrt {

// AggregatorCheckpoint (the state) is the engine's: fedrt/runtime/aggregator_engine.h.

Status WriteAggregatorCheckpoint(const std::string& path, const AggregatorCheckpoint& checkpoint);
// kNotFound only when there is no file; a file that cannot be read is
// kIoError with the reason (never "no checkpoint"), one that fails a check
// kCorrupt, a version this build does not read kUnsupported. Errors name the path.
Result<AggregatorCheckpoint> ReadAggregatorCheckpoint(const std::string& path);
// The same checks on a file's bytes (what ReadAggregatorCheckpoint does after
// reading it; the fuzzers call it directly). `path` names the bytes in errors.
Result<AggregatorCheckpoint> DecodeAggregatorCheckpoint(const uint8_t* bytes, std::size_t size,
                                                        const std::string& path);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_CHECKPOINT_H_
