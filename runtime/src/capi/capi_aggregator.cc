// The C API's aggregator: fedrt::Aggregator (aggregator_engine.h) placed in
// the caller's memory, its connections StreamConnections (transport/stream.h)
// whose bytes the application feeds in and whose writes go to its send
// callback. This file only adapts: options become an AggregatorConfig, keys a
// KeyStore, callbacks the engine's Crypto and Clock, reports a C struct. No
// protocol or aggregation logic lives here.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "capi/capi_internal.h"
#include "fedrt/fedrt.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/stream.h"

namespace fedrt::capi {
namespace {

// Hears the engine's connections on its behalf, so the application learns
// of every close: the engine's handler, plus the list of closed connections
// the entry points report (after the engine has returned: a connection is
// not let go of inside its own callback).
class ConnectionRelay final : public transport::ConnectionHandler {
 public:
  explicit ConnectionRelay(Aggregator& engine) : engine_(engine) {}
  void OnOpen(const std::shared_ptr<transport::Connection>& connection) override { engine_.OnOpen(connection); }
  void OnFrame(transport::Connection& connection, transport::Frame frame) override {
    engine_.OnFrame(connection, std::move(frame));
  }
  void OnClose(transport::Connection& connection, const Status& reason) override {
    engine_.OnClose(connection, reason);
    closed.emplace_back(connection.id(), reason.code());
  }
  // (StreamConnection::id(), why) of the connections closed since the last look.
  std::vector<std::pair<uint64_t, StatusCode>> closed;

 private:
  Aggregator& engine_;
};

}  // namespace
}  // namespace fedrt::capi

// Placed at the start of the caller's memory, the engine's block after it.
struct fedrt_aggregator {
  explicit fedrt_aggregator(const fedrt_aggregator_callbacks& c)
      : callbacks(c), crypto(c.user, c.random_bytes, c.hmac_sha256), clock(c.user, c.now_ms) {}
  ~fedrt_aggregator() {
    if (engine != nullptr) {
      engine->Abort(fedrt::Status(fedrt::StatusCode::kCancelled, "the aggregator is destroyed"));
      ReportCloses();
      relay.reset();
      fedrt::Aggregator::Destroy(engine);
    }
  }
  // Tells the application of the connections that closed, and lets go of them.
  void ReportCloses() {
    if (!relay) return;
    while (!relay->closed.empty()) {
      const auto [stream_id, code] = relay->closed.front();
      relay->closed.erase(relay->closed.begin());
      for (auto it = connections.begin(); it != connections.end(); ++it) {
        if (it->second->id() != stream_id) continue;
        const uint64_t id = it->first;
        const std::shared_ptr<fedrt::transport::StreamConnection> kept = it->second;  // until the erase is done
        connections.erase(it);
        callbacks.close(callbacks.user, id, static_cast<fedrt_status>(code));
        break;
      }
    }
  }

  const fedrt_aggregator_callbacks callbacks;
  fedrt::capi::CallbackCrypto crypto;
  fedrt::capi::CallbackClock clock;
  fedrt::transport::KeyStore keys;
  fedrt::DataView test_set;
  fedrt::Aggregator* engine = nullptr;
  std::shared_ptr<fedrt::capi::ConnectionRelay> relay;
  std::map<uint64_t, std::shared_ptr<fedrt::transport::StreamConnection>> connections;  // by the application's id
};

