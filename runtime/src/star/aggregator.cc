// RunAggregator (fedrt/runtime/aggregator.h): the Linux host of the
// aggregator engine (aggregator_engine.h). It loads the key file, the test
// set and the checkpoint, listens on TCP (TLS), runs the EventLoop on the
// calling thread in 20 ms slices with a Tick() between them, and writes the
// checkpoint the engine hands it after every round (CheckpointWriter: retried
// until it is on disk, with descriptors kept in reserve for it).
#include "fedrt/runtime/aggregator.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/log.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/runtime/aggregator_tier.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/event_loop.h"
#include "fedrt/transport/http.h"
#include "fedrt/transport/tcp.h"
#include "fedrt/runtime/model_file.h"
#include "star/aggregator_checkpoint.h"
#include "persist/file.h"
#include "star/aggregator_metrics.h"
#include "star/star_data.h"

namespace fedrt {

namespace {

// Tick() between slices of the loop: joins, deadlines and quorums are
// checked this often, and rounds start and close on these boundaries.
constexpr uint32_t kSliceMs = 20;
// After the Leave, how long the devices get to close their connections.
constexpr uint64_t kFinishGraceMs = 3000;

// Descriptors held open on /dev/null and let go of just for a checkpoint
// write: when connections have taken every other descriptor (EMFILE, with
// the listener backing off), the write still gets the one it needs at a
// time (the temporary file, then the directory to fsync). Nothing else opens
// descriptors on this thread between the release and the refill.
class DescriptorReserve {
 public:
  static constexpr int kCount = 4;
  DescriptorReserve() { Refill(); }
  ~DescriptorReserve() { Release(); }
  DescriptorReserve(const DescriptorReserve&) = delete;
  DescriptorReserve& operator=(const DescriptorReserve&) = delete;

  void Release() {
    for (int& fd : fds_) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }
  void Refill() {
    for (int& fd : fds_) {
      if (fd < 0) fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
  }

 private:
  int fds_[kCount] = {-1, -1, -1, -1};
};

// Keeps the latest state the engine handed over until it is on disk. Each
// state is written at once; while that fails, the host retries it between
// slices (100 ms, doubling to 2 s; a newer state replaces it), logging the
// reason once per round and again when it is saved. The persistence helper
// removes a partial <path>.tmp on every failure. Finish() makes a few last
// attempts and is the error when the latest state is still not saved.
//
// Threads: Save runs in the engine's close job, on the close worker; the
// rest on the loop's thread, Retry never while a job is out. The
// descriptors of a write are opened on the loop's thread (Prepare, before the
// job goes out: the reserve let go of, the file and its directory opened,
// the reserve refilled) and closed there (Settle, when it is back), so the
// listener on that thread never takes what the reserve freed for the write.
// What the monitoring endpoint reads is under a mutex.
class CheckpointWriter {
 public:
  explicit CheckpointWriter(std::string path) : path_(std::move(path)) {}

  // The file this run resumed from: its age counts from its modification time.
  void Resumed() {
    struct stat st;
    if (::stat(path_.c_str(), &st) != 0) return;
    const double age = std::difftime(std::time(nullptr), st.st_mtime);
    const uint64_t age_ms = age > 0 ? static_cast<uint64_t>(age * 1000) : 0;
    const uint64_t now = SystemClock().NowMs();
    std::lock_guard<std::mutex> lock(mutex_);
    saved_ms_ = now > age_ms ? now - age_ms : 0;
    saved_any_ = true;
  }

