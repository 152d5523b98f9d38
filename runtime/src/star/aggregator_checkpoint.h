// The aggregator's checkpoint: global model, server optimizer state, the
// number of completed rounds and the codec state, so a restarted aggregator
// resumes where it was and sends the instructions it would have sent.
//
// The file is a checkpoint (fedrt/runtime/checkpoint.h: the one format of
// model state, written atomically through the persistence helper) whose
// aggregator section holds (the persistence helper's coding, persist/coding.h:
// little-endian):
//   u32 section version (2; 1 still loads), u32 round
//   u64 first moment count, u64 second moment count, the two float arrays
//   str codec spec (the update codec the state belongs to)
//   u32 level table version, u32 level count, the levels (f32)
//   u32 count, then per device: str id, i32 rho       (NDQSG rho, when not the codec's)
//   u32 count, then per device: str id                (NDQSG devices sent plain DQSG next)
//   str downlink codec spec, i64 device model round, u64 count, the device model (f32)
//   u32 count, then per device: str id, i64 round     (last round whose model it acknowledged)
//   u32 count, then count f64 (as u64 bits)           (DP: the accountant's RDP at orders 2..)
//   u32 rounds since the last refit, level statistics (version 2: ALQ / AMQ's pending
//       statistics, PutLevelStatistics below)
// where str is a u32 length and the bytes. The model (spec, parameters) is
// the checkpoint's own; its epoch and step are written as 0.
//
// Reading takes any checkpoint: one without an aggregator section (what
// `fedrt train` writes) starts the aggregator at round 0 from its model. The
// aggregator files of earlier builds (magic "FEDRTAGG", versions 1 to 3: the
// same fields after a u32 round and the model) still load. Every count is
// checked against the bytes left before anything is used.
//
// Thread-safety: plain functions; one writer per file.
#ifndef FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_CHECKPOINT_H_
#define FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/runtime/checkpoint.h"

namespace fedrt {
namespace persist {
class Reader;
class Writer;
}  // namespace persist

// AggregatorCheckpoint (the state) is the engine's: fedrt/runtime/aggregator_engine.h.

// ALQ / AMQ level statistics in the persistence helper's coding: f64 count,
// sum, sum_sq; u64 n, n f32 bucket norms; u64 m, m x (f32 norm, f64 count,
// sum, sum_sq). The checkpoint and the aggregator tier's round partials use
// it. Read fails (false) on a count larger than the bytes left.
void PutLevelStatistics(persist::Writer& w, const LevelStatistics& statistics);
bool ReadLevelStatistics(persist::Reader& r, LevelStatistics* statistics);

Status WriteAggregatorCheckpoint(const std::string& path, const AggregatorCheckpoint& checkpoint);
// The bytes WriteAggregatorCheckpoint writes (for a host that writes them
// itself, persist::AtomicFileWriter).
std::vector<uint8_t> EncodeAggregatorCheckpoint(const AggregatorCheckpoint& checkpoint);
// kNotFound only when there is no file; a file that cannot be read is
// kIoError with the reason (never "no checkpoint"), one that fails a check
// kCorrupt, a version this build does not read kUnsupported. Errors name the path.
Result<AggregatorCheckpoint> ReadAggregatorCheckpoint(const std::string& path);
// The aggregator's state of a checkpoint read by ReadCheckpointFile (round 0
// and no server state when it has no aggregator section); `path` names errors.
Result<AggregatorCheckpoint> AggregatorStateOf(Checkpoint file, const std::string& path);
// ReadCheckpointFile that also takes an aggregator file of an earlier build
// ("FEDRTAGG"), as a checkpoint with that state in its aggregator section:
// what `fedrt train --checkpoint` and `fedrt model` read.
Result<Checkpoint> ReadAnyCheckpointFile(const std::string& path);
// The same checks on a file's bytes (what ReadAggregatorCheckpoint does after
// reading it; the fuzzers call it directly). `path` names the bytes in errors.
// The file's bytes, unchecked (kNotFound when it does not exist): an
// aggregator tier's rank 0 sends them to the other ranks, which decode them.
Result<std::vector<uint8_t>> ReadAggregatorCheckpointBytes(const std::string& path);
Result<AggregatorCheckpoint> DecodeAggregatorCheckpoint(const uint8_t* bytes, std::size_t size,
                                                        const std::string& path);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_SRC_STAR_AGGREGATOR_CHECKPOINT_H_
