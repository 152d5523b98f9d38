// The C API's status values, per-thread error message, version and ISA.
#include <cstring>
#include <string>

#include "capi/capi_internal.h"
#include "fedrt/fedrt.h"
#include "fedrt/platform/config.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/platform/status.h"
#include "fedrt/transport/auth.h"
#include "fedrt/platform/concat.h"

namespace fedrt::capi {
namespace {

// The C enum is the C++ one, value for value (status.h pins them both).
#define FEDRT_C_PINNED(c_value, cpp_value)                                        \
  static_assert(static_cast<int>(c_value) == static_cast<int>(StatusCode::cpp_value), \
                #c_value " must equal StatusCode::" #cpp_value)
FEDRT_C_PINNED(FEDRT_OK, kOk);
FEDRT_C_PINNED(FEDRT_INVALID_ARGUMENT, kInvalidArgument);
FEDRT_C_PINNED(FEDRT_OUT_OF_RANGE, kOutOfRange);
FEDRT_C_PINNED(FEDRT_CORRUPT, kCorrupt);
FEDRT_C_PINNED(FEDRT_UNSUPPORTED, kUnsupported);
FEDRT_C_PINNED(FEDRT_NOT_FOUND, kNotFound);
FEDRT_C_PINNED(FEDRT_IO_ERROR, kIoError);
FEDRT_C_PINNED(FEDRT_DEADLINE_EXCEEDED, kDeadlineExceeded);
FEDRT_C_PINNED(FEDRT_UNAVAILABLE, kUnavailable);
FEDRT_C_PINNED(FEDRT_UNAUTHENTICATED, kUnauthenticated);
FEDRT_C_PINNED(FEDRT_RESOURCE_EXHAUSTED, kResourceExhausted);
FEDRT_C_PINNED(FEDRT_FAILED_PRECONDITION, kFailedPrecondition);
FEDRT_C_PINNED(FEDRT_INTERNAL, kInternal);
FEDRT_C_PINNED(FEDRT_CANCELLED, kCancelled);
#undef FEDRT_C_PINNED

// A fixed buffer per thread (one buffer on a board without threads):
// recording a message allocates nothing more than the Status that carries it
// already did.
#if FEDRT_HAVE_THREADS
thread_local
#endif
    char last_error[FEDRT_ERROR_MESSAGE_SIZE];

}  // namespace

fedrt_status Fail(const Status& status) {
  const std::string text = status.ToString();
  const std::size_t n = text.size() < sizeof last_error - 1 ? text.size() : sizeof last_error - 1;
  std::memcpy(last_error, text.data(), n);
  last_error[n] = '\0';
  return static_cast<fedrt_status>(status.code());
}

fedrt_status RequireNonNull(const void* pointer, const char* function, const char* what) {
  if (pointer != nullptr) return FEDRT_OK;
  return Fail(InvalidArgument(std::string(function) + ": " + what + " is NULL"));
}

Status FromCallback(fedrt_status status, const char* callback) {
  if (status == FEDRT_OK) return Status::Ok();
  const int value = static_cast<int>(status);
  if (value < 0 || value > static_cast<int>(FEDRT_CANCELLED)) {
    return Status(StatusCode::kInternal, Concat({"the ", callback, " callback returned ", value,
                                                 ", not a fedrt_status"}));
  }
  return Status(static_cast<StatusCode>(value), std::string("the ") + callback + " callback failed");
}

DataView ToDataView(const fedrt_data_view& c) {
  DataView view;
  view.count = c.count;
  view.example_size = c.example_size;
  view.num_classes = c.num_classes;
  view.pixels = c.pixels;
  view.features = c.features;
  if (c.pixels != nullptr) {  // float features are read as they are
    view.normalization.mean = c.mean;
    view.normalization.stddev = c.stddev;
  }
  view.labels = c.labels;
  return view;
}

Status CallbackCrypto::RandomBytes(uint8_t* out, std::size_t size) {
  return FromCallback(random_bytes_(user_, out, size), "random_bytes");
}

Status CallbackCrypto::HmacSha256(const uint8_t* key, std::size_t key_size, const uint8_t* message,
                                  std::size_t message_size, std::array<uint8_t, transport::kSha256Bytes>* mac) {
  if (hmac_ != nullptr) {
    return FromCallback(hmac_(user_, key, key_size, message, message_size, mac->data()), "hmac_sha256");
  }
#if FEDRT_HAVE_OPENSSL
  return transport::SystemCrypto().HmacSha256(key, key_size, message, message_size, mac);
#else
  return Status(StatusCode::kInternal, "no HMAC-SHA256: init should have refused a NULL hmac_sha256 callback");
#endif
}

fedrt_status RequireHmac(HmacCallback hmac, const char* function) {
  if (hmac != nullptr || fedrt_system_crypto_available()) return FEDRT_OK;
  return Fail(InvalidArgument(std::string(function) +
                              ": callbacks->hmac_sha256 is NULL, and this build of fedrt has no HMAC-SHA256 of its "
                              "own (it was built without OpenSSL): pass the platform's"));
}

Result<transport::KeyStore> KeysFrom(const fedrt_aggregator_key* keys, std::size_t count) {
  if (keys == nullptr && count != 0) return InvalidArgument("keys is NULL with key_count " + std::to_string(count));
  static const char kHex[] = "0123456789abcdef";
  std::string text;
  for (std::size_t i = 0; i < count; ++i) {
    const fedrt_aggregator_key& k = keys[i];
    if (k.device_id == nullptr || k.key == nullptr) {
      return InvalidArgument("keys[" + std::to_string(i) + "]: device_id and key must not be NULL");
    }
    text += k.device_id;
    text += ' ';
    for (std::size_t b = 0; b < k.key_size; ++b) {
      text += kHex[k.key[b] >> 4];
      text += kHex[k.key[b] & 15];
    }
    text += '\n';
  }
  Result<transport::KeyStore> store = transport::KeyStore::Parse(text, "keys");
  if (!store.ok()) return InvalidArgument(store.status().message());
  return store;
}

bool CallbackCrypto::ConstantTimeEqual(const uint8_t* a, const uint8_t* b, std::size_t size) {
  volatile uint8_t difference = 0;
  for (std::size_t i = 0; i < size; ++i) difference = static_cast<uint8_t>(difference | (a[i] ^ b[i]));
  return difference == 0;
}

}  // namespace fedrt::capi

extern "C" {

const char* fedrt_status_name(fedrt_status status) {
  return fedrt::StatusCodeName(static_cast<fedrt::StatusCode>(status));
}

const char* fedrt_last_error(void) { return fedrt::capi::last_error; }

void fedrt_version(int* major, int* minor, int* patch) {
  if (major != nullptr) *major = FEDRT_VERSION_MAJOR;
  if (minor != nullptr) *minor = FEDRT_VERSION_MINOR;
  if (patch != nullptr) *patch = FEDRT_VERSION_PATCH;
}

const char* fedrt_version_string(void) { return FEDRT_VERSION_STRING; }

const char* fedrt_isa_name(void) { return fedrt::IsaName(fedrt::ActiveIsa()); }

}  // extern "C"