  // Seconds since the latest state reached the file (-1: none has).
  double age_seconds() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return saved_any_ ? static_cast<double>(SystemClock().NowMs() - saved_ms_) / 1000.0 : -1;
  }
  bool pending() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pending_.has_value();
  }
  // Why the latest state is not on disk (empty while it is).
  std::string trouble() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!pending_) return "";
    return "the state of round " + std::to_string(pending_->round) + " is not saved to " + path_ + ": " +
           last_error_.ToString();
  }

  // On the loop's thread, before a Save on another thread.
  void Prepare() {
    reserve_.Release();
    opened_ = file_.Open(path_);
    reserve_.Refill();
  }
  // On the loop's thread, once that Save has returned.
  void Settle() {
    file_.Close();
    reserve_.Refill();
  }

  // After Prepare (the close job), or on the loop's thread.
  void Save(const AggregatorCheckpoint& state) {
    const bool prepared = file_.is_open() || !opened_.ok();
    std::optional<uint32_t> replaced;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (pending_) replaced = pending_->round;
      pending_.reset();
    }
    if (replaced) {
      Log(LogLevel::kWarning, "aggregator: the state of round %u was never saved; round %u's replaces it", *replaced,
          state.round);
    }
    if (!prepared) Prepare();
    const Status written = Write(state);
    if (!prepared) Settle();
    std::lock_guard<std::mutex> lock(mutex_);
    if (written.ok()) return Saved();
    pending_ = state;
    failures_ = 1;
    last_error_ = written;
    backoff_ms_ = kFirstBackoffMs;
    next_attempt_ms_ = SystemClock().NowMs() + backoff_ms_;
    Log(LogLevel::kError, "aggregator: checkpoint of round %u not saved: %s; retrying", state.round,
        written.ToString().c_str());
  }

  // Between slices, while no close job is out: another attempt once the
  // backoff has passed.
  void Retry() {
    if (!pending_ || SystemClock().NowMs() < next_attempt_ms_) return;
    Attempt();
    backoff_ms_ = std::min(backoff_ms_ * 2, kMaxBackoffMs);
    next_attempt_ms_ = SystemClock().NowMs() + backoff_ms_;
  }

  // Before the host returns (no close job out): OK when the latest state is on disk.
  Status Finish() {
    for (uint32_t wait_ms = kFirstBackoffMs; pending_ && wait_ms <= 4 * kFirstBackoffMs; wait_ms *= 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      Attempt();
    }
    if (!pending_) return Status();
    return Status(last_error_.code(), "the state of round " + std::to_string(pending_->round) +
                                          " could not be saved to " + path_ + " (" + std::to_string(failures_) +
                                          " attempts): " + last_error_.message());
  }

 private:
  static constexpr uint32_t kFirstBackoffMs = 100;
  static constexpr uint32_t kMaxBackoffMs = 2000;

  // Into the prepared file (or Prepare's error).
  Status Write(const AggregatorCheckpoint& state) {
    const Status opened = opened_;
    opened_ = Status();
    if (!opened.ok()) return opened;
    return file_.Commit(EncodeAggregatorCheckpoint(state));
  }

  // On the loop's thread, no close job out: pending_ changes only here.
  void Attempt() {
    Prepare();
    const Status written = Write(*pending_);
    Settle();
    std::lock_guard<std::mutex> lock(mutex_);
    if (written.ok()) {
      Log(LogLevel::kInfo, "aggregator: checkpoint of round %u saved after %u failed attempts", pending_->round,
          failures_);
      pending_.reset();
      return Saved();
    }
    failures_++;
    if (written.message() != last_error_.message()) {
      Log(LogLevel::kError, "aggregator: checkpoint of round %u still not saved: %s", pending_->round,
          written.ToString().c_str());
    }
    last_error_ = written;
  }

  void Saved() {  // mutex_ held
    saved_ms_ = SystemClock().NowMs();
    saved_any_ = true;
  }

  const std::string path_;
  DescriptorReserve reserve_;
  persist::AtomicFileWriter file_;  // Prepare'd for the next Write
  Status opened_;                    // why Prepare could not open it
  mutable std::mutex mutex_;         // the monitoring endpoint's view, written by the close worker
  uint64_t saved_ms_ = 0;
  bool saved_any_ = false;
  std::optional<AggregatorCheckpoint> pending_;  // the latest state, not on disk yet
  uint32_t failures_ = 0;
  Status last_error_;
  uint32_t backoff_ms_ = kFirstBackoffMs;
  uint64_t next_attempt_ms_ = 0;
};

// The one thread the engine's close jobs run on (the engine starts none;
// aggregator_engine.h, "The close job"): a job at a time, and `done` (which
// posts to the loop) once it has run.
class CloseWorker {
 public:
  CloseWorker() : thread_([this] { Work(); }) {}
  ~CloseWorker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      quit_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  CloseWorker(const CloseWorker&) = delete;
  CloseWorker& operator=(const CloseWorker&) = delete;

  void Run(std::function<void()> job, std::function<void()> done) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = std::move(job);
      done_ = std::move(done);
    }
    changed_.notify_all();
  }
  // Until the job handed over (if any) has run.
  void Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !job_ && !busy_; });
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [this] { return quit_ || job_; });
      if (!job_) return;
      std::function<void()> job = std::move(job_), done = std::move(done_);
      job_ = nullptr;
      busy_ = true;
      lock.unlock();
      job();
      done();
      lock.lock();
      busy_ = false;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> job_, done_;  // handed over, not taken yet
  bool busy_ = false;                  // a job is running
  bool quit_ = false;
  std::thread thread_;  // last: starts once the rest is made
};

