// Checkpoints: a model's parameters, the optimizer's state (momentum buffer
// and step counter) and the number of completed epochs, so that training can
// stop and resume exactly.
//
// Format (version 2, all integers and floats little-endian):
//   "FEDRTCKP"  8 bytes magic
//   u32 version (2), u32 reserved (0)
//   u64 step, u64 epoch
//   u32 spec length L, L bytes model spec text (at most kMaxCheckpointSpecBytes)
//   u64 P, P x f32 parameters (P at most kMaxCheckpointFloats)
//   u64 V (0 or P), V x f32 momentum buffer
//   u32 CRC-32C (Castagnoli, as in codec payloads) of every byte before it
// Version 1 has the same layout with a zlib CRC-32 in place of the CRC-32C;
// builds with zlib still read it, builds without zlib refuse it as
// Unsupported naming the version. Checkpoints are always written as version 2.
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

inline constexpr uint32_t kCheckpointVersion = 2;
inline constexpr std::size_t kMaxCheckpointSpecBytes = 4096;
inline constexpr uint64_t kMaxCheckpointFloats = uint64_t{1} << 28;

struct Checkpoint {
  std::string spec;
  uint64_t step = 0;
  uint64_t epoch = 0;
  std::vector<float> parameters;
  std::vector<float> velocity;  // empty when the optimizer has no momentum
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
