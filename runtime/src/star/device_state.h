// The device's state file: the error-feedback residual kept across restarts
// of `fedrt device --state-file F`. Layout (little-endian hosts only, like
// every fedrt file): 8 magic bytes "FEDRTEF1", the coordinate count d (u64),
// then d float32 values. Written to F.tmp and renamed over F, so a crash
// leaves the old or the new residual, never half of one.
//
// Thread-safety: plain functions; one writer per file.
#ifndef FEDRT_RUNTIME_STAR_DEVICE_STATE_H_
#define FEDRT_RUNTIME_STAR_DEVICE_STATE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt::star {

Status SaveResidual(const std::string& path, const float* residual, std::size_t d);

// kNotFound: no file (a first start). Otherwise errors name the file:
// kCorrupt when it is not a residual file, is cut short, has bytes after the
// values or holds non-finite values; kFailedPrecondition when it holds a
// residual of another size than this model's d.
Result<std::vector<float>> LoadResidual(const std::string& path, std::size_t d);

}  // namespace fedrt::star

#endif  // FEDRT_RUNTIME_STAR_DEVICE_STATE_H_
