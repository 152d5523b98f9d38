// RunDevice (fedrt/runtime/device.h): the Linux host of the device engine
// (device_client.h). It loads the key, the data share and the state file,
// dials the aggregator over TCP (TLS), and drives the engine from a
// FrameQueue while the connection's I/O runs on an EventLoopThread;
// reconnects with backoff.
#include "fedrt/runtime/device.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/log.h"
#include "fedrt/platform/memory.h"
#include "fedrt/runtime/byzantine.h"
#include "fedrt/runtime/device_client.h"
#include "fedrt/runtime/model.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/shaper.h"
#include "fedrt/transport/tcp.h"
#include "star/device_state.h"
#include "star/star_data.h"

namespace fedrt {

namespace {

using namespace transport;  // NOLINT: the device speaks the transport's vocabulary throughout

constexpr uint32_t kJoinTimeoutMs = 10000;

// Everything RunDevice loads before it connects: the engine's inputs.
class DeviceHost {
 public:
  DeviceHost(const DeviceOptions& options, const DeviceHooks& hooks, const std::atomic<bool>* stop)
      : options_(options), hooks_(hooks), stop_(stop) {}

  Status Run();

 private:
  bool Stopping() const { return stop_ != nullptr && stop_->load(); }
  Status Setup();
  // Makes client_ from client_config_ and client_hooks_, and restores the
  // error-feedback residual from the state file if there is one.
  Status MakeClient();
  // One connection's life. OK: the aggregator ended the training.
  // kUnauthenticated, kFailedPrecondition: fatal. Anything else: reconnect.
  Status Session(bool* joined);

