// Checkpoints: the one file format of fedrt's model state, for training and
// aggregation alike. A checkpoint holds a model (spec and parameters), the
// training state (the optimizer's step counter and momentum buffer, the
// completed epochs) and, when an aggregator wrote it, the aggregator's state
// (completed rounds, server optimizer, codec and privacy state), so that
// `fedrt train` resumes from a file `fedrt serve` wrote and the other way
// round: each takes the model and its own state when the file has it.
//
// Format (version 3, all integers and floats little-endian):
//   "FEDRTCKP"  8 bytes magic
//   u32 version (3), u32 reserved (0)
//   u64 step, u64 epoch                      (0 and 0 when an aggregator wrote it)
//   u32 spec length L, L bytes model spec text (at most kMaxCheckpointSpecBytes)
//   u64 P, P x f32 parameters (P at most kMaxCheckpointFloats)
//   u64 V (0 or P), V x f32 momentum buffer
//   u64 A, A bytes the aggregator's section (0: none; its layout is the
//     aggregator's, src/star/aggregator_checkpoint.h; at most
//     kMaxCheckpointAggregatorBytes)
//   u32 CRC-32C (Castagnoli, as in codec payloads) of every byte before it
// Version 2 is version 3 without the aggregator's section; version 1 is
// version 2 with a zlib CRC-32 in place of the CRC-32C (builds without zlib
// refuse it as Unsupported naming the version). Both still load. Checkpoints
// are always written as version 3. The aggregator's files of earlier builds
// (magic "FEDRTAGG") are read by the aggregator and `fedrt model`.
// Decoding is the trust boundary: the magic, the version, the checksum, every
// length and the exact total size are checked before any value is used; a
// truncated, damaged or foreign file gives Corrupt (Unsupported for a newer
// version).
//
// Files are written atomically: to "<path>.tmp", fsync'ed, renamed over
// <path>, then the directory fsync'ed; a failed write leaves <path> as it was.
// Reading a file that does not exist is NotFound; a file that exists but
// cannot be read (permissions, a directory at the path, an I/O error) is an
// IoError naming the reason, never NotFound, so that a resuming caller does
// not start afresh over an existing checkpoint.
//
// Thread-safety: pure functions; do not write one path from two threads.
#ifndef FEDRT_RUNTIME_CHECKPOINT_H_
#define FEDRT_RUNTIME_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"

namespace fedrt {

inline constexpr uint32_t kCheckpointVersion = 3;
inline constexpr std::size_t kMaxCheckpointSpecBytes = 4096;
inline constexpr uint64_t kMaxCheckpointFloats = uint64_t{1} << 28;
// Three model-sized arrays (two server moments, the devices' model) and the
// rest of the aggregator's state.
inline constexpr uint64_t kMaxCheckpointAggregatorBytes = 3 * 4 * kMaxCheckpointFloats + (uint64_t{64} << 20);

struct Checkpoint {
  std::string spec;
  uint64_t step = 0;
  uint64_t epoch = 0;
  std::vector<float> parameters;
  std::vector<float> velocity;  // empty when the optimizer has no momentum
  // The aggregator's section as it is in the file (empty: none). Training
  // does not read it; a training run that resumes from an aggregator's file
  // writes it back unchanged, so the aggregator can resume from the file
  // again (at its round, from the model training left).
  std::vector<uint8_t> aggregator_state;
};

// A copy of the state of `model` and `sgd` after `epoch` completed epochs.
Checkpoint CaptureCheckpoint(const Model& model, const Sgd& sgd, uint64_t epoch);
// Loads a checkpoint into a model built from the same spec and an optimizer
// of the same parameter count (FailedPrecondition otherwise). A checkpoint
// without momentum leaves a momentum optimizer's buffer at zero.
Status RestoreCheckpoint(const Checkpoint& checkpoint, Model& model, Sgd& sgd);

std::vector<uint8_t> EncodeCheckpoint(const Checkpoint& checkpoint);
// `name` (a file name) prefixes the error messages.
Result<Checkpoint> DecodeCheckpoint(const uint8_t* bytes, std::size_t size, const std::string& name);

// The file functions (POSIX; src/train/checkpoint_file.cc). Errors name the path.
Status WriteCheckpointFile(const std::string& path, const Checkpoint& checkpoint);
// NotFound only when there is no file at `path`.
Result<Checkpoint> ReadCheckpointFile(const std::string& path);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_CHECKPOINT_H_
