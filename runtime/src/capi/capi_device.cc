// The C API's device client: fedrt::DeviceClient driven by RunDeviceSession
// (fedrt/runtime/device_client.h) over the application's callbacks. This
// file only adapts: the callbacks become the engine's DeviceIo, Clock and
// transport::Crypto, and statuses cross in both directions. No protocol or
// training logic lives here.
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capi/capi_internal.h"
#include "fedrt/fedrt.h"
#include "fedrt/platform/clock.h"
#include "fedrt/platform/config.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/device_client.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/frame.h"

namespace fedrt::capi {
namespace {

static_assert(FEDRT_DEVICE_ID_MAX == 64, "IsValidDeviceId allows 1 to 64 characters");
static_assert(FEDRT_KEY_MIN_BYTES == transport::kMinKeyBytes, "the C key bounds are auth.h's");
static_assert(FEDRT_KEY_MAX_BYTES == transport::kMaxKeyBytes, "the C key bounds are auth.h's");
static_assert(FEDRT_MAC_BYTES == transport::kSha256Bytes, "an HMAC-SHA256 has 32 bytes");

// A status a callback returned, as the engine's Status. Values outside the
// enum are the callback's bug, reported as internal.
Status FromCallback(fedrt_status status, const char* callback) {
  if (status == FEDRT_OK) return Status::Ok();
  const int value = static_cast<int>(status);
  if (value < 0 || value > static_cast<int>(FEDRT_CANCELLED)) {
    return Status(StatusCode::kInternal, std::string("the ") + callback + " callback returned " +
                                             std::to_string(value) + ", not a fedrt_status");
  }
  return Status(static_cast<StatusCode>(value), std::string("the ") + callback + " callback failed");
}

// The application's randomness and HMAC as the join's Crypto; a NULL HMAC is
// the system's (create refuses it in builds without one).
class CallbackCrypto final : public transport::Crypto {
 public:
  explicit CallbackCrypto(const fedrt_device_callbacks& callbacks) : callbacks_(callbacks) {}

  Status RandomBytes(uint8_t* out, std::size_t size) override {
    return FromCallback(callbacks_.random_bytes(callbacks_.user, out, size), "random_bytes");
  }

  Status HmacSha256(const uint8_t* key, std::size_t key_size, const uint8_t* message, std::size_t message_size,
                    std::array<uint8_t, transport::kSha256Bytes>* mac) override {
    if (callbacks_.hmac_sha256 != nullptr) {
      return FromCallback(callbacks_.hmac_sha256(callbacks_.user, key, key_size, message, message_size, mac->data()),
                          "hmac_sha256");
    }
#if FEDRT_HAVE_OPENSSL
    return transport::SystemCrypto().HmacSha256(key, key_size, message, message_size, mac);
#else
    return Status(StatusCode::kInternal, "no HMAC-SHA256: fedrt_device_create should have refused the device");
#endif
  }

  // The join compares the server's proof with this: every byte is looked at
  // whatever the first difference, so the time says nothing about where it is.
  bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, std::size_t size) override {
    volatile uint8_t difference = 0;
    for (std::size_t i = 0; i < size; ++i) difference = static_cast<uint8_t>(difference | (a[i] ^ b[i]));
    return difference == 0;
  }

 private:
  const fedrt_device_callbacks& callbacks_;
};

class CallbackClock final : public Clock {
 public:
  explicit CallbackClock(const fedrt_device_callbacks& callbacks) : callbacks_(callbacks) {}
  uint64_t NowNanos() const override { return callbacks_.now_ms(callbacks_.user) * 1000000u; }

 private:
  const fedrt_device_callbacks& callbacks_;
};

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

}  // namespace
}  // namespace fedrt::capi

// Members in the order they are built; the client, which refers to the
// others, is destroyed first.
struct fedrt_device {
  explicit fedrt_device(const fedrt_device_callbacks& c) : callbacks(c), crypto(callbacks), clock(callbacks) {}

  const fedrt_device_callbacks callbacks;
  fedrt::capi::CallbackCrypto crypto;
  fedrt::capi::CallbackClock clock;
  fedrt::DeviceSessionOptions session;
  std::vector<uint32_t> share;
  fedrt::DeviceIo io;
  std::unique_ptr<fedrt::DeviceClient> client;
};

using fedrt::capi::Fail;

