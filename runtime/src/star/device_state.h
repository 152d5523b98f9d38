// The device's state file: the error-feedback residual kept across restarts
// of `fedrt device --state-file F`.
//
// Layout (the persistence helper's frame and coding, persist/coding.h):
//   "FEDRTDST"  8 bytes magic
//   u32 version (1)
//   u64 d, the coordinate count, then d x f32 residual values
//   u32 CRC-32C of every byte before it
// all little-endian. Written atomically (persist/file.h: F.tmp, fsync, rename
// over F, fsync of the directory), so a crash leaves the old or the new
// residual, never half of one. Files of the earlier format (magic "FEDRTEF1",
// u64 d, d x f32, no version or checksum; written by little-endian hosts
// only) still load; the next save replaces them with this format.
//
// Thread-safety: plain functions; one writer per file.
#ifndef FEDRT_RUNTIME_STAR_DEVICE_STATE_H_
#define FEDRT_RUNTIME_STAR_DEVICE_STATE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt::star {

Status SaveResidual(const std::string& path, const float* residual, std::size_t d);

// kNotFound only when there is no file (a first start). Otherwise errors
// name the file: kIoError when it exists but cannot be read (the reason
// given); kCorrupt when it is not a state file, is cut short, has bytes after
// the values, fails its checksum or holds non-finite values; kUnsupported for
// a newer version; kFailedPrecondition when it holds a residual of another
// size than this model's d.
Result<std::vector<float>> LoadResidual(const std::string& path, std::size_t d);
// The same checks on a file's bytes (what LoadResidual does after reading
// it; the fuzzers call it directly). `path` names the bytes in errors.
Result<std::vector<float>> DecodeResidual(const uint8_t* bytes, std::size_t size, std::size_t d,
                                          const std::string& path);

}  // namespace fedrt::star

#endif  // FEDRT_RUNTIME_STAR_DEVICE_STATE_H_