  DeviceOptions options_;
  DeviceHooks hooks_;
  const std::atomic<bool>* stop_;
  std::string id_;
  Dataset train_;                  // this device's share of the training set
  std::vector<uint32_t> share_;    // 0 .. n-1 over train_
  std::unique_ptr<Model> model_;
  DeviceClientConfig client_config_;
  DeviceHooks client_hooks_;
  // The error-feedback residual, allocated when the aggregator's codec first
  // asks for one (DeviceClientConfig::residual_memory); declared before the
  // client, which uses it, so it outlives it.
  AlignedArray<float> residual_;
  std::unique_ptr<DeviceClient> client_;
  std::shared_ptr<const TlsContext> tls_;  // null: plain TCP
};

Status DeviceHost::Setup() {
  Result<star::DeviceKey> key = star::LoadDeviceKey(options_.key_file, options_.device_id);
  if (!key.ok()) return key.status();
  id_ = key->device_id;

  int index = options_.index;
  if (index < 0) {
    Result<int> from_id = star::ShareIndexFromId(id_, options_.devices);
    if (!from_id.ok()) return from_id.status();
    index = *from_id;
  }
  // Only this device's share is kept (the aggregator evaluates on the test set).
  Result<star::DeviceData> data =
      star::LoadDeviceShare(options_.data_dir, options_.partition, options_.devices, index, options_.partition_seed);
  if (!data.ok()) return data.status();
  train_ = std::move(data->data);
  share_ = std::move(data->share);
  if (share_.empty()) return Status(StatusCode::kFailedPrecondition, "device '" + id_ + "' got no examples");

  Result<Model> model = Model::Create(options_.model, 1);
  if (!model.ok()) return model.status();
  model_ = std::make_unique<Model>(std::move(*model));
  if (model_->input_size() != train_.example_size()) {
    return InvalidArgument("model '" + options_.model + "' does not fit the data");
  }
  DeviceClientConfig config;
  config.device_id = id_;
  config.key = key->key;
  config.batch = options_.batch;
  config.shuffle_seed = star::DeviceShuffleSeed(options_.partition_seed, id_);
  config.clock = &SystemClock();
  config.residual_memory = [this](std::size_t d) -> float* {
    if (residual_.size() != d && !residual_.Resize(d)) return nullptr;
    return residual_.data();
  };
  DeviceHooks hooks = hooks_;
  if (!options_.state_file.empty()) {
    const std::string path = options_.state_file;
    const std::string id = id_;
    hooks.on_residual = [path, id](const float* residual, std::size_t d) {
      const Status saved = star::SaveResidual(path, residual, d);
      if (!saved.ok()) Log(LogLevel::kWarning, "device %s: %s", id.c_str(), saved.ToString().c_str());
    };
  }
  if (!options_.byzantine.empty()) {
    Result<ByzantineBehaviour> behaviour = ParseByzantine(options_.byzantine);
    if (!behaviour.ok()) return behaviour.status();
    auto misbehave = std::make_shared<ByzantineUpdate>(*behaviour, config.shuffle_seed);
    Log(LogLevel::kWarning, "device %s: byzantine: every update is %s", id_.c_str(), options_.byzantine.c_str());
    hooks.transform_update = [misbehave](uint32_t round, float* delta, std::size_t d) {
      misbehave->Apply(round, delta, d);
    };
  }
  client_config_ = std::move(config);
  client_hooks_ = std::move(hooks);
  FEDRT_RETURN_IF_ERROR(MakeClient());
  Log(LogLevel::kInfo, "device %s: %zu examples (%s, share %d of %d), model %s", id_.c_str(), share_.size(),
      options_.partition.c_str(), index, options_.devices, options_.model.c_str());
  return Status();
}

Status DeviceHost::MakeClient() {
  client_.reset();
  Result<std::unique_ptr<DeviceClient>> client =
      DeviceClient::Create(client_config_, *model_, train_, &share_, SystemCrypto(), client_hooks_);
  if (!client.ok()) return client.status();
  client_ = std::move(*client);
  if (!options_.state_file.empty()) {
    Result<std::vector<float>> residual = star::LoadResidual(options_.state_file, client_->parameter_count());
    if (residual.ok()) {
      FEDRT_RETURN_IF_ERROR(client_->RestoreResidual(residual->data(), residual->size()));
      Log(LogLevel::kInfo, "device %s: restored the error-feedback residual from %s", id_.c_str(),
          options_.state_file.c_str());
    } else if (residual.status().code() != StatusCode::kNotFound) {
      // Starting from zero would silently drop what the residual carries:
      // the owner decides (remove the file to start afresh).
      return Status(residual.status().code(), "--state-file " + residual.status().message());
    } else {
      Log(LogLevel::kInfo, "device %s: no state file at %s yet: the residual starts at zero", id_.c_str(),
          options_.state_file.c_str());
    }
  }
  return Status();
}

Status DeviceHost::Session(bool* joined) {
  // Made before the loop, so it outlives the connections it shapes.
  std::unique_ptr<LinkShaper> shaper;
  if (options_.link.shaped()) shaper = std::make_unique<LinkShaper>(options_.link, client_->sender_id());
  EventLoopThread loop;
  auto queue = std::make_shared<FrameQueue>();
  ConnectionOptions connection_options;
  connection_options.limits.max_frame_bytes = kDefaultMaxFrameBytes;
  connection_options.idle_timeout_ms = 0;  // the aggregator's heartbeats are enough; rounds can be long
  // Training keeps this thread busy, the loop thread keeps the link alive:
  // beat well inside any idle timeout an aggregator is likely to use.
  connection_options.heartbeat_interval_ms = 1000;
  connection_options.io_timeout_ms = options_.io_timeout_ms;
  connection_options.tls = tls_;
  std::shared_ptr<ConnectionHandler> handler = queue;
  if (shaper) handler = shaper->Wrap(queue);
  Result<std::shared_ptr<Connection>> connection = TcpConnectAndWait(
      loop.loop(), options_.host, options_.port, connection_options, handler, options_.connect_timeout_ms);
  if (!connection.ok()) return connection.status();
  std::shared_ptr<Connection> shaped = shaper ? shaper->Shaped(**connection) : *connection;
  if (!shaped) return Status(StatusCode::kUnavailable, "the connection closed as it opened");
  Connection& link = *shaped;
  const auto fail = [&](const Status& status) {
    link.Abort(status, /*notify_peer=*/status.code() != StatusCode::kCancelled);
    client_->OnDisconnected();
    return status;
  };
  FEDRT_RETURN_IF_ERROR(client_->Start(link));
  const uint64_t join_deadline = SystemClock().NowMs() + kJoinTimeoutMs;
  while (!Stopping()) {
    if (client_->has_work()) {
      const Status worked = client_->Work(link, 0);
      if (!worked.ok()) {
        Log(LogLevel::kError, "device %s: round %llu: %s", id_.c_str(),
            static_cast<unsigned long long>(client_->round()), worked.ToString().c_str());
        return fail(worked);
      }
      continue;
    }
    if (!client_->joined() && SystemClock().NowMs() > join_deadline) {
      return fail(Status(StatusCode::kDeadlineExceeded, "the join did not complete in time"));
    }
    Result<Frame> frame = queue->Pop(200);
    if (!frame.ok()) {
      if (frame.status().code() == StatusCode::kDeadlineExceeded) continue;
      client_->OnDisconnected();
      return frame.status().code() == StatusCode::kOk ? Status(StatusCode::kUnavailable, "closed") : frame.status();
    }
    const Status handled = client_->OnFrame(link, *frame);
    if (!handled.ok()) return fail(handled);
    if (!client_->redirect().empty()) {
      queue->WaitClosed(2000);
      client_->OnDisconnected();
      return Status(StatusCode::kUnavailable, "redirected to " + client_->redirect());
    }
    if (client_->joined()) *joined = true;
    if (client_->finished()) {
      link.Close();
      queue->WaitClosed(2000);
      return Status();
    }
  }
  return fail(Status(StatusCode::kCancelled, "stopped"));
}

Status DeviceHost::Run() {
  FEDRT_RETURN_IF_ERROR(Setup());
  Result<std::shared_ptr<const TlsContext>> tls = CreateTlsIfConfigured(options_.tls);
  if (!tls.ok()) return tls.status();
  if (*tls && !(*tls)->can_dial()) return InvalidArgument("a TLS device needs the CA file that verifies the server");
  tls_ = *tls;
  std::mt19937_64 jitter(client_->sender_id() ^ star::NowMs());
  uint32_t backoff_ms = 100;
  uint64_t unreachable_since = star::NowMs();
  while (!Stopping()) {
    bool joined = false;
    const Status status = Session(&joined);
    if (status.ok()) return status;
    if (status.code() == StatusCode::kCancelled && Stopping()) return status;
    if (status.code() == StatusCode::kUnauthenticated || status.code() == StatusCode::kFailedPrecondition) {
      Log(LogLevel::kError, "device %s: %s", id_.c_str(), status.ToString().c_str());
      return status;
    }
    if (status.code() == StatusCode::kResourceExhausted && !client_->outgrown_spec().empty()) {
      // The client is sized for the build's codecs at their default
      // parameters; the aggregator asked for one that needs more (a bucket
      // size, more levels). A host can allocate: a new client that accepts
      // it too, and the device joins again (it missed this round).
      const std::string spec = client_->outgrown_spec();
      std::vector<std::string>& accepted = client_config_.codecs;
      if (std::find(accepted.begin(), accepted.end(), spec) != accepted.end()) return status;  // it did not help
      if (accepted.empty()) accepted = DefaultDeviceCodecs();
      accepted.push_back(spec);
      Log(LogLevel::kInfo, "device %s: the aggregator asks for '%s', which needs more memory than this device "
          "was sized for: making it room", id_.c_str(), spec.c_str());
      FEDRT_RETURN_IF_ERROR(MakeClient());
      continue;
    }
    if (!client_->redirect().empty()) {
      // An aggregator tier's rank sent it to the rank serving its shard: join
      // there at once (the redirect came after a Welcome, from a rank that
      // holds this device's key).
      const std::string to = client_->redirect();
      const std::size_t colon = to.rfind(':');
      const long port = colon == std::string::npos ? 0 : std::strtol(to.c_str() + colon + 1, nullptr, 10);
      if (colon == std::string::npos || colon == 0 || port < 1 || port > 65535) {
        return Status(StatusCode::kFailedPrecondition, "redirected to '" + to + "', not HOST:PORT");
      }
      options_.host = to.substr(0, colon);
      options_.port = static_cast<uint16_t>(port);
      backoff_ms = 100;
      unreachable_since = star::NowMs();
      continue;
    }
    if (joined) {
      backoff_ms = 100;
      unreachable_since = star::NowMs();
    } else if (!options_.more_servers.empty()) {
      // Not reached: the next rank of the list (the first goes to the back).
      options_.more_servers.push_back(options_.host + ":" + std::to_string(options_.port));
      const std::string next = options_.more_servers.front();
      options_.more_servers.erase(options_.more_servers.begin());
      const std::size_t colon = next.rfind(':');
      options_.host = next.substr(0, colon);
      options_.port = static_cast<uint16_t>(std::strtol(next.c_str() + colon + 1, nullptr, 10));
    }
    if (star::NowMs() - unreachable_since > options_.give_up_ms) {
      return Status(StatusCode::kUnavailable, "the aggregator at " + options_.host + ":" + std::to_string(options_.port) +
                         " stayed unreachable (" + status.ToString() + ")");
    }
    const uint32_t wait = backoff_ms / 2 + static_cast<uint32_t>(jitter() % (backoff_ms / 2 + 1));
    Log(LogLevel::kInfo, "device %s: link lost (%s), reconnecting in %u ms", id_.c_str(),
        status.ToString().c_str(), wait);
    for (uint32_t slept = 0; slept < wait && !Stopping(); slept += 20) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    backoff_ms = std::min(options_.max_backoff_ms, backoff_ms * 2);
  }
  return Status(StatusCode::kCancelled, "stopped");
}

}  // namespace

Status RunDevice(const DeviceOptions& options, const DeviceHooks& hooks, const std::atomic<bool>* stop) {
  DeviceHost host(options, hooks, stop);
  return host.Run();
}

}  // namespace fedrt