// GET /metrics and /healthz of RunAggregator (AggregatorOptions::http_host).
transport::HttpResponse Monitor(const std::string& path, const Aggregator& aggregator,
                                const CheckpointWriter* checkpoints) {
  transport::HttpResponse response;
  if (path == "/metrics") {
    star::AggregatorHostMetrics host;
    host.rounds_target = aggregator.config().rounds;
    host.devices_connected = aggregator.all_connected_devices();  // every rank's with a tier
    host.open_connections = aggregator.all_open_connections();
    host.dp = aggregator.config().dp.noise_multiplier > 0;
    host.checkpointing = checkpoints != nullptr;
    if (checkpoints != nullptr) {
      host.checkpoint_age_seconds = checkpoints->age_seconds();
      host.checkpoint_pending = checkpoints->pending();
    }
    response.content_type = star::kPrometheusContentType;
    response.body = star::RenderAggregatorMetrics(aggregator.counters(), host);
  } else if (path == "/healthz") {
    // Unhealthy: the training has ended (done, or stopped with a reason), the
    // last round applied nothing (it runs again, and the run stops after
    // max_failed_rounds such rounds in a row), or the latest state cannot be
    // saved. Waiting for devices to join is healthy: nothing is wrong yet.
    const std::string trouble = checkpoints != nullptr ? checkpoints->trouble() : "";
    const AggregatorCounters& counters = aggregator.counters();
    if (!aggregator.status().ok()) {
      response.status = 503;
      response.body = "stopped: " + aggregator.status().message() + "\n";
    } else if (aggregator.finished()) {
      response.status = 503;
      response.body = "finished: " + std::to_string(aggregator.round()) + " rounds done\n";
    } else if (counters.failed_in_a_row > 0) {
      response.status = 503;
      response.body = "failing: round " + std::to_string(aggregator.round() + 1) + " applied nothing " +
                      std::to_string(counters.failed_in_a_row) + " times in a row (stops at " +
                      std::to_string(aggregator.config().max_failed_rounds) + "): " + counters.last_failure + "\n";
    } else if (!trouble.empty()) {
      response.status = 503;
      response.body = "checkpoint failing: " + trouble + "\n";
    } else {
      response.body = "ok: round " + std::to_string(aggregator.round()) + " of " +
                      std::to_string(aggregator.config().rounds) + " done, " +
                      std::to_string(aggregator.all_connected_devices()) + " devices connected\n";
    }
  } else {
    response.status = 404;
    response.body = "not found; this server has /metrics and /healthz\n";
  }
  return response;
}

// With a tier, every rank resumes from rank 0's file: rank 0 reads the
// bytes and sends them (a leading byte: 0 no file, 1 the file, 2 an error and
// its message), every rank decodes them.
Result<AggregatorCheckpoint> ReadRank0Checkpoint(const std::string& path, AggregatorTier& tier) {
  std::vector<uint8_t> mine;
  if (tier.rank() == 0) {
    Result<std::vector<uint8_t>> bytes = ReadAggregatorCheckpointBytes(path);
    if (bytes.ok()) {
      mine.push_back(1);
      mine.insert(mine.end(), bytes->begin(), bytes->end());
    } else if (bytes.status().code() == StatusCode::kNotFound) {
      mine.push_back(0);
    } else {
      const std::string message = bytes.status().ToString();
      mine.push_back(2);
      mine.insert(mine.end(), message.begin(), message.end());
    }
  }
  FEDRT_RETURN_IF_ERROR(tier.BroadcastFromRank0(&mine));
  const std::vector<uint8_t>& file = mine;
  if (file.empty()) return Corrupt("aggregator tier: rank 0 sent no checkpoint answer");
  if (file[0] == 0) return Status(StatusCode::kNotFound, path + ": no such file on rank 0");
  if (file[0] == 2) return Status(StatusCode::kUnavailable, "rank 0: " + std::string(file.begin() + 1, file.end()));
  return DecodeAggregatorCheckpoint(file.data() + 1, file.size() - 1, path + " (rank 0's)");
}

