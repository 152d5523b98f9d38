// The star device engine (contract in fedrt/runtime/device_client.h).
#include "fedrt/runtime/device_client.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/error_feedback.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/platform/log.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/runtime/trainer.h"
#include "fedrt/transport/chunking.h"
#include "fedrt/transport/join.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/stream.h"

namespace fedrt {

using namespace transport;  // NOLINT: the device speaks the transport's vocabulary throughout

uint32_t DeviceSenderId(const std::string& device_id) {
  uint32_t h = 2166136261u;
  for (unsigned char c : device_id) {
    h ^= c;
    h *= 16777619u;
  }
  return h & 0xFFFFFFu;
}

// What a round's instructions said (chunk 0), and how far the device got.
struct RoundPlan {
  uint64_t round = 0;
  std::string codec_spec;
  uint64_t session_seed = 0;
  uint32_t epochs = 1;
  uint32_t steps = 0;
  float lr = 0.05f;
  uint32_t level_table_version = 0;  // ALQ / AMQ: the table to encode with
  std::vector<float> level_table;    // empty: the codec's initial table (version 0)
};

// A codec built in storage the client keeps (ConstructCodec), rebuilt only
// when the instructed spec changes: a device whose aggregator keeps its codec
// makes no codec allocation after the first round.
class CachedCodec {
 public:
  CachedCodec() = default;
  CachedCodec(const CachedCodec&) = delete;
  CachedCodec& operator=(const CachedCodec&) = delete;
  ~CachedCodec() { DestroyCodec(codec_); }

  // The codec for `spec` with working space for `d` coordinates.
  Result<Codec*> For(std::string_view spec, std::size_t d) {
    if (codec_ != nullptr && spec == spec_) return codec_;
    DestroyCodec(codec_);
    codec_ = nullptr;
    Result<CodecFootprint> footprint = CodecFootprintFor(spec, d);
    if (!footprint.ok()) return footprint.status();
    const std::size_t words = (footprint->size + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
    if (storage_.size() < words) storage_.resize(words);
    Result<Codec*> made = ConstructCodec(spec, d, storage_.data(), storage_.size() * sizeof(std::max_align_t));
    if (!made.ok()) return made.status();
    codec_ = *made;
    spec_.assign(spec.data(), spec.size());
    return codec_;
  }

 private:
  std::vector<std::max_align_t> storage_;
  std::string spec_;  // as instructed (the cache key)
  Codec* codec_ = nullptr;
};

struct DeviceClient::State {
  State(const DeviceClientConfig& c, Model& m, const DataView& d, const std::vector<uint32_t>* s, Crypto& cr,
        DeviceHooks h)
      : config(c), model(m), data(d), share(s), crypto(cr), hooks(std::move(h)),
        sender_id(DeviceSenderId(c.device_id)), tensor_sizes(ModelTensorSizes(m)) {}

  Status OnInstructions(Connection& link, const Frame& frame);
  Status ApplyModel();
  Status Train(uint32_t max_steps);
  Status EncodeAndSend(Connection& link);
  Result<Codec*> InstructedCodec(LevelStatisticsMessage* statistics, uint32_t* version);
  Result<std::size_t> EncodeUpdate(Codec& codec, const float* delta, const CodecContext& context);
  std::size_t d() const { return global.size(); }
  // The residual exists once a codec asks for error feedback (two model-sized
  // vectors a device without it never needs).
  ErrorFeedback& Feedback() {
    if (!feedback) feedback = std::make_unique<ErrorFeedback>(d());
    return *feedback;
  }

  DeviceClientConfig config;
  Model& model;
  DataView data;
  const std::vector<uint32_t>* share;
  Crypto& crypto;
  DeviceHooks hooks;
  const uint32_t sender_id;
  const std::vector<std::size_t> tensor_sizes;  // the model's tensor table (lengths)
  FrameLimits limits;

