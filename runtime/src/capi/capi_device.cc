// The C API's device client: fedrt::DeviceClient driven by RunDeviceSession
// (fedrt/runtime/device_client.h) over the application's callbacks. This
// file only adapts: the callbacks become the engine's DeviceIo, Clock and
// transport::Crypto, and statuses cross in both directions. No protocol or
// training logic lives here.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <string_view>
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
#include "fedrt/platform/concat.h"

namespace fedrt::capi {
namespace {

static_assert(FEDRT_DEVICE_ID_MAX == 64, "IsValidDeviceId allows 1 to 64 characters");
static_assert(FEDRT_KEY_MIN_BYTES == transport::kMinKeyBytes, "the C key bounds are auth.h's");
static_assert(FEDRT_KEY_MAX_BYTES == transport::kMaxKeyBytes, "the C key bounds are auth.h's");
static_assert(FEDRT_MAC_BYTES == transport::kSha256Bytes, "an HMAC-SHA256 has 32 bytes");

}  // namespace
}  // namespace fedrt::capi

// Members in the order they are built; the client, which refers to the
// others, is ended first. Placed at the start of the caller's memory (or of
// fedrt_device_create's heap block), the client's block after it.
struct fedrt_device {
  explicit fedrt_device(const fedrt_device_callbacks& c)
      : callbacks(c), crypto(c.user, c.random_bytes, c.hmac_sha256), clock(c.user, c.now_ms) {}
  ~fedrt_device() { fedrt::DeviceClient::Destroy(client); }

  const fedrt_device_callbacks callbacks;
  fedrt::capi::CallbackCrypto crypto;
  fedrt::capi::CallbackClock clock;
  fedrt::DeviceSessionOptions session;
  std::vector<uint32_t> share;
  fedrt::DeviceIo io;
  fedrt::DeviceClient* client = nullptr;
  unsigned char* heap_block = nullptr;  // fedrt_device_create's memory (freed by destroy)
};

namespace fedrt::capi {
namespace {

// Where the fedrt_device sits in the memory, and the client's block after it.
constexpr std::size_t kDeviceAlignment = alignof(std::max_align_t);
std::size_t HandleBytes() { return sizeof(fedrt_device) + kDeviceAlignment - 1; }

DeviceClientConfig ConfigFrom(const fedrt_device_options& o) {
  DeviceClientConfig config;
  config.batch = o.batch;
  config.shuffle_seed = o.shuffle_seed;
  config.max_frame_bytes = o.max_frame_bytes;
  if (o.codecs != nullptr) {
    std::string_view list(o.codecs);
    while (!list.empty()) {
      const std::size_t end = std::min(list.find(';'), list.size());
      if (end > 0) config.codecs.emplace_back(list.substr(0, end));
      list.remove_prefix(std::min(end + 1, list.size()));
    }
  }
  return config;
}

// The arguments fedrt_device_init and fedrt_device_create share, checked
// before anything is sized or placed.
fedrt_status CheckDeviceArguments(const char* function, const char* device_id, const uint8_t* key,
                                  fedrt_model_t* model, const fedrt_data_view* data, const uint32_t* share,
                                  size_t share_count, const fedrt_device_callbacks* callbacks,
                                  fedrt_device_t** device) {
  FEDRT_C_REQUIRE(device_id, function);
  FEDRT_C_REQUIRE(key, function);
  FEDRT_C_REQUIRE(model, function);
  FEDRT_C_REQUIRE(data, function);
  FEDRT_C_REQUIRE(callbacks, function);
  FEDRT_C_REQUIRE(device, function);
  const struct {
    bool present;
    const char* name;
  } required[] = {{callbacks->send != nullptr, "callbacks->send"},
                  {callbacks->receive != nullptr, "callbacks->receive"},
                  {callbacks->now_ms != nullptr, "callbacks->now_ms"},
                  {callbacks->random_bytes != nullptr, "callbacks->random_bytes"}};
  for (const auto& callback : required) {
    if (!callback.present) return fedrt::capi::RequireNonNull(nullptr, function, callback.name);
  }
  const fedrt_status hmac = fedrt::capi::RequireHmac(callbacks->hmac_sha256, function);
  if (hmac != FEDRT_OK) return hmac;
  if (share == nullptr && share_count != 0) {
    return Fail(fedrt::InvalidArgument(fedrt::Concat({function, ": share is NULL with share_count ", share_count})));
  }
  return FEDRT_OK;
}

}  // namespace
}  // namespace fedrt::capi

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
  o.codecs = nullptr;
  return o;
}

fedrt_status fedrt_device_size(const fedrt_model_t* model, const fedrt_data_view* data, size_t share_count,
                               const fedrt_device_options* options, size_t* bytes) {
  constexpr const char* kFunction = "fedrt_device_size";
  FEDRT_C_REQUIRE(model, kFunction);
  FEDRT_C_REQUIRE(data, kFunction);
  FEDRT_C_REQUIRE(bytes, kFunction);
  const fedrt_device_options o = options != nullptr ? *options : fedrt_device_options_default();
  const std::size_t examples = share_count != 0 ? share_count : data->count;
  fedrt::Result<std::size_t> needed =
      fedrt::DeviceClient::RequiredBytes(fedrt::capi::ConfigFrom(o), model->model, examples);
  if (!needed.ok()) return Fail(needed.status());
  *bytes = fedrt::capi::HandleBytes() + *needed;
  return FEDRT_OK;
}

