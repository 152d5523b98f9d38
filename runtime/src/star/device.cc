// The star device (fedrt/runtime/device.h): a blocking client on a FrameQueue;
// its connection's I/O runs on an EventLoopThread.
#include "fedrt/runtime/device.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/error_feedback.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/platform/log.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/runtime/trainer.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/chunking.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/tcp.h"
#include "star/device_state.h"
#include "star/star_data.h"

namespace fedrt {

uint32_t DeviceSenderId(const std::string& device_id) {
  uint32_t h = 2166136261u;
  for (unsigned char c : device_id) {
    h ^= c;
    h *= 16777619u;
  }
  return h & 0xFFFFFFu;
}

namespace {

using namespace transport;  // NOLINT: the device speaks the transport's vocabulary throughout

class Device {
 public:
  Device(const DeviceOptions& options, const DeviceHooks& hooks, const std::atomic<bool>* stop)
      : options_(options), hooks_(hooks), stop_(stop) {}

  Status Run();

 private:
  bool Stopping() const { return stop_ != nullptr && stop_->load(); }
  Status Setup();
  // One connection's life. OK: the aggregator ended the training.
  // kUnauthenticated: refused (fatal). Anything else: reconnect.
  Status Session(bool* joined);
  Status Join(FrameQueue& queue, Connection& connection);
  Status TrainAndSend(Connection& connection);
  Status ApplyModel();
  Result<std::unique_ptr<Codec>> InstructedCodec(transport::LevelStatisticsMessage* statistics, uint32_t* version);

  DeviceOptions options_;
  DeviceHooks hooks_;
  const std::atomic<bool>* stop_;
  std::string id_;
  Key key_;
  uint32_t sender_id_ = 0;
  TrainTestData data_;
  std::vector<uint32_t> share_;
  std::unique_ptr<Model> model_;
  std::vector<float> global_;
  std::vector<float> delta_;
  std::vector<uint8_t> payload_;
  std::unique_ptr<ErrorFeedback> feedback_;
  std::vector<float> restored_residual_;  // added to the first delta after a restart
  FrameLimits limits_;
  std::shared_ptr<const transport::TlsContext> tls_;  // null: plain TCP
  uint64_t last_round_ = 0;