  // Model-sized memory: the model's parameters and gradients and `global`;
  // the gradients hold the delta once training is done, and the parameters
  // are the scratch of an incoming global model until it is checked. The
  // payload lives from encoding to sending (the wire's frames and the
  // reassembly of the next model are the transport's), the error-feedback
  // vectors only with a codec that uses them.
  std::vector<float> global;          // the global model of model_round
  std::vector<float> measured;        // delta + residual, whose statistics ALQ / AMQ send
  std::vector<uint8_t> payload;
  std::unique_ptr<ErrorFeedback> feedback;
  std::vector<float> restored_residual;  // added to the first delta after a restart

  std::unique_ptr<JoinClient> join;   // the join in progress on this connection
  bool joined = false;
  uint64_t joins = 0;
  bool finished = false;
  uint64_t next_round = 0;            // the round the device expects next (announced when joining)
  int64_t model_round = -1;           // round whose global model `global` holds

  // The round being received, trained, then sent.
  RoundPlan plan;
  std::unique_ptr<Reassembler> model_bytes;
  ModelEncoding model_encoding = ModelEncoding::kFullModelFp32;
  bool round_ready = false;           // instructions complete: training to do
  uint64_t ready_ms = 0;              // config.clock: when they were (compute_ms counts from it)
  bool trained = false;               // training done: the update is to be sent
  std::unique_ptr<Sgd> sgd;
  std::vector<float> sgd_state;       // the optimizer's velocity (momentum), sized at Create
  CachedCodec update_codec;           // the instructed codec (not ALQ / AMQ)
  CachedCodec delta_codec;            // the codec of the aggregator's compressed model deltas
  std::unique_ptr<AdaptiveCodec> adaptive_codec;  // ALQ / AMQ: made per round with its table
  std::unique_ptr<TrainingPass> pass;
  uint32_t epoch = 0;
  double loss = 0;
};

DeviceClient::DeviceClient(std::unique_ptr<State> state) : state_(std::move(state)) {}
DeviceClient::~DeviceClient() = default;

Result<std::unique_ptr<DeviceClient>> DeviceClient::Create(const DeviceClientConfig& config, Model& model,
                                                           const DataView& data, const std::vector<uint32_t>* share,
                                                           Crypto& crypto, DeviceHooks hooks) {
  if (!IsValidDeviceId(config.device_id)) return InvalidArgument("device id '" + config.device_id + "' is not valid");
  if (config.key.size() < kMinKeyBytes || config.key.size() > kMaxKeyBytes) {
    return InvalidArgument("the device key must have " + std::to_string(kMinKeyBytes) + " to " +
                           std::to_string(kMaxKeyBytes) + " bytes");
  }
  if (config.batch <= 0) return InvalidArgument("the batch size must be positive");
  if (model.uses_caller_buffers() && config.batch > model.batch_capacity()) {
    return OutOfRange("a batch of " + std::to_string(config.batch) + " does not fit model '" + model.spec().text +
                      "', whose buffers hold batches of up to " + std::to_string(model.batch_capacity()));
  }
  FEDRT_RETURN_IF_ERROR(data.Validate());
  if (model.input_size() != data.example_size) {
    return InvalidArgument("model '" + model.spec().text + "' takes " + std::to_string(model.input_size()) +
                           " features, the data has " + std::to_string(data.example_size));
  }
  if (data.num_classes > model.num_classes()) {
    return InvalidArgument("the data has " + std::to_string(data.num_classes) + " classes, model '" +
                           model.spec().text + "' predicts " + std::to_string(model.num_classes()));
  }
  if (share != nullptr) {
    if (share->empty()) return Status(StatusCode::kFailedPrecondition, "device '" + config.device_id + "' got no examples");
    for (uint32_t i : *share) {
      if (i >= data.count) return OutOfRange("share index " + std::to_string(i) + " is past the data");
    }
  }
  FrameLimits limits;
  limits.max_frame_bytes = config.max_frame_bytes;
  FEDRT_RETURN_IF_ERROR(limits.Validate());
  auto state = std::make_unique<State>(config, model, data, share, crypto, std::move(hooks));
  state->limits = limits;
  const std::size_t d = model.parameter_count();
  state->global.assign(d, 0.0f);
  state->sgd_state.assign(Sgd::StateFloats(SgdOptions(), d), 0.0f);
  return std::unique_ptr<DeviceClient>(new DeviceClient(std::move(state)));
}

bool DeviceClient::joined() const { return state_->joined; }
uint64_t DeviceClient::joins() const { return state_->joins; }
bool DeviceClient::has_work() const { return state_->round_ready; }
bool DeviceClient::finished() const { return state_->finished; }
uint64_t DeviceClient::round() const { return state_->plan.round; }
uint32_t DeviceClient::sender_id() const { return state_->sender_id; }
std::size_t DeviceClient::parameter_count() const { return state_->d(); }
std::size_t DeviceClient::examples() const {
  return state_->share != nullptr ? state_->share->size() : state_->data.count;
}

Status DeviceClient::RestoreResidual(const float* residual, std::size_t d) {
  if (d != state_->d()) {
    return Status(StatusCode::kFailedPrecondition, "the saved residual has " + std::to_string(d) +
                                                       " values, the model " + std::to_string(state_->d()));
  }
  if (!CheckFinite(residual, d).ok()) return Corrupt("the saved residual is not finite");
  // The error-feedback wrapper starts from zero: keep the saved residual
  // beside it and add it to the first delta.
  state_->restored_residual.assign(residual, residual + d);
  return Status::Ok();
}

Status DeviceClient::Start(Connection& link) {
  State& s = *state_;
  OnDisconnected();
  s.join = std::make_unique<JoinClient>(s.config.device_id, s.config.key, s.crypto, s.limits);
  JoinRequest request;
  request.codecs = CodecNames();
  request.isa = IsaName(ActiveIsa());
  request.max_frame_bytes = s.limits.max_frame_bytes;
  request.resume_round = s.next_round;
  request.model_round = s.model_round;
  Result<OutFrame> frame = s.join->Start(request);
  if (!frame.ok()) return frame.status();
  return link.Send(*frame);
}

void DeviceClient::OnDisconnected() {
  State& s = *state_;
  s.join.reset();
  s.joined = false;
  s.model_bytes.reset();
  s.round_ready = false;
  s.trained = false;
  s.pass.reset();
  s.sgd.reset();
}

Status DeviceClient::OnFrame(Connection& link, const Frame& frame) {
  State& s = *state_;
  if (!s.joined) {
    if (!s.join) return Status(StatusCode::kFailedPrecondition, "a frame before Start()");
    Result<OutFrame> reply = s.join->OnFrame(frame);
    if (!reply.ok()) return reply.status();
    if (!reply->empty()) return link.Send(*reply);
    s.joined = true;
    ++s.joins;
    // The aggregator has proved it holds the key: full-size frames from now
    // on (a host that gave this side the aggregator's pre-join limit, such as
    // a MemoryPipe, needs this).
    link.LiftInitialFrameLimit();
    Log(LogLevel::kInfo, "device %s: joined at round %llu", s.config.device_id.c_str(),
        static_cast<unsigned long long>(s.join->result().current_round));
    return Status::Ok();
  }
  switch (frame.kind()) {
    case MessageKind::kRoundInstructions:
      return s.OnInstructions(link, frame);
    case MessageKind::kLeave: {
      Result<LeaveMessage> leave = DecodeLeave(frame);
      Log(LogLevel::kInfo, "device %s: the aggregator ended the training (%s)", s.config.device_id.c_str(),
          leave.ok() ? std::string(leave->reason).c_str() : "no reason");
      s.finished = true;
      s.round_ready = false;
      return Status::Ok();
    }
    case MessageKind::kError: {
      Result<ErrorMessage> error = DecodeError(frame);
      if (error.ok()) {
        Log(LogLevel::kWarning, "device %s: the aggregator reports %s", s.config.device_id.c_str(),
            ToStatus(*error).ToString().c_str());
      }
      return Status::Ok();
    }
    default:
      return Status::Ok();  // acks and anything else this device does not need
  }
}

Status DeviceClient::State::OnInstructions(Connection& link, const Frame& frame) {
  Result<RoundInstructionsMessage> m = DecodeRoundInstructions(frame, limits);
  if (!m.ok()) return m.status();
  if (m->payload.index == 0) {
    if (m->model_parameters != d()) {
      return Status(StatusCode::kFailedPrecondition, "the aggregator's model has " +
                                                         std::to_string(m->model_parameters) +
                                                         " parameters, this device's " + std::to_string(d()));
    }
    // A compressed delta is at most a codec's worst case, below twice the fp32 model.
    model_encoding = m->model_encoding;
    const bool full = model_encoding == ModelEncoding::kFullModelFp32;
    model_bytes = std::make_unique<Reassembler>(d() * sizeof(float) * (full ? 1 : 2) + (full ? 0 : 65536));
    plan.round = m->round_id;
    plan.codec_spec.assign(m->codec_spec.data(), m->codec_spec.size());  // keeps its capacity
    plan.session_seed = m->session_seed;
    plan.epochs = std::max<uint32_t>(1, m->local_epochs);
    plan.steps = m->local_steps;
    plan.lr = m->learning_rate;
    plan.level_table_version = m->level_table_version;
    plan.level_table.assign(m->level_table, m->level_table + m->level_table_size);
    round_ready = false;
    trained = false;
    pass.reset();
  } else if (!model_bytes || m->round_id != plan.round) {
    return Corrupt("a model chunk without its first chunk");
  }
  FEDRT_RETURN_IF_ERROR(model_bytes->Add(m->payload));
  if (!model_bytes->complete()) return Status::Ok();
  Status applied = ApplyModel();
  model_bytes.reset();
  if (!applied.ok()) {
    // A reconnect gets the full model; a bad one is the aggregator's fault.
    if (applied.code() == StatusCode::kFailedPrecondition) return Status(StatusCode::kUnavailable, applied.message());
    return applied;
  }
  AckMessage ack;
  ack.round_id = plan.round;
  ack.acked = MessageKind::kRoundInstructions;
  Result<OutFrame> out = Encode(ack, limits);
  if (out.ok()) (void)link.Send(*out);
  round_ready = true;
  ready_ms = config.clock != nullptr ? config.clock->NowMs() : 0;
  epoch = 0;
  loss = 0;
  return Status::Ok();
}

// The aggregator's broadcast, once complete: the full model, or a delta
// compressed with the codec its payload names, added to the previous round's
// model exactly as the aggregator adds it to its copy.
Status DeviceClient::State::ApplyModel() {
  // The next model is built in the model's parameters (training copies
  // `global` into them before it starts anyway) and becomes `global` only
  // once it is complete and finite; a bad one leaves the previous global
  // model in both.
  float* next = model.parameters();
  if (model_encoding == ModelEncoding::kFullModelFp32) {
    if (model_bytes->size() != d() * sizeof(float)) return Corrupt("the global model has the wrong size");
    std::memcpy(next, model_bytes->data(), d() * sizeof(float));
  } else {
    if (model_round < 0 || model_round + 1 != static_cast<int64_t>(plan.round)) {
      return Status(StatusCode::kFailedPrecondition, "a model delta for round " + std::to_string(plan.round) +
                                                         " without the model of the round before");
    }
    // The reassembled bytes are in memory, so their count fits a size_t.
    const std::size_t delta_size = static_cast<std::size_t>(model_bytes->size());
    Result<PayloadView> view = ParsePayload(model_bytes->data(), delta_size);
    if (!view.ok()) return view.status();
    Result<Codec*> codec = delta_codec.For(view->spec, d());
    if (!codec.ok()) return codec.status();
    if ((*codec)->needs_side_info()) return InvalidArgument("a model delta in '" + std::string(view->spec) + "'");
    CodecContext context;
    context.session_seed = plan.session_seed;
    context.round = static_cast<uint32_t>(plan.round);
    context.sender_id = 0xFFFFFFu;  // the aggregator's broadcast
    std::memcpy(next, global.data(), d() * sizeof(float));
    const Status decoded = (*codec)->DecodeAccumulate(model_bytes->data(), delta_size, context, 1.0f, next, d());
    if (!decoded.ok()) {
      std::memcpy(next, global.data(), d() * sizeof(float));
      return decoded;
    }
  }
  if (!CheckFinite(next, d()).ok()) {
    std::memcpy(next, global.data(), d() * sizeof(float));
    return Corrupt("the global model is not finite");
  }
  std::memcpy(global.data(), next, d() * sizeof(float));
  model_round = static_cast<int64_t>(plan.round);
  if (hooks.on_model) hooks.on_model(static_cast<uint32_t>(plan.round), global.data(), d());
  return Status::Ok();
}

Status DeviceClient::Work(Connection& link, uint32_t max_steps) {
  State& s = *state_;
  if (!s.round_ready) return Status::Ok();
  if (!s.trained) return s.Train(max_steps);
  return s.EncodeAndSend(link);
}

Status DeviceClient::State::Train(uint32_t max_steps) {
  if (!sgd) {
    std::memcpy(model.parameters(), global.data(), d() * sizeof(float));
    SgdOptions sgd_options;
    sgd_options.schedule.base_lr = plan.lr;
    Result<Sgd> created = Sgd::CreateInBuffer(sgd_options, d(), {sgd_state.data(), sgd_state.size()});
    if (!created.ok()) return created.status();
    sgd = std::make_unique<Sgd>(std::move(*created));
  }
  std::size_t left = max_steps;
  while (epoch < plan.epochs && (max_steps == 0 || left > 0)) {
    if (!pass) {
      TrainOptions train;
      train.batch = config.batch;
      train.seed = config.shuffle_seed;
      train.subset = share;
      train.max_steps = plan.steps;
      Result<TrainingPass> started = TrainingPass::Start(model, data, plan.round * 64 + epoch, train);
      if (!started.ok()) return started.status();
      pass = std::make_unique<TrainingPass>(std::move(*started));
    }
    const std::size_t before = pass->stats().steps;
    FEDRT_RETURN_IF_ERROR(pass->Run(model, *sgd, max_steps == 0 ? 0 : left));
    if (max_steps != 0) left -= std::min(left, pass->stats().steps - before);
    if (!pass->done()) break;
    loss = pass->stats().loss;
    pass.reset();
    ++epoch;
  }
  if (epoch < plan.epochs) return Status::Ok();
  sgd.reset();
  trained = true;
  if (hooks.on_trained) hooks.on_trained(static_cast<uint32_t>(plan.round));
  return Status::Ok();
}

// The instructed codec. For ALQ / AMQ: with the instructed level table
// installed, its version in *version, and the statistics of the vector about
// to be encoded (delta, plus the residual with error feedback) in
// *statistics, for the aggregator's next fit.
Result<Codec*> DeviceClient::State::InstructedCodec(LevelStatisticsMessage* statistics, uint32_t* version) {
  const std::string_view name = std::string_view(plan.codec_spec).substr(0, plan.codec_spec.find(':'));
  if (name != "alq" && name != "amq") return update_codec.For(plan.codec_spec, d());
  Result<std::unique_ptr<AdaptiveCodec>> adaptive = MakeAdaptiveCodec(plan.codec_spec);
  if (!adaptive.ok()) return adaptive.status();
  AdaptiveCodec& codec = **adaptive;
  if (!plan.level_table.empty()) {
    LevelTable table;
    table.version = plan.level_table_version;
    table.levels = plan.level_table;
    const Status installed = codec.SetLevelTable(table);
    if (!installed.ok()) return Corrupt("the instructed level table: " + installed.message());
  } else if (plan.level_table_version != 0) {
    return Corrupt("the instructions name level table version " + std::to_string(plan.level_table_version) +
                   " without the table");
  }
  *version = codec.level_table().version;
  const float* delta = model.gradients();
  const float* vector = delta;
  if (codec.wants_error_feedback()) {
    measured.resize(d());
    const float* residual = Feedback().residual();
    for (std::size_t i = 0; i < d(); ++i) measured[i] = delta[i] + residual[i];
    vector = measured.data();
  }
  // Measured tensor by tensor, as the update is encoded (buckets never span
  // two tensors); the merge is exact.
  Result<LevelStatistics> stats = LevelStatistics();
  std::size_t offset = 0;
  for (std::size_t size : UpdateTensorSizes(codec, tensor_sizes)) {
    Result<LevelStatistics> tensor = codec.MeasureLevelStatistics(vector + offset, size);
    if (!tensor.ok()) return tensor.status();
    stats->Merge(*tensor);
    offset += size;
  }
  statistics->present = true;
  statistics->count = stats->count;
  statistics->sum = stats->sum;
  statistics->sum_sq = stats->sum_sq;
  statistics->bucket_norms = stats->bucket_norms;
  for (const BucketMoments& b : stats->largest_buckets) {
    statistics->largest_buckets.push_back({b.norm, b.count, b.sum, b.sum_sq});
  }
  adaptive_codec = std::move(*adaptive);
  return static_cast<Codec*>(adaptive_codec.get());
}

// Encodes `delta` into `payload` with `codec` tensor by tensor along the
// model's tensor table (BorrowUpdateCodec: one stream, with its own scales, per
// tensor for the quantizers), through the error-feedback residual when the
// codec asks for one.
Result<std::size_t> DeviceClient::State::EncodeUpdate(Codec& codec, const float* delta, const CodecContext& context) {
  Result<std::unique_ptr<TensorSetCodec>> tensors = BorrowUpdateCodec(codec, tensor_sizes);
  if (!tensors.ok()) return tensors.status();
  TensorSetCodec& per_tensor = **tensors;
  payload.resize(per_tensor.MaxEncodedSize(d()));
  const bool with_feedback = per_tensor.wants_error_feedback();
  Result<std::size_t> size =
      with_feedback ? Feedback().Encode(per_tensor, delta, d(), context, payload.data(), payload.size())
                    : per_tensor.Encode(delta, d(), context, payload.data(), payload.size());
  if (size.ok() && with_feedback && hooks.on_residual) hooks.on_residual(feedback->residual(), d());
  return size;
}

Status DeviceClient::State::EncodeAndSend(Connection& link) {
  // Training is over: its gradient buffer holds the delta.
  const float* local = model.parameters();
  float* delta = model.gradients();
  for (std::size_t i = 0; i < d(); ++i) delta[i] = local[i] - global[i];
  if (!restored_residual.empty()) {
    for (std::size_t i = 0; i < d(); ++i) delta[i] += restored_residual[i];
    restored_residual.clear();
  }
  if (hooks.transform_update) hooks.transform_update(static_cast<uint32_t>(plan.round), delta, d());
  LevelStatisticsMessage statistics;
  uint32_t table_version = 0;
  Result<Codec*> codec = InstructedCodec(&statistics, &table_version);
  if (!codec.ok()) return codec.status();
  CodecContext context;
  context.session_seed = plan.session_seed;
  context.round = static_cast<uint32_t>(plan.round);
  context.sender_id = sender_id;
  Result<std::size_t> size = EncodeUpdate(**codec, delta, context);
  if (!size.ok()) return size.status();
  const uint64_t num_samples = share != nullptr ? share->size() : data.count;
  if (hooks.on_update) {
    hooks.on_update(static_cast<uint32_t>(plan.round), plan.codec_spec, payload.data(), *size, num_samples);
  }

  UpdateMessage update;
  update.round_id = plan.round;
  update.num_samples = num_samples;
  update.training_loss = static_cast<float>(loss);
  update.codec_spec = plan.codec_spec;
  update.level_table_version = table_version;
  update.stats.level_statistics = statistics;  // EncodeChunked keeps it in chunk 0 only
  update.stats.encoded_bytes = *size;
  update.stats.raw_bytes = d() * sizeof(float);
  if (config.clock != nullptr) {
    update.compute_ms = static_cast<uint32_t>(std::min<uint64_t>(UINT32_MAX, config.clock->NowMs() - ready_ms));
  }
  Result<std::vector<OutFrame>> frames = EncodeChunked(update, payload.data(), *size, limits);
  // The frames hold the bytes now; the payload is not kept beside the next
  // round's incoming model.
  payload = std::vector<uint8_t>();
  if (!frames.ok()) return frames.status();
  for (OutFrame& frame : *frames) FEDRT_RETURN_IF_ERROR(link.Send(std::move(frame)));
  // Send may only queue the frames: "sent" is said once they have left the
  // process (Flush), which delivers them even if it is stopped or killed next.
  FEDRT_RETURN_IF_ERROR(link.Flush(0));
  round_ready = false;
  trained = false;
  next_round = plan.round + 1;
  Log(LogLevel::kInfo, "device %s: round %llu sent %zu bytes (%s), loss %.4f", config.device_id.c_str(),
      static_cast<unsigned long long>(plan.round), *size, plan.codec_spec.c_str(), loss);
  return Status::Ok();
}

void DeviceConnectionHandler::OnFrame(Connection& connection, Frame frame) {
  if (!error_.ok()) return;
  const Status handled = device_.OnFrame(connection, frame);
  if (!handled.ok()) {
    error_ = handled;
    connection.Abort(handled, /*notify_peer=*/true);
  }
}

void DeviceConnectionHandler::OnClose(Connection&, const Status& reason) {
  closed_ = true;
  close_reason_ = reason;
  device_.OnDisconnected();
}

Status RunDeviceSession(DeviceClient& device, const DeviceIo& io, const Clock& clock,
                        const DeviceSessionOptions& options, const std::function<bool()>& stop) {
  if (!io.send || !io.receive) return InvalidArgument("a device session needs send and receive functions");
  auto handler = std::make_shared<DeviceConnectionHandler>(device);
  ConnectionOptions connection_options;
  connection_options.heartbeat_interval_ms = options.heartbeat_interval_ms;
  connection_options.idle_timeout_ms = options.idle_timeout_ms;
  Result<std::shared_ptr<StreamConnection>> created =
      StreamConnection::Create("aggregator", io.send, handler, connection_options, clock);
  if (!created.ok()) return created.status();
  StreamConnection& link = **created;
  link.Open();
  const auto end = [&](Status status) {
    if (!link.closed()) link.Abort(status, status.code() != StatusCode::kCancelled);
    device.OnDisconnected();
    return status;
  };
  FEDRT_RETURN_IF_ERROR(device.Start(link));
  const uint64_t join_deadline = clock.NowMs() + options.join_timeout_ms;
  uint8_t buffer[4096];
  while (true) {
    if (!handler->error().ok()) return end(handler->error());
    if (device.finished()) {
      link.Close();
      device.OnDisconnected();
      return Status::Ok();
    }
    if (handler->closed()) {
      const Status& reason = handler->close_reason();
      return end(reason.ok() ? Status(StatusCode::kUnavailable, "the connection closed") : reason);
    }
    if (stop && stop()) return end(Status(StatusCode::kCancelled, "stopped"));
    const uint32_t wait = link.Poll();
    if (link.closed()) continue;  // the handler has the reason, or the device finished
    if (!device.joined() && clock.NowMs() > join_deadline) {
      return end(Status(StatusCode::kDeadlineExceeded, "the join did not complete in time"));
    }
    if (device.has_work()) {
      const Status worked = device.Work(link, options.steps_per_slice);
      if (!worked.ok()) return end(worked);
    }
    // While training, only look at the link; otherwise wait for bytes.
    Result<std::size_t> got = io.receive(buffer, sizeof(buffer), device.has_work() ? 0 : std::min<uint32_t>(wait, 200));
    if (!got.ok()) {
      link.OnStreamClosed(got.status().code() == StatusCode::kUnavailable ? Status::Ok() : got.status());
      continue;
    }
    if (*got > 0) (void)link.Receive(buffer, *got);  // a bad frame closes the link; the handler has it
  }
}

}  // namespace fedrt
