// Shared by the C API's sources (include/fedrt/fedrt.h): turning a C++
// Status into a pinned fedrt_status plus the per-thread message, the
// argument checks every entry point makes before it reaches the C++ core,
// and the model handle (which the device client trains).
#ifndef FEDRT_RUNTIME_CAPI_INTERNAL_H_
#define FEDRT_RUNTIME_CAPI_INTERNAL_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "fedrt/fedrt.h"
#include "fedrt/platform/clock.h"
#include "fedrt/platform/status.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/crypto.h"

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

// A status a callback returned, as the engine's Status. Values outside the
// enum are the callback's bug, reported as internal.
Status FromCallback(fedrt_status status, const char* callback);

// C SGD options as the engine's (NULL: fedrt_sgd_options_default()); a
// constant learning rate.
SgdOptions ToSgdOptions(const fedrt_sgd_options* c);

// A C data view as the engine's.
DataView ToDataView(const fedrt_data_view& c);

// The application's randomness and HMAC (the device's and the aggregator's
// callbacks share the signatures) as the join's Crypto; a NULL HMAC is the
// system's (init refuses it in builds without one).
using RandomBytesCallback = fedrt_status (*)(void* user, uint8_t* out, size_t size);
using HmacCallback = fedrt_status (*)(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                                      size_t message_size, uint8_t* mac);
class CallbackCrypto final : public transport::Crypto {
 public:
  CallbackCrypto(void* user, RandomBytesCallback random_bytes, HmacCallback hmac)
      : user_(user), random_bytes_(random_bytes), hmac_(hmac) {}
  Status RandomBytes(uint8_t* out, std::size_t size) override;
  Status HmacSha256(const uint8_t* key, std::size_t key_size, const uint8_t* message, std::size_t message_size,
                    std::array<uint8_t, transport::kSha256Bytes>* mac) override;
  // The join compares the peer's proof with this: every byte is looked at
  // whatever the first difference, so the time says nothing about where it is.
  bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, std::size_t size) override;

 private:
  void* user_;
  RandomBytesCallback random_bytes_;
  HmacCallback hmac_;
};

// FEDRT_INVALID_ARGUMENT naming `function` when `hmac` is NULL in a build
// without an HMAC-SHA256 of its own, else FEDRT_OK.
fedrt_status RequireHmac(HmacCallback hmac, const char* function);

// C keys as a KeyStore, through the key file's text format so that ids and
// key lengths are checked where they always are (kInvalidArgument).
Result<transport::KeyStore> KeysFrom(const fedrt_aggregator_key* keys, std::size_t count);

// The application's millisecond clock as the engine's Clock.
class CallbackClock final : public Clock {
 public:
  CallbackClock(void* user, uint64_t (*now_ms)(void* user)) : user_(user), now_ms_(now_ms) {}
  uint64_t NowNanos() const override { return now_ms_(user_) * 1000000u; }

 private:
  void* user_;
  uint64_t (*now_ms_)(void* user);
};

}  // namespace fedrt::capi

// Returns from the enclosing C entry point when `pointer` is NULL.
#define FEDRT_C_REQUIRE(pointer, function)                                      \
  do {                                                                          \
    const fedrt_status fedrt_c_status_ = ::fedrt::capi::RequireNonNull(         \
        static_cast<const void*>(pointer), function, #pointer);                 \
    if (fedrt_c_status_ != FEDRT_OK) return fedrt_c_status_;                    \
  } while (0)

#endif  // FEDRT_RUNTIME_CAPI_INTERNAL_H_