  // The round being received.
  std::unique_ptr<Reassembler> model_bytes_;
  ModelEncoding model_encoding_ = ModelEncoding::kFullModelFp32;
  int64_t model_round_ = -1;  // round whose global model global_ holds
  uint64_t round_ = 0;
  std::string codec_spec_;
  uint64_t session_seed_ = 0;
  uint32_t epochs_ = 1;
  uint32_t steps_ = 0;
  float lr_ = 0.05f;
  uint32_t level_table_version_ = 0;  // ALQ / AMQ: the table to encode with
  std::vector<float> level_table_;    // empty: the codec's initial table (version 0)
  std::vector<float> measured_;       // delta + residual, the vector whose statistics are sent
};

Status Device::Setup() {
  Result<KeyStore> keys = KeyStore::LoadFile(options_.key_file);
  if (!keys.ok()) return keys.status();
  id_ = options_.device_id;
  if (id_.empty() && keys->SingleDeviceId() != nullptr) id_ = *keys->SingleDeviceId();
  if (!IsValidDeviceId(id_)) return InvalidArgument("device id '" + id_ + "' is not valid");
  const Key* key = keys->Find(id_);
  if (key == nullptr) return NotFound(options_.key_file + ": no key for device '" + id_ + "'");
  key_ = *key;
  sender_id_ = DeviceSenderId(id_);

  int index = options_.index;
  if (index < 0) {
    std::size_t digits = id_.size();
    while (digits > 0 && id_[digits - 1] >= '0' && id_[digits - 1] <= '9') --digits;
    if (digits == id_.size()) return InvalidArgument("give --index: the id '" + id_ + "' ends in no number");
    index = std::atoi(id_.c_str() + digits) % std::max(1, options_.devices);
  }
  Result<TrainTestData> data = star::LoadNormalized(options_.data_dir);
  if (!data.ok()) return data.status();
  data_ = std::move(*data);
  data_.test = Dataset();  // the aggregator evaluates
  Result<std::vector<uint32_t>> share =
      star::DeviceShare(data_.train, options_.partition, options_.devices, index, options_.partition_seed);
  if (!share.ok()) return share.status();
  share_ = std::move(*share);
  if (share_.empty()) return Status(StatusCode::kFailedPrecondition, "device '" + id_ + "' got no examples");

  Result<Model> model = Model::Create(options_.model, 1);
  if (!model.ok()) return model.status();
  model_ = std::make_unique<Model>(std::move(*model));
  if (model_->input_size() != data_.train.example_size()) {
    return InvalidArgument("model '" + options_.model + "' does not fit the data");
  }
  const std::size_t d = model_->parameter_count();
  global_.assign(d, 0.0f);
  delta_.assign(d, 0.0f);
  feedback_ = std::make_unique<ErrorFeedback>(d);
  if (!options_.state_file.empty()) {
    Result<std::vector<float>> residual = star::LoadResidual(options_.state_file, d);
    if (residual.ok()) {
      // Feed the saved residual back through Encode's bookkeeping: the
      // wrapper starts from zero, so keep it beside and add it to the first delta.
      restored_residual_ = std::move(*residual);
      Log(LogLevel::kInfo, "device %s: restored the error-feedback residual from %s", id_.c_str(),
          options_.state_file.c_str());
    } else if (residual.status().code() != StatusCode::kNotFound) {
      // Starting from zero would silently drop what the residual carries:
      // the owner decides (remove the file to start afresh).
      return Status(residual.status().code(), "--state-file " + residual.status().message());
    }
  }
  Log(LogLevel::kInfo, "device %s: %zu examples (%s, share %d of %d), model %s", id_.c_str(), share_.size(),
      options_.partition.c_str(), index, options_.devices, options_.model.c_str());
  return Status();
}

Status Device::Join(FrameQueue& queue, Connection& connection) {
  ClientHandshake handshake(id_, key_, SystemCrypto());
  Result<JoinMessage> join = handshake.Start();
  if (!join.ok()) return join.status();
  const std::vector<std::string> names = CodecNames();
  for (const std::string& name : names) join->codecs.push_back(name);
  const std::string isa = IsaName(ActiveIsa());
  join->isa = isa;
  join->max_frame_bytes = limits_.max_frame_bytes;
  join->resume_round = last_round_;
  join->model_round = model_round_;
  Result<OutFrame> frame = Encode(*join, limits_);
  if (!frame.ok()) return frame.status();
  FEDRT_RETURN_IF_ERROR(connection.Send(*frame));

  Result<Frame> reply = queue.Pop(10000);
  if (!reply.ok()) return reply.status();
  if (reply->kind() == MessageKind::kError) {
    Result<ErrorMessage> error = DecodeError(*reply);
    return error.ok() ? ToStatus(*error) : error.status();
  }
  Result<ChallengeMessage> challenge = DecodeChallenge(*reply);
  if (!challenge.ok()) return challenge.status();
  Result<AuthenticateMessage> proof = handshake.OnChallenge(*challenge);
  if (!proof.ok()) return proof.status();
  frame = Encode(*proof, limits_);
  if (!frame.ok()) return frame.status();
  FEDRT_RETURN_IF_ERROR(connection.Send(*frame));

  reply = queue.Pop(10000);
  if (!reply.ok()) {
    // A server that refuses closes right after its Error; the queue may
    // report the close first.
    if (reply.status().code() == StatusCode::kUnauthenticated) return reply.status();
    return reply.status();
  }
  if (reply->kind() == MessageKind::kError) {
    Result<ErrorMessage> error = DecodeError(*reply);
    return error.ok() ? ToStatus(*error) : error.status();
  }
  Result<JoinResponseMessage> response = DecodeJoinResponse(*reply);
  if (!response.ok()) return response.status();
  FEDRT_RETURN_IF_ERROR(handshake.OnJoinResponse(*response));
  Log(LogLevel::kInfo, "device %s: joined at round %llu", id_.c_str(),
      static_cast<unsigned long long>(response->current_round));
  return Status();
}

// The aggregator's broadcast, once complete: the full model, or a delta
// compressed with the codec its payload names, added to the previous round's
// model exactly as the aggregator adds it to its copy.
Status Device::ApplyModel() {
  const std::size_t d = global_.size();
  if (model_encoding_ == ModelEncoding::kFullModelFp32) {
    if (model_bytes_->size() != d * sizeof(float)) return Corrupt("the global model has the wrong size");
    std::vector<float> model(d);
    std::memcpy(model.data(), model_bytes_->data(), d * sizeof(float));
    if (!CheckFinite(model.data(), d).ok()) return Corrupt("the global model is not finite");
    global_ = std::move(model);
  } else {
    if (model_round_ < 0 || model_round_ + 1 != static_cast<int64_t>(round_)) {
      return Status(StatusCode::kFailedPrecondition, "a model delta for round " + std::to_string(round_) +
                                                         " without the model of the round before");
    }
    // The reassembled bytes are in memory, so their count fits a size_t.
    const std::size_t delta_size = static_cast<std::size_t>(model_bytes_->size());
    Result<PayloadView> view = ParsePayload(model_bytes_->data(), delta_size);
    if (!view.ok()) return view.status();
    Result<std::unique_ptr<Codec>> codec = MakeCodec(view->spec);
    if (!codec.ok()) return codec.status();
    if ((*codec)->needs_side_info()) return InvalidArgument("a model delta in '" + view->spec + "'");
    CodecContext context;
    context.session_seed = session_seed_;
    context.round = static_cast<uint32_t>(round_);
    context.sender_id = 0xFFFFFFu;  // the aggregator's broadcast
    std::vector<float> model = global_;
    FEDRT_RETURN_IF_ERROR((*codec)->DecodeAccumulate(model_bytes_->data(), delta_size, context, 1.0f,
                                                     model.data(), d));
    if (!CheckFinite(model.data(), d).ok()) return Corrupt("the global model is not finite");
    global_ = std::move(model);
  }
  model_round_ = static_cast<int64_t>(round_);
  if (hooks_.on_model) hooks_.on_model(static_cast<uint32_t>(round_), global_.data(), d);
  return Status();
}

// The instructed codec. For ALQ / AMQ: with the instructed level table
// installed, its version in *version, and the statistics of the vector about
// to be encoded (delta_, plus the residual with error feedback) in
// *statistics, for the aggregator's next fit.
Result<std::unique_ptr<Codec>> Device::InstructedCodec(LevelStatisticsMessage* statistics, uint32_t* version) {
  Result<std::unique_ptr<AdaptiveCodec>> adaptive = MakeAdaptiveCodec(codec_spec_);
  if (!adaptive.ok()) return MakeCodec(codec_spec_);
  AdaptiveCodec& codec = **adaptive;
  if (!level_table_.empty()) {
    LevelTable table;
    table.version = level_table_version_;
    table.levels = level_table_;
    const Status installed = codec.SetLevelTable(table);
    if (!installed.ok()) return Corrupt("the instructed level table: " + installed.message());
  } else if (level_table_version_ != 0) {
    return Corrupt("the instructions name level table version " + std::to_string(level_table_version_) +
                   " without the table");
  }
  *version = codec.level_table().version;
  const std::size_t d = delta_.size();
  const float* measured = delta_.data();
  if (codec.wants_error_feedback()) {
    measured_.resize(d);
    const float* residual = feedback_->residual();
    for (std::size_t i = 0; i < d; ++i) measured_[i] = delta_[i] + residual[i];
    measured = measured_.data();
  }
  Result<LevelStatistics> measured_stats = codec.MeasureLevelStatistics(measured, d);
  if (!measured_stats.ok()) return measured_stats.status();
  statistics->present = true;
  statistics->count = measured_stats->count;
  statistics->sum = measured_stats->sum;
  statistics->sum_sq = measured_stats->sum_sq;
  statistics->bucket_norms = measured_stats->bucket_norms;
  for (const BucketMoments& b : measured_stats->largest_buckets) {
    statistics->largest_buckets.push_back({b.norm, b.count, b.sum, b.sum_sq});
  }
  return std::unique_ptr<Codec>(std::move(*adaptive));
}

Status Device::TrainAndSend(Connection& connection) {
  const std::size_t d = global_.size();
  std::memcpy(model_->parameters(), global_.data(), d * sizeof(float));

  SgdOptions sgd_options;
  sgd_options.schedule.base_lr = lr_;
  Result<Sgd> sgd = Sgd::Create(sgd_options, d);
  if (!sgd.ok()) return sgd.status();
  TrainOptions train;
  train.batch = options_.batch;
  train.seed = options_.partition_seed * 1000003u + sender_id_;
  train.subset = &share_;
  train.max_steps = steps_;
  double loss = 0;
  for (uint32_t e = 0; e < epochs_; ++e) {
    Result<EpochStats> stats = TrainEpoch(*model_, *sgd, data_.train, round_ * 64 + e, train);
    if (!stats.ok()) return stats.status();
    loss = stats->loss;
  }
  if (hooks_.on_trained) hooks_.on_trained(static_cast<uint32_t>(round_));
  if (Stopping()) return Status(StatusCode::kCancelled, "stopped");

  const float* local = model_->parameters();
  for (std::size_t i = 0; i < d; ++i) delta_[i] = local[i] - global_[i];
  if (!restored_residual_.empty()) {
    for (std::size_t i = 0; i < d; ++i) delta_[i] += restored_residual_[i];
    restored_residual_.clear();
  }
  LevelStatisticsMessage statistics;
  uint32_t table_version = 0;
  Result<std::unique_ptr<Codec>> codec = InstructedCodec(&statistics, &table_version);
  if (!codec.ok()) return codec.status();
  payload_.resize((*codec)->MaxEncodedSize(d));
  CodecContext context;
  context.session_seed = session_seed_;
  context.round = static_cast<uint32_t>(round_);
  context.sender_id = sender_id_;
  const bool feedback = (*codec)->wants_error_feedback();
  Result<std::size_t> size =
      feedback ? feedback_->Encode(**codec, delta_.data(), d, context, payload_.data(), payload_.size())
               : (*codec)->Encode(delta_.data(), d, context, payload_.data(), payload_.size());
  if (!size.ok()) return size.status();
  if (feedback && !options_.state_file.empty()) {
    const Status saved = star::SaveResidual(options_.state_file, feedback_->residual(), d);
    if (!saved.ok()) Log(LogLevel::kWarning, "device %s: %s", id_.c_str(), saved.ToString().c_str());
  }
  if (hooks_.on_update) {
    hooks_.on_update(static_cast<uint32_t>(round_), codec_spec_, payload_.data(), *size, share_.size());
  }

  Result<ChunkPlan> plan = ChunkPlan::Make(*size, limits_.MaxChunkBytes());
  if (!plan.ok()) return plan.status();
  for (uint32_t i = 0; i < plan->count(); ++i) {
    UpdateMessage update;
    update.round_id = round_;
    update.num_samples = share_.size();
    update.training_loss = static_cast<float>(loss);
    update.codec_spec = codec_spec_;
    update.level_table_version = table_version;
    if (i == 0) update.stats.level_statistics = statistics;
    update.stats.encoded_bytes = *size;
    update.stats.raw_bytes = d * sizeof(float);
    update.payload = plan->Chunk(i, payload_.data());
    Result<OutFrame> frame = Encode(update, limits_);
    if (!frame.ok()) return frame.status();
    FEDRT_RETURN_IF_ERROR(connection.Send(*frame));
  }
  // Send only queues the frames for the loop thread: "sent" is said once
  // they are in the kernel, which delivers them even if this process is
  // stopped or killed next. Each write is bounded by the connection's io
  // timeout; a stalled aggregator closes the connection and fails this.
  FEDRT_RETURN_IF_ERROR(connection.Flush(0));
  last_round_ = round_ + 1;
  Log(LogLevel::kInfo, "device %s: round %llu sent %zu bytes (%s), loss %.4f", id_.c_str(),
      static_cast<unsigned long long>(round_), *size, codec_spec_.c_str(), loss);
  return Status();
}

Status Device::Session(bool* joined) {
  EventLoopThread loop;
  auto queue = std::make_shared<FrameQueue>();
  ConnectionOptions connection_options;
  connection_options.limits = limits_;
  connection_options.idle_timeout_ms = 0;  // the aggregator's heartbeats are enough; rounds can be long
  // Training keeps this thread busy, the loop thread keeps the link alive:
  // beat well inside any idle timeout an aggregator is likely to use.
  connection_options.heartbeat_interval_ms = 1000;
  connection_options.tls = tls_;
  Result<std::shared_ptr<Connection>> connection = TcpConnectAndWait(
      loop.loop(), options_.host, options_.port, connection_options, queue, options_.connect_timeout_ms);
  if (!connection.ok()) return connection.status();
  std::shared_ptr<Connection> link = *connection;
  Status status = Join(*queue, *link);
  if (!status.ok()) {
    link->Abort(status);
    return status;
  }
  *joined = true;
  while (!Stopping()) {
    Result<Frame> frame = queue->Pop(200);
    if (!frame.ok()) {
      if (frame.status().code() == StatusCode::kDeadlineExceeded) continue;
      return frame.status().code() == StatusCode::kOk ? Status(StatusCode::kUnavailable, "closed") : frame.status();
    }
    switch (frame->kind()) {
      case MessageKind::kRoundInstructions: {
        Result<RoundInstructionsMessage> m = DecodeRoundInstructions(*frame, limits_);
        if (!m.ok()) {
          link->Abort(m.status(), true);
          return m.status();
        }
        if (m->payload.index == 0) {
          if (m->model_parameters != global_.size()) {
            status = Status(StatusCode::kFailedPrecondition,
                            "the aggregator's model has " + std::to_string(m->model_parameters) +
                                " parameters, this device's " + std::to_string(global_.size()));
            link->Abort(status, true);
            return status;
          }
          // A compressed delta is at most a codec's worst case, below twice the fp32 model.
          model_encoding_ = m->model_encoding;
          model_bytes_ = std::make_unique<Reassembler>(global_.size() * sizeof(float) *
                                                       (model_encoding_ == ModelEncoding::kFullModelFp32 ? 1 : 2) +
                                                       (model_encoding_ == ModelEncoding::kFullModelFp32 ? 0 : 65536));
          round_ = m->round_id;
          codec_spec_ = std::string(m->codec_spec);
          session_seed_ = m->session_seed;
          epochs_ = std::max<uint32_t>(1, m->local_epochs);
          steps_ = m->local_steps;
          lr_ = m->learning_rate;
          level_table_version_ = m->level_table_version;
          level_table_.assign(m->level_table, m->level_table + m->level_table_size);
        } else if (!model_bytes_ || m->round_id != round_) {
          status = Corrupt("a model chunk without its first chunk");
          link->Abort(status, true);
          return status;
        }
        status = model_bytes_->Add(m->payload);
        if (!status.ok()) {
          link->Abort(status, true);
          return status;
        }
        if (model_bytes_->complete()) {
          status = ApplyModel();
          if (!status.ok()) {
            // A reconnect gets the full model; a bad one is the aggregator's fault.
            if (status.code() == StatusCode::kFailedPrecondition) status = Status(StatusCode::kUnavailable, status.message());
            link->Abort(status, true);
            return status;
          }
          AckMessage ack;
          ack.round_id = round_;
          ack.acked = MessageKind::kRoundInstructions;
          Result<OutFrame> out = Encode(ack, limits_);
          if (out.ok()) (void)link->Send(*out);
          status = TrainAndSend(*link);
          if (!status.ok()) {
            if (status.code() == StatusCode::kCancelled) {
              link->Abort(status);
              return status;
            }
            Log(LogLevel::kError, "device %s: round %llu: %s", id_.c_str(),
                static_cast<unsigned long long>(round_), status.ToString().c_str());
            link->Abort(status, true);
            return status;
          }
        }
        break;
      }
      case MessageKind::kLeave: {
        Result<LeaveMessage> leave = DecodeLeave(*frame);
        Log(LogLevel::kInfo, "device %s: the aggregator ended the training (%s)", id_.c_str(),
            leave.ok() ? std::string(leave->reason).c_str() : "no reason");
        link->Close();
        queue->WaitClosed(2000);
        return Status();
      }
      case MessageKind::kError: {
        Result<ErrorMessage> error = DecodeError(*frame);
        if (error.ok()) {
          Log(LogLevel::kWarning, "device %s: the aggregator reports %s", id_.c_str(),
              ToStatus(*error).ToString().c_str());
        }
        break;
      }
      default:
        break;  // acks and anything else this device does not need
    }
  }
  link->Abort(Status(StatusCode::kCancelled, "stopped"));
  return Status(StatusCode::kCancelled, "stopped");
}

Status Device::Run() {
  FEDRT_RETURN_IF_ERROR(Setup());
  Result<std::shared_ptr<const transport::TlsContext>> tls = transport::CreateTlsIfConfigured(options_.tls);
  if (!tls.ok()) return tls.status();
  if (*tls && !(*tls)->can_dial()) return InvalidArgument("a TLS device needs the CA file that verifies the server");
  tls_ = *tls;
  limits_.max_frame_bytes = kDefaultMaxFrameBytes;
  std::mt19937_64 jitter(sender_id_ ^ star::NowMs());
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
    if (joined) {
      backoff_ms = 100;
      unreachable_since = star::NowMs();
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
  Device device(options, hooks, stop);
  return device.Run();
}

}  // namespace fedrt