namespace fedrt::capi {
namespace {

constexpr std::size_t kHandleAlignment = alignof(std::max_align_t);
std::size_t HandleBytes() { return sizeof(fedrt_aggregator) + kHandleAlignment - 1; }

Result<AggregatorConfig> ConfigFrom(const fedrt_aggregator_options& o) {
  AggregatorConfig config;
  if (o.model == nullptr || o.codec == nullptr) return InvalidArgument("options: model and codec must not be NULL");
  config.model = o.model;
  config.model_seed = o.model_seed;
  config.codec = o.codec;
  config.rounds = o.rounds;
  config.min_devices = o.min_devices;
  config.sampling.fraction = o.fraction;
  config.quorum = o.quorum;
  config.round_deadline_ms = o.round_deadline_ms;
  config.local_epochs = o.local_epochs;
  config.local_steps = o.local_steps;
  config.learning_rate = o.learning_rate;
  if (o.server_optimizer != nullptr) {
    Result<ServerOptimizerKind> kind = ParseServerOptimizer(o.server_optimizer);
    if (!kind.ok()) return kind.status();
    config.server_optimizer.kind = *kind;
  }
  config.server_optimizer.learning_rate = o.server_learning_rate;
  config.session_seed = o.session_seed;
  if (o.downlink_codec != nullptr) config.downlink_codec = o.downlink_codec;
  config.max_devices = o.max_devices;
  config.max_waiting_updates = o.max_waiting_updates;
  config.max_frame_bytes = o.max_frame_bytes;
  config.idle_timeout_ms = o.idle_timeout_ms;
  config.join_timeout_ms = o.join_timeout_ms;
  if (!(config.sampling.fraction > 0.0 && config.sampling.fraction <= 1.0) ||
      !(config.quorum > 0.0 && config.quorum <= 1.0)) {
    return InvalidArgument("options: fraction and quorum must be in (0, 1]");
  }
  return config;
}

fedrt_round_summary SummaryOf(const RoundReport& r) {
  fedrt_round_summary s;
  s.round = r.round;
  s.applied = r.applied ? 1 : 0;
  s.sampled = r.sampled;
  s.updates = r.updates;
  s.rejected = r.rejected;
  s.test_accuracy = r.test_accuracy;
  s.test_loss = r.test_loss;
  s.train_loss = r.train_loss;
  s.bytes_up = r.bytes_up;
  s.bytes_down = r.bytes_down;
  return s;
}

}  // namespace
}  // namespace fedrt::capi

using fedrt::capi::Fail;

