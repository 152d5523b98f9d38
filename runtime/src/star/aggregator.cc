// RunAggregator (fedrt/runtime/aggregator.h): the Linux host of the
// aggregator engine (aggregator_engine.h). It loads the key file, the test
// set and the checkpoint, listens on TCP (TLS), runs the EventLoop on the
// calling thread in 20 ms slices with a Tick() between them, and writes the
// checkpoint the engine hands it after every round.
#include "fedrt/runtime/aggregator.h"

#include <memory>
#include <utility>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/log.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/event_loop.h"
#include "fedrt/transport/tcp.h"
#include "star/aggregator_checkpoint.h"
#include "star/star_data.h"

namespace fedrt {

namespace {

// Tick() between slices of the loop: joins, deadlines and quorums are
// checked this often, and rounds start and close on these boundaries.
constexpr uint32_t kSliceMs = 20;
// After the Leave, how long the devices get to close their connections.
constexpr uint64_t kFinishGraceMs = 3000;

// Resumes from the saved state if the file exists; errors name the file.
Status RestoreCheckpoint(const std::string& path, Aggregator& aggregator) {
  Result<AggregatorCheckpoint> saved = ReadAggregatorCheckpoint(path);
  if (saved.status().code() == StatusCode::kNotFound) {
    Log(LogLevel::kInfo, "aggregator: no checkpoint at %s yet: starting at round 0", path.c_str());
    return Status();
  }
  // An existing file that cannot be used is never a fresh start.
  if (!saved.ok()) return saved.status();
  const Status restored = aggregator.Restore(std::move(*saved));
  if (!restored.ok()) return Status(restored.code(), path + ": " + restored.message());
  Log(LogLevel::kInfo, "aggregator: resumed from %s at round %u", path.c_str(), aggregator.round());
  return Status();
}

}  // namespace

Status RunAggregator(const AggregatorOptions& options, const AggregatorHooks& hooks, const std::atomic<bool>* stop) {
  Result<transport::KeyStore> keys = transport::KeyStore::LoadFile(options.key_file);
  if (!keys.ok()) return keys.status();
  TrainTestData data;
  DataView test_set;
  if (!options.data_dir.empty()) {
    Result<TrainTestData> loaded = star::LoadNormalized(options.data_dir);
    if (!loaded.ok()) return loaded.status();
    data = std::move(*loaded);
    test_set = data.test;
  }
  AggregatorHooks engine_hooks = hooks;
  if (!options.checkpoint.empty()) {
    engine_hooks.on_checkpoint = [path = options.checkpoint, also = hooks.on_checkpoint](const AggregatorCheckpoint& state) {
      const Status saved = WriteAggregatorCheckpoint(path, state);
      if (!saved.ok()) Log(LogLevel::kError, "aggregator: %s", saved.ToString().c_str());
      if (also) also(state);
    };
  }
  // Declared before the aggregator: connections hold it until the loop has
  // let go of them.
  transport::EventLoop loop;
  Result<std::shared_ptr<Aggregator>> created =
      Aggregator::Create(options, *keys, transport::SystemCrypto(), SystemClock(),
                         options.data_dir.empty() ? nullptr : &test_set, std::move(engine_hooks));
  if (!created.ok()) return created.status();
  std::shared_ptr<Aggregator> aggregator = std::move(*created);
  if (!options.checkpoint.empty()) FEDRT_RETURN_IF_ERROR(RestoreCheckpoint(options.checkpoint, *aggregator));

  transport::ConnectionOptions connection_options = aggregator->connection_options();
  Result<std::shared_ptr<const transport::TlsContext>> tls = transport::CreateTlsIfConfigured(options.tls);
  if (!tls.ok()) return tls.status();
  connection_options.tls = *tls;
  Result<std::shared_ptr<transport::TcpListener>> listener =
      transport::TcpListener::Listen(loop, options.host, options.port, connection_options, aggregator);
  if (!listener.ok()) return listener.status();
  Log(LogLevel::kInfo, "aggregator: listening on %s:%u, model %s (%zu parameters), codec %s, round %u of %u",
      options.host.c_str(), (*listener)->port(), options.model.c_str(), aggregator->model().parameter_count(),
      aggregator->codec().c_str(), aggregator->round(), options.rounds);
  if (hooks.on_listening) hooks.on_listening((*listener)->port());
  uint64_t finished_at = 0;
  while (stop == nullptr || !stop->load()) {
    loop.RunFor(kSliceMs);
    aggregator->Tick();
    if (aggregator->finished()) {
      if (finished_at == 0) finished_at = SystemClock().NowMs();
      if (aggregator->open_connections() == 0 || SystemClock().NowMs() - finished_at > kFinishGraceMs) break;
    }
  }
  (*listener)->Close();
  aggregator->Abort(Status(StatusCode::kCancelled, "aggregator stopped"));
  loop.RunFor(50);
  return Status();
}

}  // namespace fedrt
