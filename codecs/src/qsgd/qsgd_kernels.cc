// Dispatch of the normalized-quantizer kernel family.
#include "fedrt/platform/config.h"
#include "qsgd/qsgd_kernels.h"

namespace fedrt {

const QsgdKernels& QsgdKernelsFor(Isa isa) {
  switch (isa) {
    default: return scalar::kQsgdKernels;
  }
}

}  // namespace fedrt