extern "C" {

fedrt_aggregator_options fedrt_aggregator_options_default(void) {
  const fedrt::AggregatorConfig config;
  fedrt_aggregator_options o;
  o.model = "mlp:784-300-100-10";
  o.model_seed = config.model_seed;
  o.codec = "fp32";
  o.rounds = config.rounds;
  o.min_devices = config.min_devices;
  o.fraction = config.sampling.fraction;
  o.quorum = config.quorum;
  o.round_deadline_ms = config.round_deadline_ms;
  o.local_epochs = config.local_epochs;
  o.local_steps = config.local_steps;
  o.learning_rate = config.learning_rate;
  o.server_optimizer = "fedavg";
  o.server_learning_rate = config.server_optimizer.learning_rate;
  o.session_seed = config.session_seed;
  o.downlink_codec = nullptr;
  o.max_devices = config.max_devices;
  o.max_waiting_updates = config.max_waiting_updates;
  o.max_frame_bytes = config.max_frame_bytes;
  o.idle_timeout_ms = config.idle_timeout_ms;
  o.join_timeout_ms = config.join_timeout_ms;
  return o;
}

fedrt_status fedrt_aggregator_size(const fedrt_aggregator_options* options, const fedrt_aggregator_key* keys,
                                   size_t key_count, size_t* bytes) {
  FEDRT_C_REQUIRE(bytes, "fedrt_aggregator_size");
  fedrt::Result<fedrt::AggregatorConfig> config =
      fedrt::capi::ConfigFrom(options != nullptr ? *options : fedrt_aggregator_options_default());
  if (!config.ok()) return Fail(config.status());
  fedrt::Result<fedrt::transport::KeyStore> store = fedrt::capi::KeysFrom(keys, key_count);
  if (!store.ok()) return Fail(store.status());
  fedrt::Result<std::size_t> needed = fedrt::Aggregator::RequiredBytes(*config, *store);
  if (!needed.ok()) return Fail(needed.status());
  *bytes = fedrt::capi::HandleBytes() + *needed;
  return FEDRT_OK;
}

fedrt_status fedrt_aggregator_init(void* memory, size_t size, const fedrt_aggregator_options* options,
                                   const fedrt_aggregator_key* keys, size_t key_count,
                                   const fedrt_data_view* test_set, const fedrt_aggregator_callbacks* callbacks,
                                   fedrt_aggregator_t** aggregator) {
  constexpr const char* kFunction = "fedrt_aggregator_init";
  FEDRT_C_REQUIRE(memory, kFunction);
  FEDRT_C_REQUIRE(callbacks, kFunction);
  FEDRT_C_REQUIRE(aggregator, kFunction);
  const struct {
    bool present;
    const char* name;
  } required[] = {{callbacks->send != nullptr, "callbacks->send"},
                  {callbacks->close != nullptr, "callbacks->close"},
                  {callbacks->now_ms != nullptr, "callbacks->now_ms"},
                  {callbacks->random_bytes != nullptr, "callbacks->random_bytes"}};
  for (const auto& callback : required) {
    if (!callback.present) return fedrt::capi::RequireNonNull(nullptr, kFunction, callback.name);
  }
  const fedrt_status hmac = fedrt::capi::RequireHmac(callbacks->hmac_sha256, kFunction);
  if (hmac != FEDRT_OK) return hmac;
  fedrt::Result<fedrt::AggregatorConfig> config =
      fedrt::capi::ConfigFrom(options != nullptr ? *options : fedrt_aggregator_options_default());
  if (!config.ok()) return Fail(config.status());
  fedrt::Result<fedrt::transport::KeyStore> store = fedrt::capi::KeysFrom(keys, key_count);
  if (!store.ok()) return Fail(store.status());
  const std::size_t handle_bytes = fedrt::capi::HandleBytes();
  if (size < handle_bytes) {
    return Fail(fedrt::OutOfRange(std::string(kFunction) + ": " + std::to_string(size) +
                                  " bytes of memory, fedrt_aggregator_size says how many it needs"));
  }
  auto* base = static_cast<unsigned char*>(memory);
  const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(base) % fedrt::capi::kHandleAlignment;
  unsigned char* at = base + (misalignment == 0 ? 0 : fedrt::capi::kHandleAlignment - misalignment);
  auto* created = new (at) fedrt_aggregator(*callbacks);
  fedrt_aggregator& a = *created;
  a.keys = std::move(*store);
  if (test_set != nullptr) a.test_set = fedrt::capi::ToDataView(*test_set);
  fedrt::AggregatorHooks hooks;
  if (callbacks->on_round != nullptr) {
    const fedrt_aggregator_callbacks* c = &a.callbacks;
    hooks.on_round = [c](const fedrt::RoundReport& report) {
      const fedrt_round_summary summary = fedrt::capi::SummaryOf(report);
      c->on_round(c->user, &summary);
    };
  }
  fedrt::Result<fedrt::Aggregator*> engine =
      fedrt::Aggregator::CreateIn(base + handle_bytes, size - handle_bytes, *config, a.keys, a.crypto, a.clock,
                                  test_set != nullptr ? &a.test_set : nullptr, std::move(hooks));
  if (!engine.ok()) {
    created->~fedrt_aggregator();
    fedrt::Status status = engine.status();
    if (status.code() == fedrt::StatusCode::kOutOfRange) {
      status = fedrt::OutOfRange(std::string(kFunction) + ": " + std::to_string(size) +
                                 " bytes of memory are too few; fedrt_aggregator_size says how many it needs");
    }
    return Fail(status);
  }
  a.engine = *engine;
  a.relay = std::make_shared<fedrt::capi::ConnectionRelay>(*a.engine);
  *aggregator = created;
  return FEDRT_OK;
}

void fedrt_aggregator_destroy(fedrt_aggregator_t* aggregator) {
  if (aggregator != nullptr) aggregator->~fedrt_aggregator();
}

fedrt_status fedrt_aggregator_open(fedrt_aggregator_t* aggregator, uint64_t connection, const char* peer) {
  constexpr const char* kFunction = "fedrt_aggregator_open";
  FEDRT_C_REQUIRE(aggregator, kFunction);
  fedrt_aggregator& a = *aggregator;
  if (a.connections.count(connection) != 0) {
    return Fail(fedrt::InvalidArgument(std::string(kFunction) + ": connection " + std::to_string(connection) +
                                       " is open already"));
  }
  const fedrt_aggregator_callbacks* c = &a.callbacks;
  fedrt::transport::StreamWrite write = [c, connection](const uint8_t* data, std::size_t size) {
    return fedrt::capi::FromCallback(c->send(c->user, connection, data, size), "send");
  };
  fedrt::Result<std::shared_ptr<fedrt::transport::StreamConnection>> stream =
      fedrt::transport::StreamConnection::Create(peer != nullptr ? peer : "connection", std::move(write), a.relay,
                                                 a.engine->connection_options(), a.clock);
  if (!stream.ok()) return Fail(stream.status());
  a.connections[connection] = *stream;
  (*stream)->Open();
  a.ReportCloses();  // refused at once (the caps on unjoined connections)
  return FEDRT_OK;
}

fedrt_status fedrt_aggregator_receive(fedrt_aggregator_t* aggregator, uint64_t connection, const uint8_t* data,
                                      size_t size) {
  constexpr const char* kFunction = "fedrt_aggregator_receive";
  FEDRT_C_REQUIRE(aggregator, kFunction);
  if (size != 0) FEDRT_C_REQUIRE(data, kFunction);
  auto it = aggregator->connections.find(connection);
  if (it == aggregator->connections.end()) {
    return Fail(fedrt::NotFound(std::string(kFunction) + ": connection " + std::to_string(connection) +
                                " is not open"));
  }
  const std::shared_ptr<fedrt::transport::StreamConnection> stream = it->second;
  (void)stream->Receive(data, size);  // a bad frame closes this connection only
  aggregator->ReportCloses();
  return FEDRT_OK;
}

fedrt_status fedrt_aggregator_stream_closed(fedrt_aggregator_t* aggregator, uint64_t connection) {
  constexpr const char* kFunction = "fedrt_aggregator_stream_closed";
  FEDRT_C_REQUIRE(aggregator, kFunction);
  auto it = aggregator->connections.find(connection);
  if (it == aggregator->connections.end()) {
    return Fail(fedrt::NotFound(std::string(kFunction) + ": connection " + std::to_string(connection) +
                                " is not open"));
  }
  const std::shared_ptr<fedrt::transport::StreamConnection> stream = it->second;
  stream->OnStreamClosed(fedrt::Status(fedrt::StatusCode::kUnavailable, "the peer closed the stream"));
  aggregator->ReportCloses();
  return FEDRT_OK;
}

uint32_t fedrt_aggregator_tick(fedrt_aggregator_t* aggregator) {
  if (aggregator == nullptr) return UINT32_MAX;
  fedrt_aggregator& a = *aggregator;
  uint32_t wait = UINT32_MAX;
  for (auto& entry : a.connections) wait = std::min(wait, entry.second->Poll());
  a.ReportCloses();
  wait = std::min(wait, a.engine->Tick());
  a.ReportCloses();
  return wait;
}

int fedrt_aggregator_finished(const fedrt_aggregator_t* aggregator) {
  return aggregator != nullptr && aggregator->engine->finished() ? 1 : 0;
}

fedrt_status fedrt_aggregator_status(const fedrt_aggregator_t* aggregator) {
  FEDRT_C_REQUIRE(aggregator, "fedrt_aggregator_status");
  return fedrt::capi::FromStatus(aggregator->engine->status());
}

uint32_t fedrt_aggregator_round(const fedrt_aggregator_t* aggregator) {
  return aggregator != nullptr ? aggregator->engine->round() : 0;
}

size_t fedrt_aggregator_connected_devices(const fedrt_aggregator_t* aggregator) {
  return aggregator != nullptr ? aggregator->engine->connected_devices() : 0;
}

size_t fedrt_aggregator_parameter_count(const fedrt_aggregator_t* aggregator) {
  return aggregator != nullptr ? aggregator->engine->model().parameter_count() : 0;
}

fedrt_status fedrt_aggregator_get_parameters(const fedrt_aggregator_t* aggregator, float* out, size_t capacity) {
  constexpr const char* kFunction = "fedrt_aggregator_get_parameters";
  FEDRT_C_REQUIRE(aggregator, kFunction);
  FEDRT_C_REQUIRE(out, kFunction);
  const fedrt::Model& model = aggregator->engine->model();
  if (capacity < model.parameter_count()) {
    return Fail(fedrt::OutOfRange(std::string(kFunction) + ": room for " + std::to_string(capacity) +
                                  " floats, the model has " + std::to_string(model.parameter_count())));
  }
  std::copy(model.parameters(), model.parameters() + model.parameter_count(), out);
  return FEDRT_OK;
}

}  // extern "C"