fedrt_status fedrt_device_init(void* memory, size_t size, const char* device_id, const uint8_t* key,
                               size_t key_size, fedrt_model_t* model, const fedrt_data_view* data,
                               const uint32_t* share, size_t share_count, const fedrt_device_options* options,
                               const fedrt_device_callbacks* callbacks, fedrt_device_t** device) {
  constexpr const char* kFunction = "fedrt_device_init";
  FEDRT_C_REQUIRE(memory, kFunction);
  const fedrt_status checked = fedrt::capi::CheckDeviceArguments(kFunction, device_id, key, model, data, share,
                                                                 share_count, callbacks, device);
  if (checked != FEDRT_OK) return checked;
  const fedrt_device_options o = options != nullptr ? *options : fedrt_device_options_default();
  const std::size_t handle_bytes = fedrt::capi::HandleBytes();
  if (size < handle_bytes) {
    return Fail(fedrt::OutOfRange(fedrt::Concat({kFunction, ": ", size,
                                          " bytes of memory, fedrt_device_size says how many it needs"})));
  }
  auto* base = static_cast<unsigned char*>(memory);
  const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(base) % fedrt::capi::kDeviceAlignment;
  unsigned char* at = base + (misalignment == 0 ? 0 : fedrt::capi::kDeviceAlignment - misalignment);

  auto* created = new (at) fedrt_device(*callbacks);
  fedrt_device& d = *created;
  d.session.heartbeat_interval_ms = o.heartbeat_interval_ms;
  d.session.idle_timeout_ms = o.idle_timeout_ms;
  d.session.join_timeout_ms = o.join_timeout_ms;
  d.session.steps_per_slice = o.steps_per_slice;
  if (share != nullptr) d.share.assign(share, share + share_count);
  fedrt::DeviceClientConfig config = fedrt::capi::ConfigFrom(o);
  config.device_id = device_id;
  config.key.assign(key, key + key_size);
  fedrt::DeviceHooks hooks;
  if (callbacks->on_residual != nullptr) {
    const fedrt_device_callbacks* c = &d.callbacks;
    hooks.on_residual = [c](const float* residual, std::size_t count) { c->on_residual(c->user, residual, count); };
  }
  fedrt::Result<fedrt::DeviceClient*> client = fedrt::DeviceClient::CreateIn(
      base + handle_bytes, size - handle_bytes, config, model->model, fedrt::capi::ToDataView(*data),
      share != nullptr ? &d.share : nullptr, d.crypto, std::move(hooks));
  if (!client.ok()) {
    created->~fedrt_device();
    fedrt::Status status = client.status();
    if (status.code() == fedrt::StatusCode::kOutOfRange && status.message().find("bytes of memory") != std::string::npos) {
      status = fedrt::OutOfRange(fedrt::Concat({kFunction, ": ", size,
                                         " bytes of memory are too few; fedrt_device_size says how many it needs"}));
    }
    return Fail(status);
  }
  d.client = *client;
  const fedrt_device_callbacks* c = &d.callbacks;
  d.io.send = [c](const uint8_t* bytes, std::size_t count) {
    return fedrt::capi::FromCallback(c->send(c->user, bytes, count), "send");
  };
  d.io.receive = [c](uint8_t* buffer, std::size_t capacity, uint32_t timeout_ms) -> fedrt::Result<std::size_t> {
    std::size_t received = 0;
    const fedrt::Status status =
        fedrt::capi::FromCallback(c->receive(c->user, buffer, capacity, timeout_ms, &received), "receive");
    if (!status.ok()) return status;
    if (received > capacity) {
      return fedrt::Status(fedrt::StatusCode::kInternal, fedrt::Concat({"the receive callback reported ", received,
                                                                 " bytes for a buffer of ", capacity}));
    }
    return received;
  };
  *device = created;
  return FEDRT_OK;
}

fedrt_status fedrt_device_create(const char* device_id, const uint8_t* key, size_t key_size, fedrt_model_t* model,
                                 const fedrt_data_view* data, const uint32_t* share, size_t share_count,
                                 const fedrt_device_options* options, const fedrt_device_callbacks* callbacks,
                                 fedrt_device_t** device) {
  const fedrt_status checked = fedrt::capi::CheckDeviceArguments("fedrt_device_create", device_id, key, model, data,
                                                                 share, share_count, callbacks, device);
  if (checked != FEDRT_OK) return checked;
  std::size_t bytes = 0;
  const fedrt_status sized = fedrt_device_size(model, data, share != nullptr ? share_count : 0, options, &bytes);
  if (sized != FEDRT_OK) return sized;
  std::unique_ptr<unsigned char[]> block(new (std::nothrow) unsigned char[bytes]);
  if (block == nullptr) {
    return Fail(fedrt::Status(fedrt::StatusCode::kResourceExhausted,
                              fedrt::Concat({"fedrt_device_create: cannot allocate ", bytes, " bytes"})));
  }
  const fedrt_status status = fedrt_device_init(block.get(), bytes, device_id, key, key_size, model, data, share,
                                                share_count, options, callbacks, device);
  if (status != FEDRT_OK) return status;
  (*device)->heap_block = block.release();
  return FEDRT_OK;
}

void fedrt_device_destroy(fedrt_device_t* device) {
  if (device == nullptr) return;
  unsigned char* heap_block = device->heap_block;
  device->~fedrt_device();
  delete[] heap_block;
}

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
