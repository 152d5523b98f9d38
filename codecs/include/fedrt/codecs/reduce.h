// Element-wise reduction of float32 vectors, the inner step of a ring
// all-reduce (a received chunk added into the local vector in place).
//
// AddFloats(in, n, inout): inout[i] = inout[i] + in[i] for i < n, one IEEE
// float32 addition per element (round to nearest even), so every ISA variant
// gives the same bits as the scalar reference, subnormals included (no flush
// to zero). Any n and any alignment; `in` and `inout` must not overlap unless
// they are equal. The ISA is the active one (platform/cpu.h: FEDRT_ISA and
// SetIsaOverride force another).
//
// Thread-safety: pure function on the caller's arrays.
#ifndef FEDRT_CODECS_REDUCE_H_
#define FEDRT_CODECS_REDUCE_H_

#include <cstddef>

namespace fedrt {

void AddFloats(const float* in, std::size_t n, float* inout);

}  // namespace fedrt

#endif  // FEDRT_CODECS_REDUCE_H_