// Resumes from the saved state if the file exists (*resumed); errors name
// the file.
Status RestoreCheckpoint(const std::string& path, Aggregator& aggregator, AggregatorTier* tier, bool* resumed) {
  Result<AggregatorCheckpoint> saved = tier != nullptr ? ReadRank0Checkpoint(path, *tier) : ReadAggregatorCheckpoint(path);
  if (saved.status().code() == StatusCode::kNotFound) {
    Log(LogLevel::kInfo, "aggregator: no checkpoint at %s yet: starting at round 0", path.c_str());
    return Status();
  }
  *resumed = true;
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
  // An aggregator tier's rank 0 alone evaluates, checkpoints, serves the
  // monitoring endpoint and saves the model (aggregator_tier.h).
  AggregatorTier* tier = hooks.tier;
  const bool rank0 = tier == nullptr || tier->rank() == 0;
  TrainTestData data;
  DataView test_set;
  const bool evaluate = rank0 && !options.data_dir.empty();
  if (evaluate) {
    Result<TrainTestData> loaded = star::LoadNormalized(options.data_dir);
    if (!loaded.ok()) return loaded.status();
    data = std::move(*loaded);
    test_set = data.test;
  }
  AggregatorHooks engine_hooks = hooks;
  std::unique_ptr<CheckpointWriter> checkpoints;
  if (!options.checkpoint.empty() && rank0) {
    checkpoints = std::make_unique<CheckpointWriter>(options.checkpoint);
    engine_hooks.on_checkpoint = [writer = checkpoints.get(), also = hooks.on_checkpoint](const AggregatorCheckpoint& state) {
      writer->Save(state);
      if (also) also(state);
    };
  }
  // Declared before the aggregator: connections hold it until the loop has
  // let go of them.
  transport::EventLoop loop;
  // The evaluation and the checkpoint's write run on the close worker, so
  // this thread goes on serving the devices and /healthz meanwhile; when
  // the job is back, close_done (set below) reports the round on this thread.
  CloseWorker worker;
  std::function<void()> close_done;
  engine_hooks.on_close_job = [&loop, &worker, &close_done, writer = checkpoints.get()](std::function<void()> job) {
    if (writer != nullptr) writer->Prepare();
    worker.Run(std::move(job), [&loop, &close_done] { loop.Post([&close_done] { close_done(); }); });
  };
  Result<std::shared_ptr<Aggregator>> created =
      Aggregator::Create(options, *keys, transport::SystemCrypto(), SystemClock(),
                         evaluate ? &test_set : nullptr, std::move(engine_hooks));
  if (!created.ok()) return created.status();
  std::shared_ptr<Aggregator> aggregator = std::move(*created);
  bool resumed = false;
  if (!options.checkpoint.empty()) {
    FEDRT_RETURN_IF_ERROR(RestoreCheckpoint(options.checkpoint, *aggregator, tier, &resumed));
    if (aggregator->round() > 0 && checkpoints) checkpoints->Resumed();
  }
  if (!options.initial_parameters.empty() && !resumed) {
    AggregatorCheckpoint initial;
    initial.model = options.model;
    initial.parameters = options.initial_parameters;
    const Status restored = aggregator->Restore(std::move(initial));
    if (!restored.ok()) return Status(restored.code(), "initial model: " + restored.message());
  } else if (!options.initial_parameters.empty()) {
    Log(LogLevel::kInfo, "aggregator: resumed from %s: the initial model was for the first start",
        options.checkpoint.c_str());
  }

  transport::ConnectionOptions connection_options = aggregator->connection_options();
  Result<std::shared_ptr<const transport::TlsContext>> tls = transport::CreateTlsIfConfigured(options.tls);
  if (!tls.ok()) return tls.status();
  connection_options.tls = *tls;
  // Ranks on one host need ports of their own: a fixed --port is rank 0's,
  // rank r listens on port + r.
  const uint16_t port =
      tier != nullptr && options.port != 0 ? static_cast<uint16_t>(options.port + tier->rank()) : options.port;
  Result<std::shared_ptr<transport::TcpListener>> listener =
      transport::TcpListener::Listen(loop, options.host, port, connection_options, aggregator);
  if (!listener.ok()) return listener.status();
  if (tier != nullptr) {
    const Status shared = tier->ShareAddress(options.host + ":" + std::to_string((*listener)->port()));
    if (!shared.ok()) return shared;
    Log(LogLevel::kInfo, "aggregator: rank %d of %d", tier->rank(), tier->size());
  }
  Log(LogLevel::kInfo, "aggregator: listening on %s:%u, model %s (%zu parameters), codec %s, round %u of %u",
      options.host.c_str(), (*listener)->port(), options.model.c_str(), aggregator->model().parameter_count(),
      aggregator->codec().c_str(), aggregator->round(), options.rounds);
  if (hooks.on_listening) hooks.on_listening((*listener)->port());
  std::shared_ptr<transport::HttpListener> http;
  if (!options.http_host.empty() && rank0) {
    // Called on this thread, inside loop.RunFor, between the engine's calls,
    // and possibly once more as the loop shuts down after this function
    // returned (its last poll runs a request that was already read, before
    // the listener's queued Close): by then the aggregator may be gone.
    Result<std::shared_ptr<transport::HttpListener>> opened = transport::HttpListener::Listen(
        loop, options.http_host, options.http_port,
        [weak = std::weak_ptr<Aggregator>(aggregator), writer = checkpoints.get()](const std::string& path) {
          const std::shared_ptr<Aggregator> engine = weak.lock();
          if (engine) return Monitor(path, *engine, writer);
          transport::HttpResponse stopping;
          stopping.status = 503;
          stopping.body = "stopped: the aggregator has exited\n";
          return stopping;
        });
    if (!opened.ok()) {
      (*listener)->Close();
      aggregator->Abort(Status(StatusCode::kCancelled, "aggregator stopped"));
      return Status(opened.status().code(), "--http: " + opened.status().message());
    }
    http = std::move(*opened);
    Log(LogLevel::kInfo, "aggregator: metrics on http://%s:%u/metrics", options.http_host.c_str(), http->port());
    if (hooks.on_http_listening) hooks.on_http_listening(http->port());
  }
  // Between slices, and as soon as a close job is back: the next round
  // starts at once after a close (Tick() returned 0, or the job is done),
  // not a slice later. A round that starts here is shown at once.
  const auto step = [&] {
    if (aggregator->Tick() == 0) aggregator->Tick();
    if (checkpoints && !aggregator->closing()) checkpoints->Retry();
    if (hooks.on_round_progress) {
      const RoundProgress progress = aggregator->round_progress();
      if (progress.open) hooks.on_round_progress(progress);
    }
  };
  // The job has run (the worker is idle): its descriptors back, the round
  // reported. False when there was none (already finished at a stop).
  const auto finish_close = [&] {
    if (!aggregator->closing()) return false;
    if (checkpoints) checkpoints->Settle();
    aggregator->CloseJobDone();
    return true;
  };
  close_done = [&] {
    if (finish_close()) step();
  };
  uint64_t finished_at = 0;
  while (stop == nullptr || !stop->load()) {
    loop.RunFor(kSliceMs);
    step();
    if (aggregator->finished()) {
      if (finished_at == 0) finished_at = SystemClock().NowMs();
      if (aggregator->open_connections() == 0 || SystemClock().NowMs() - finished_at > kFinishGraceMs) break;
    }
  }
  // Stopped with a close job out: it finishes (its checkpoint is written)
  // and its round is reported before the connections go.
  worker.Wait();
  finish_close();
  (*listener)->Close();
  aggregator->Abort(Status(StatusCode::kCancelled, "aggregator stopped"));
  loop.RunFor(50);
  if (!options.save_model.empty() && rank0) {
    const Status written = WriteModelNpz(options.save_model, aggregator->model());
    if (!written.ok()) {
      if (http) http->Close();
      return written;
    }
    Log(LogLevel::kInfo, "aggregator: saved the global model of round %u to %s", aggregator->round(),
        options.save_model.c_str());
  }
  // Training that went on while its state could not be saved ends as an
  // error, and so does training that stopped because no round could apply.
  const Status saved = checkpoints ? checkpoints->Finish() : Status();
  if (http && options.http_linger_ms > 0 && aggregator->finished() && (stop == nullptr || !stop->load())) {
    // Everything is on disk: a kill during the linger loses nothing.
    Log(LogLevel::kInfo, "aggregator: training ended; /metrics and /healthz answer for %u ms more", options.http_linger_ms);
    const uint64_t until = SystemClock().NowMs() + options.http_linger_ms;
    while ((stop == nullptr || !stop->load()) && SystemClock().NowMs() < until) loop.RunFor(kSliceMs);
  }
  if (http) http->Close();
  if (!aggregator->status().ok()) return aggregator->status();
  return saved;
}

}  // namespace fedrt
