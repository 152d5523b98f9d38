// Shared by the C API's sources (include/fedrt/fedrt.h): turning a C++
// Status into a pinned fedrt_status plus the per-thread message, the
// argument checks every entry point makes before it reaches the C++ core,
// and the model handle (which the device client trains).
#ifndef FEDRT_RUNTIME_CAPI_INTERNAL_H_
#define FEDRT_RUNTIME_CAPI_INTERNAL_H_

#include "fedrt/fedrt.h"
#include "fedrt/platform/status.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"

// The model handle, placed in the caller's memory by fedrt_model_init
// (capi_model.cc has the layout).
struct fedrt_model {
  fedrt::Model model;
  fedrt::Sgd sgd;
  int max_batch;
};

namespace fedrt::capi {

// Records `status`'s message for fedrt_last_error() and returns its code.
// `status` must not be OK.
fedrt_status Fail(const Status& status);

// FEDRT_OK for an OK status, else Fail(status).
inline fedrt_status FromStatus(const Status& status) {
  return status.ok() ? FEDRT_OK : Fail(status);
}

// FEDRT_INVALID_ARGUMENT with "<function>: <what> is NULL" when `pointer`
// is null, else FEDRT_OK.
fedrt_status RequireNonNull(const void* pointer, const char* function, const char* what);

}  // namespace fedrt::capi

// Returns from the enclosing C entry point when `pointer` is NULL.
#define FEDRT_C_REQUIRE(pointer, function)                                      \
  do {                                                                          \
    const fedrt_status fedrt_c_status_ = ::fedrt::capi::RequireNonNull(         \
        static_cast<const void*>(pointer), function, #pointer);                 \
    if (fedrt_c_status_ != FEDRT_OK) return fedrt_c_status_;                    \
  } while (0)

#endif  // FEDRT_RUNTIME_CAPI_INTERNAL_H_