extern "C" {

int fedrt_system_crypto_available(void) { return FEDRT_HAVE_OPENSSL ? 1 : 0; }

fedrt_device_options fedrt_device_options_default(void) {
  const fedrt::DeviceClientConfig config;
  const fedrt::DeviceSessionOptions session;
  fedrt_device_options o;
  o.batch = config.batch;
  o.shuffle_seed = config.shuffle_seed;
  o.heartbeat_interval_ms = session.heartbeat_interval_ms;
  o.idle_timeout_ms = session.idle_timeout_ms;
  o.join_timeout_ms = session.join_timeout_ms;
  o.steps_per_slice = session.steps_per_slice;
  o.max_frame_bytes = config.max_frame_bytes;
  return o;
}

fedrt_status fedrt_device_create(const char* device_id, const uint8_t* key, size_t key_size, fedrt_model_t* model,
                                 const fedrt_data_view* data, const uint32_t* share, size_t share_count,
                                 const fedrt_device_options* options, const fedrt_device_callbacks* callbacks,
                                 fedrt_device_t** device) {
  constexpr const char* kFunction = "fedrt_device_create";
  FEDRT_C_REQUIRE(device_id, kFunction);
  FEDRT_C_REQUIRE(key, kFunction);
  FEDRT_C_REQUIRE(model, kFunction);
  FEDRT_C_REQUIRE(data, kFunction);
  FEDRT_C_REQUIRE(callbacks, kFunction);
  FEDRT_C_REQUIRE(device, kFunction);
  const struct {
    bool present;
    const char* name;
  } required[] = {{callbacks->send != nullptr, "callbacks->send"},
                  {callbacks->receive != nullptr, "callbacks->receive"},
                  {callbacks->now_ms != nullptr, "callbacks->now_ms"},
                  {callbacks->random_bytes != nullptr, "callbacks->random_bytes"}};
  for (const auto& callback : required) {
    if (!callback.present) return fedrt::capi::RequireNonNull(nullptr, kFunction, callback.name);
  }
  if (callbacks->hmac_sha256 == nullptr && !fedrt_system_crypto_available()) {
    return Fail(fedrt::InvalidArgument(
        "fedrt_device_create: callbacks->hmac_sha256 is NULL, and this build of fedrt has no HMAC-SHA256 of its "
        "own (it was built without OpenSSL): pass the platform's"));
  }
  if (share == nullptr && share_count != 0) {
    return Fail(fedrt::InvalidArgument("fedrt_device_create: share is NULL with share_count " +
                                       std::to_string(share_count)));
  }
  const fedrt_device_options o = options != nullptr ? *options : fedrt_device_options_default();

  auto created = std::make_unique<fedrt_device>(*callbacks);
  fedrt_device& d = *created;
  d.session.heartbeat_interval_ms = o.heartbeat_interval_ms;
  d.session.idle_timeout_ms = o.idle_timeout_ms;
  d.session.join_timeout_ms = o.join_timeout_ms;
  d.session.steps_per_slice = o.steps_per_slice;
  if (share != nullptr) d.share.assign(share, share + share_count);
  fedrt::DeviceClientConfig config;
  config.device_id = device_id;
  config.key.assign(key, key + key_size);
  config.batch = o.batch;
  config.shuffle_seed = o.shuffle_seed;
  config.max_frame_bytes = o.max_frame_bytes;
  fedrt::DeviceHooks hooks;
  if (callbacks->on_residual != nullptr) {
    const fedrt_device_callbacks* c = &d.callbacks;
    hooks.on_residual = [c](const float* residual, std::size_t count) { c->on_residual(c->user, residual, count); };
  }
  fedrt::Result<std::unique_ptr<fedrt::DeviceClient>> client = fedrt::DeviceClient::Create(
      config, model->model, fedrt::capi::ToDataView(*data), share != nullptr ? &d.share : nullptr, d.crypto,
      std::move(hooks));
  if (!client.ok()) return Fail(client.status());
  d.client = std::move(*client);
  const fedrt_device_callbacks* c = &d.callbacks;
  d.io.send = [c](const uint8_t* bytes, std::size_t size) {
    return fedrt::capi::FromCallback(c->send(c->user, bytes, size), "send");
  };
  d.io.receive = [c](uint8_t* buffer, std::size_t capacity, uint32_t timeout_ms) -> fedrt::Result<std::size_t> {
    std::size_t received = 0;
    const fedrt::Status status =
        fedrt::capi::FromCallback(c->receive(c->user, buffer, capacity, timeout_ms, &received), "receive");
    if (!status.ok()) return status;
    if (received > capacity) {
      return fedrt::Status(fedrt::StatusCode::kInternal, "the receive callback reported " + std::to_string(received) +
                                                             " bytes for a buffer of " + std::to_string(capacity));
    }
    return received;
  };
  *device = created.release();
  return FEDRT_OK;
}

void fedrt_device_destroy(fedrt_device_t* device) { delete device; }

fedrt_status fedrt_device_run_session(fedrt_device_t* device) {
  FEDRT_C_REQUIRE(device, "fedrt_device_run_session");
  if (device->client->finished()) {
    return Fail(fedrt::Status(fedrt::StatusCode::kFailedPrecondition,
                              "fedrt_device_run_session: the aggregator has ended the training already"));
  }
  std::function<bool()> stop;
  if (device->callbacks.should_stop != nullptr) {
    const fedrt_device_callbacks* c = &device->callbacks;
    stop = [c] { return c->should_stop(c->user) != 0; };
  }
  return fedrt::capi::FromStatus(
      fedrt::RunDeviceSession(*device->client, device->io, device->clock, device->session, stop));
}

int fedrt_device_finished(const fedrt_device_t* device) {
  return device != nullptr && device->client->finished() ? 1 : 0;
}

uint64_t fedrt_device_round(const fedrt_device_t* device) { return device != nullptr ? device->client->round() : 0; }

uint64_t fedrt_device_joins(const fedrt_device_t* device) { return device != nullptr ? device->client->joins() : 0; }

uint32_t fedrt_device_sender_id(const fedrt_device_t* device) {
  return device != nullptr ? device->client->sender_id() : 0;
}

size_t fedrt_device_examples(const fedrt_device_t* device) {
  return device != nullptr ? device->client->examples() : 0;
}

fedrt_status fedrt_device_restore_residual(fedrt_device_t* device, const float* residual, size_t count) {
  FEDRT_C_REQUIRE(device, "fedrt_device_restore_residual");
  FEDRT_C_REQUIRE(residual, "fedrt_device_restore_residual");
  return fedrt::capi::FromStatus(device->client->RestoreResidual(residual, count));
}

}  // extern "C"
