// Scalar reference of the reduction kernels: one float32 addition per
// element, in index order (no tail: every element is handled the same way).
#include "reduce/reduce_kernels.h"

namespace fedrt::scalar {

void AddFloats(const float* in, std::size_t n, float* inout) {
  for (std::size_t i = 0; i < n; ++i) inout[i] = inout[i] + in[i];
}

}  // namespace fedrt::scalar
