// The star device engine (contract in fedrt/runtime/device_client.h).
#include "fedrt/runtime/device_client.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <optional>
#include <utility>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/error_feedback.h"
#include "fedrt/codecs/level_fit.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/codecs/tensor_set.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/platform/log.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/runtime/trainer.h"
#include "fedrt/transport/chunking.h"
#include "fedrt/transport/join.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/stream.h"
#include "common/block_carver.h"
#include "fedrt/platform/concat.h"

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
  std::string codec_spec;            // reserved for kMaxCodecSpecBytes at creation
  uint64_t session_seed = 0;
  uint32_t epochs = 1;
  uint32_t steps = 0;
  float lr = 0.05f;
  uint32_t level_table_version = 0;  // ALQ / AMQ: the table to encode with
  std::vector<float> level_table;    // empty: the codec's initial table (version 0); reserved
};

namespace {

constexpr std::size_t kArenaAlignment = kBlockAlignment;

// What the codecs a device accepts need: the largest update payload (or
// downlink delta), codec storage, and whether any asks for error feedback or
// adaptive levels.
struct CodecNeeds {
  std::size_t payload_bytes = 0;
  std::size_t storage_bytes = 0;
  std::size_t storage_alignment = alignof(std::max_align_t);
  bool error_feedback = false;
  bool adaptive = false;
};

Result<CodecNeeds> MeasureCodecs(const DeviceClientConfig& config, const Model& model) {
  const std::size_t d = model.parameter_count();
  const std::vector<std::size_t> tensors = ModelTensorSizes(model);
  const std::vector<std::string> specs = config.codecs.empty() ? DefaultDeviceCodecs() : config.codecs;
  CodecNeeds needs;
  for (const std::string& spec : specs) {
    Result<CodecFootprint> footprint = CodecFootprintFor(spec, d);
    Result<std::unique_ptr<Codec>> codec = footprint.ok() ? MakeCodec(spec) : footprint.status();
    if (!codec.ok()) {
      return Status(codec.status().code(), Concat({"device codec '", spec, "': ", codec.status().message()}));
    }
    Result<std::unique_ptr<TensorSetCodec>> update = BorrowUpdateCodec(**codec, tensors);
    if (!update.ok()) return update.status();
    // The device's codecs are built in its codec storage with working space
    // for d coordinates (CodecSlot), where they stage: the payload buffer
    // holds just the payload (MaxPayloadSize).
    needs.payload_bytes = std::max({needs.payload_bytes, (*update)->MaxPayloadSize(d), (*codec)->MaxPayloadSize(d)});
    needs.storage_bytes = std::max(needs.storage_bytes, footprint->size);
    needs.storage_alignment = std::max(needs.storage_alignment, footprint->alignment);
    needs.error_feedback = needs.error_feedback || ((*codec)->wants_error_feedback() && !config.residual_memory);
    needs.adaptive = needs.adaptive || AsAdaptiveCodec(codec->get()) != nullptr;
  }
  if (needs.storage_bytes == 0) return InvalidArgument("the device accepts no codec of this build");
  return needs;
}

// Building memory of an update's first frame (fields, spec, ALQ / AMQ
// statistics) and of the others (fields only).
constexpr std::size_t kFrameHeadBytes = 1024;
std::size_t FirstFrameBytes(bool adaptive) {
  return kFrameHeadBytes + (adaptive ? transport::kMaxLevelStatisticsNorms * sizeof(float) +
                                           transport::kMaxLevelStatisticsBuckets * 40
                                     : 0);
}

}  // namespace

std::vector<std::string> DefaultDeviceCodecs() {
  std::vector<std::string> specs;
  for (const std::string& name : CodecNames()) {
    if (MakeCodec(name).ok()) specs.push_back(name);
  }
  return specs;
}

// The instructed and downlink codecs take turns in one storage: each is
// built in place (ConstructCodec, no allocation) when the other, or another
// spec, was there.
class CodecSlot {
 public:
  CodecSlot() = default;
  CodecSlot(const CodecSlot&) = delete;
  CodecSlot& operator=(const CodecSlot&) = delete;
  ~CodecSlot() { DestroyCodec(codec_); }

  void Bind(unsigned char* storage, std::size_t size) {
    storage_ = storage;
    size_ = size;
    spec_.reserve(kMaxCodecSpecBytes);
  }

  // The codec for `spec`, with working space for `d` coordinates; *built
  // says whether it was made now (in its initial state).
  Result<Codec*> For(std::string_view spec, std::size_t d, bool* built = nullptr) {
    if (built != nullptr) *built = false;
    if (codec_ != nullptr && spec == spec_) return codec_;
    if (built != nullptr) *built = true;
    DestroyCodec(codec_);
    codec_ = nullptr;
    spec_.clear();
    Result<Codec*> made = ConstructCodec(spec, d, storage_, size_);
    if (!made.ok()) {
      Result<CodecFootprint> footprint = CodecFootprintFor(spec, d);
      if (footprint.ok() && footprint->size > size_) {
        return Status(StatusCode::kResourceExhausted,
                      Concat({"codec '", spec, "' needs ", footprint->size, " bytes of storage, this device has ",
                              size_, " (DeviceClientConfig::codecs sizes it)"}));
      }
      return made.status();
    }
    codec_ = *made;
    if (spec.size() <= kMaxCodecSpecBytes) spec_.assign(spec.data(), spec.size());
    return codec_;
  }

 private:
  unsigned char* storage_ = nullptr;
  std::size_t size_ = 0;
  std::string spec_;  // as instructed (the cache key)
  Codec* codec_ = nullptr;
};

struct DeviceClient::State {
  State(const DeviceClientConfig& c, Model& m, const DataView& v, const std::vector<uint32_t>* s, Crypto& cr,
        DeviceHooks h)
      : config(c), model(m), data(v), share(s), crypto(cr), hooks(std::move(h)),
        sender_id(DeviceSenderId(c.device_id)), tensor_sizes(ModelTensorSizes(m)),
        d(m.parameter_count()) {}
  ~State() {
    for (std::size_t i = 0; i < frame_capacity; ++i) {
      frames[i].~OutFrame();
      slots[i].~FrameSlot();
    }
  }

  Status OnInstructions(Connection& link, const Frame& frame);
  Status ApplyModel();
  Status Train(uint32_t max_steps);
  Status EncodeAndSend(Connection& link);
  Result<Codec*> InstructedCodec(uint32_t* version);
  Status MeasureStatistics(AdaptiveCodec& codec, const float* vector);
  Codec& OverTensorTable(Codec& inner);
  Result<std::size_t> EncodeUpdate(Codec& codec, float* delta, const CodecContext& context);
  void SendAck(Connection& link);
  // The error-feedback residual: the block's, or once asked for, the one
  // config.residual_memory gives; false when there is none.
  bool HaveFeedback();

  DeviceClientConfig config;
  Model& model;
  DataView data;
  const std::vector<uint32_t>* share;
  Crypto& crypto;
  DeviceHooks hooks;
  const uint32_t sender_id;
  const std::vector<std::size_t> tensor_sizes;  // the model's tensor table (lengths)
  const std::size_t d;
  FrameLimits limits;

  // In the client's block (Carve): model-sized `global` (and the residual
  // with error feedback), the payload, the codec storage, the training
  // pass's memory, the optimizer state, the frames of an update.
  float* global = nullptr;            // the global model of model_round
  uint8_t* payload = nullptr;         // the encoded update; a compressed downlink delta
  std::size_t payload_capacity = 0;
  float* sgd_state = nullptr;
  std::size_t sgd_floats = 0;
  TrainingPassMemory pass_memory;
  transport::FrameSlot* slots = nullptr;  // one per chunk of the largest update
  OutFrame* frames = nullptr;
  std::size_t frame_capacity = 0;
  CodecSlot codec;
  std::optional<ErrorFeedback> feedback;  // on the residual in the block, or config.residual_memory's
  bool residual_pending = false;      // a restored residual not yet sent with an update
  std::unique_ptr<TensorSetCodec> per_tensor;  // the model's tensor table, rebound per codec
  std::optional<transport::FrameSlot> ack_slot;
  bool adaptive = false;              // a codec it accepts has level tables (alq, amq)

  std::unique_ptr<JoinClient> join;   // the join in progress on this connection
  bool joined = false;
  uint64_t joins = 0;
  bool finished = false;
  std::string redirect;  // a redirect Leave's HOST:PORT (cleared by Start)
  std::string outgrown_spec;  // an instructed spec the block could not hold (outgrown_spec())
  uint64_t next_round = 0;            // the round the device expects next (announced when joining)
  int64_t model_round = -1;           // round whose global model `global` holds

  // The round being received, trained, then sent.
  RoundPlan plan;
  ChunkSequence model_chunks{0};      // the instructions' payload, written where it belongs as it arrives
  ModelEncoding model_encoding = ModelEncoding::kFullModelFp32;
  bool round_ready = false;           // instructions complete: training to do
  uint64_t ready_ms = 0;              // config.clock: when they were (compute_ms counts from it)
  bool trained = false;               // training done: the update is to be sent
  std::optional<Sgd> sgd;
  std::optional<TrainingPass> pass;
  uint32_t epoch = 0;
  double loss = 0;

  // ALQ / AMQ, kept with their memory from round to round.
  LevelTable level_table;
  LevelTable initial_table;           // the codec's version 0, for rounds that instruct none
  LevelStatistics tensor_statistics, statistics;
  UpdateMessage update;
};

namespace {

// The block's layout: the client object (CreateIn only), its state, then
// the pieces. The same function measures (null base) and places.
struct Layout {
  DeviceClient* client = nullptr;
  DeviceClient::State* state = nullptr;
  float* global = nullptr;
  float* residual = nullptr;
  float* sgd_state = nullptr;
  uint8_t* payload = nullptr;
  unsigned char* codec_storage = nullptr;
  uint32_t* order = nullptr;
  float* features = nullptr;
  uint8_t* labels = nullptr;
  transport::FrameSlot* slots = nullptr;
  OutFrame* frames = nullptr;
  std::size_t used = 0;
};

struct Sizes {
  std::size_t d = 0;
  std::size_t sgd_floats = 0;
  CodecNeeds codecs;
  TrainingPassMemory pass;
  std::size_t frames = 0;
};

Result<Sizes> MeasureDevice(const DeviceClientConfig& config, const Model& model, std::size_t examples) {
  Sizes sizes;
  sizes.d = model.parameter_count();
  sizes.sgd_floats = Sgd::StateFloats(SgdOptions(), sizes.d);
  Result<CodecNeeds> codecs = MeasureCodecs(config, model);
  if (!codecs.ok()) return codecs.status();
  sizes.codecs = *codecs;
  sizes.pass = TrainingPassMemory::For(examples, model.input_size(), std::max(config.batch, 1));
  FrameLimits limits;
  limits.max_frame_bytes = config.max_frame_bytes;
  FEDRT_RETURN_IF_ERROR(limits.Validate());
  Result<ChunkPlan> plan = ChunkPlan::Make(sizes.codecs.payload_bytes, limits.MaxChunkBytes());
  if (!plan.ok()) return plan.status();
  sizes.frames = plan->count();
  return sizes;
}

Layout Carve(unsigned char* base, const Sizes& sizes, bool with_client) {
  Carver carve(base);
  Layout l;
  if (with_client) l.client = carve.Take<DeviceClient>(1);
  l.state = carve.Take<DeviceClient::State>(1);
  l.global = carve.Take<float>(sizes.d, kArenaAlignment);
  if (sizes.codecs.error_feedback) l.residual = carve.Take<float>(sizes.d, kArenaAlignment);
  l.sgd_state = carve.Take<float>(sizes.sgd_floats, kArenaAlignment);
  l.payload = carve.Take<uint8_t>(sizes.codecs.payload_bytes, kArenaAlignment);
  l.codec_storage = carve.Take<unsigned char>(sizes.codecs.storage_bytes, sizes.codecs.storage_alignment);
  l.order = carve.Take<uint32_t>(sizes.pass.order_capacity);
  l.features = carve.Take<float>(sizes.pass.features_capacity, kArenaAlignment);
  l.labels = carve.Take<uint8_t>(sizes.pass.labels_capacity);
  l.slots = carve.Take<transport::FrameSlot>(sizes.frames);
  l.frames = carve.Take<OutFrame>(sizes.frames);
  l.used = carve.used();
  return l;
}

// Checks the inputs Create and CreateIn take (everything but the memory).
Status CheckInputs(const DeviceClientConfig& config, const Model& model, const DataView& data,
                   const std::vector<uint32_t>* share) {
  if (!IsValidDeviceId(config.device_id)) {
    return InvalidArgument(Concat({"device id '", config.device_id, "' is not valid"}));
  }
  if (config.key.size() < kMinKeyBytes || config.key.size() > kMaxKeyBytes) {
    return InvalidArgument(Concat({"the device key must have ", kMinKeyBytes, " to ", kMaxKeyBytes, " bytes"}));
  }
  if (config.batch <= 0) return InvalidArgument("the batch size must be positive");
  if (model.uses_caller_buffers() && config.batch > model.batch_capacity()) {
    return OutOfRange(Concat({"a batch of ", config.batch, " does not fit model '", model.spec().text,
                              "', whose buffers hold batches of up to ", model.batch_capacity()}));
  }
  FEDRT_RETURN_IF_ERROR(data.Validate());
  if (model.input_size() != data.example_size) {
    return InvalidArgument(Concat({"model '", model.spec().text, "' takes ", model.input_size(),
                                   " features, the data has ", data.example_size}));
  }
  FEDRT_RETURN_IF_ERROR(CheckClassCount(model, data.num_classes, "the data"));
  if (share != nullptr) {
    if (share->empty()) {
      return Status(StatusCode::kFailedPrecondition, Concat({"device '", config.device_id, "' got no examples"}));
    }
    for (uint32_t i : *share) {
      if (i >= data.count) return OutOfRange(Concat({"share index ", i, " is past the data"}));
    }
  }
  return Status::Ok();
}

// Builds the state in a carved block.
Result<DeviceClient::State*> Place(const Layout& l, const Sizes& sizes, const DeviceClientConfig& config, Model& model,
                                   const DataView& data, const std::vector<uint32_t>* share, Crypto& crypto,
                                   DeviceHooks hooks) {
  // A heap model grows its workspace for the batch now, not in the first round.
  FEDRT_RETURN_IF_ERROR(model.Reserve(config.batch));
  Result<std::unique_ptr<TensorSetCodec>> per_tensor = TensorSetCodec::Unbound(ModelTensorSizes(model));
  if (!per_tensor.ok()) return per_tensor.status();
  auto* s = new (l.state) DeviceClient::State(config, model, data, share, crypto, std::move(hooks));
  s->limits.max_frame_bytes = config.max_frame_bytes;
  s->per_tensor = std::move(*per_tensor);
  s->global = l.global;
  std::fill(s->global, s->global + sizes.d, 0.0f);
  if (l.residual != nullptr) s->feedback.emplace(l.residual, sizes.d);
  s->sgd_state = l.sgd_state;
  s->sgd_floats = sizes.sgd_floats;
  s->payload = l.payload;
  s->payload_capacity = sizes.codecs.payload_bytes;
  s->codec.Bind(l.codec_storage, sizes.codecs.storage_bytes);
  s->pass_memory = sizes.pass;
  s->pass_memory.order = l.order;
  s->pass_memory.features = l.features;
  s->pass_memory.labels = l.labels;
  for (std::size_t i = 0; i < sizes.frames; ++i) {
    new (&l.slots[i]) transport::FrameSlot(i == 0 ? FirstFrameBytes(sizes.codecs.adaptive) : kFrameHeadBytes);
    new (&l.frames[i]) OutFrame();
  }
  s->slots = l.slots;
  s->frames = l.frames;
  s->frame_capacity = sizes.frames;
  s->ack_slot.emplace(kFrameHeadBytes);
  s->plan.codec_spec.reserve(kMaxCodecSpecBytes);
  s->adaptive = sizes.codecs.adaptive;
  if (sizes.codecs.adaptive) {
    // 16 KiB: only a device that accepts alq or amq holds a level table.
    s->plan.level_table.reserve(kMaxLevelTableSize);
    s->level_table.levels.reserve(kMaxLevelTableSize);
    s->initial_table.levels.reserve(kMaxLevelTableSize);
    for (LevelStatistics* stats : {&s->tensor_statistics, &s->statistics}) {
      stats->bucket_norms.reserve(2 * kMaxBucketNorms + 1);
      stats->largest_buckets.reserve(8 * kMaxMixtureBuckets + 1);
    }
    s->update.stats.level_statistics.bucket_norms.reserve(kMaxBucketNorms);
    s->update.stats.level_statistics.largest_buckets.reserve(kMaxMixtureBuckets);
  }
  return s;
}

}  // namespace

DeviceClient::DeviceClient(State* state, std::unique_ptr<unsigned char[]> block)
    : state_(state), block_(std::move(block)) {}

DeviceClient::~DeviceClient() { state_->~State(); }

namespace {

// The inputs checked and the block measured: what Create and CreateIn share.
struct Prepared {
  Sizes sizes;
  std::size_t bytes = 0;  // at any alignment
};

Result<Prepared> Prepare(const DeviceClientConfig& config, const Model& model, const DataView& data,
                         const std::vector<uint32_t>* share, bool with_client) {
  FEDRT_RETURN_IF_ERROR(CheckInputs(config, model, data, share));
  Result<Sizes> sizes = MeasureDevice(config, model, share != nullptr ? share->size() : data.count);
  if (!sizes.ok()) return sizes.status();
  Prepared p;
  p.sizes = *sizes;
  p.bytes = Carve(nullptr, p.sizes, with_client).used + kArenaAlignment - 1;
  return p;
}


}  // namespace

Result<std::size_t> DeviceClient::RequiredBytes(const DeviceClientConfig& config, const Model& model,
                                                std::size_t examples) {
  Result<Sizes> sizes = MeasureDevice(config, model, examples);
  if (!sizes.ok()) return sizes.status();
  return Carve(nullptr, *sizes, true).used + kArenaAlignment - 1;
}

Result<DeviceClient*> DeviceClient::CreateIn(void* memory, std::size_t size, const DeviceClientConfig& config,
                                             Model& model, const DataView& data, const std::vector<uint32_t>* share,
                                             Crypto& crypto, DeviceHooks hooks) {
  Result<Prepared> prepared = Prepare(config, model, data, share, true);
  if (!prepared.ok()) return prepared.status();
  if (memory == nullptr || size < prepared->bytes) {
    return OutOfRange(Concat({"the device client needs ", prepared->bytes, " bytes of memory, it was given ",
                              memory == nullptr ? 0 : size}));
  }
  const Layout l = Carve(AlignedBlock(memory), prepared->sizes, true);
  Result<State*> state = Place(l, prepared->sizes, config, model, data, share, crypto, std::move(hooks));
  if (!state.ok()) return state.status();
  return new (l.client) DeviceClient(*state, nullptr);
}

void DeviceClient::Destroy(DeviceClient* client) {
  if (client != nullptr) client->~DeviceClient();
}

Result<std::unique_ptr<DeviceClient>> DeviceClient::Create(const DeviceClientConfig& config, Model& model,
                                                           const DataView& data, const std::vector<uint32_t>* share,
                                                           Crypto& crypto, DeviceHooks hooks) {
  Result<Prepared> prepared = Prepare(config, model, data, share, false);
  if (!prepared.ok()) return prepared.status();
  std::unique_ptr<unsigned char[]> block(new (std::nothrow) unsigned char[prepared->bytes]);
  if (block == nullptr) {
    return Status(StatusCode::kResourceExhausted,
                  Concat({"cannot allocate the device client's ", prepared->bytes, " bytes"}));
  }
  const Layout l = Carve(AlignedBlock(block.get()), prepared->sizes, false);
  Result<State*> state = Place(l, prepared->sizes, config, model, data, share, crypto, std::move(hooks));
  if (!state.ok()) return state.status();
  return std::unique_ptr<DeviceClient>(new DeviceClient(*state, std::move(block)));
}

bool DeviceClient::joined() const { return state_->joined; }
uint64_t DeviceClient::joins() const { return state_->joins; }
bool DeviceClient::has_work() const { return state_->round_ready; }
bool DeviceClient::finished() const { return state_->finished; }
const std::string& DeviceClient::redirect() const { return state_->redirect; }
const std::string& DeviceClient::outgrown_spec() const { return state_->outgrown_spec; }
uint64_t DeviceClient::round() const { return state_->plan.round; }
uint32_t DeviceClient::sender_id() const { return state_->sender_id; }
std::size_t DeviceClient::parameter_count() const { return state_->d; }
std::size_t DeviceClient::examples() const {
  return state_->share != nullptr ? state_->share->size() : state_->data.count;
}

uint8_t* DeviceClient::ReceiveBuffer(std::size_t size) {
  State& s = *state_;
  // Training reads and writes the gradients, and the update is formed in
  // them, from the instructions' completion until the update is sent.
  if (s.round_ready || size > s.d * sizeof(float)) return nullptr;
  auto* gradients = reinterpret_cast<uint8_t*>(s.model.gradients());
  return reinterpret_cast<std::uintptr_t>(gradients) % 16 == 0 ? gradients : nullptr;
}

bool DeviceClient::State::HaveFeedback() {
  if (!feedback && config.residual_memory) {
    float* memory = config.residual_memory(d);
    if (memory != nullptr) feedback.emplace(memory, d);  // zeroed
  }
  return feedback.has_value();
}

Status DeviceClient::RestoreResidual(const float* residual, std::size_t d) {
  State& s = *state_;
  if (d != s.d) {
    return Status(StatusCode::kFailedPrecondition, Concat({"the saved residual has ", d, " values, the model ", s.d}));
  }
  if (!s.HaveFeedback()) {
    return Status(StatusCode::kFailedPrecondition,
                  "this device accepts no codec with error feedback (DeviceClientConfig::codecs): no residual to restore");
  }
  if (!CheckFinite(residual, d).ok()) return Corrupt("the saved residual is not finite");
  // Sent with the next update: through error feedback, or added to the
  // delta by a codec without it.
  std::memcpy(s.feedback->mutable_residual(), residual, d * sizeof(float));
  s.residual_pending = true;
  return Status::Ok();
}

Status DeviceClient::Start(Connection& link) {
  State& s = *state_;
  OnDisconnected();
  s.redirect.clear();
  s.join = std::make_unique<JoinClient>(s.config.device_id, s.config.key, s.crypto, s.limits);
  JoinRequest request;
  if (s.config.codecs.empty()) {
    request.codecs = CodecNames();
  } else {
    for (const std::string& spec : s.config.codecs) {
      std::string name = spec.substr(0, spec.find(':'));
      if (std::find(request.codecs.begin(), request.codecs.end(), name) == request.codecs.end()) {
        request.codecs.push_back(std::move(name));
      }
    }
  }
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
  s.model_chunks.Reset();
  s.round_ready = false;
  s.trained = false;
  s.pass.reset();
  s.sgd.reset();
  for (std::size_t i = 0; i < s.frame_capacity; ++i) s.frames[i] = OutFrame();
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
    case MessageKind::kRoundInstructions: {
      const Status handled = s.OnInstructions(link, frame);
      if (!handled.ok()) s.model_chunks.Reset();
      return handled;
    }
    case MessageKind::kLeave: {
      Result<LeaveMessage> leave = DecodeLeave(frame);
      const std::string_view reason = leave.ok() ? leave->reason : std::string_view("no reason");
      const std::string_view redirect_prefix(kRedirectPrefix);
      if (reason.substr(0, redirect_prefix.size()) == redirect_prefix) {
        // An aggregator tier: another rank serves this device; the host joins there.
        s.redirect.assign(reason.substr(redirect_prefix.size()));
        Log(LogLevel::kInfo, "device %s: redirected to %s", s.config.device_id.c_str(), s.redirect.c_str());
        s.round_ready = false;
        link.Close();
        return Status::Ok();
      }
      Log(LogLevel::kInfo, "device %s: the aggregator ended the training (%.*s)", s.config.device_id.c_str(),
          static_cast<int>(reason.size()), reason.data());
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

// The instructions' chunks carry the global model: a full one is written
// straight into the model's parameters (the scratch of an incoming model,
// see ApplyModel), a compressed delta into the payload buffer, each chunk
// where it belongs as it arrives; nothing holds a second copy.
Status DeviceClient::State::OnInstructions(Connection& link, const Frame& frame) {
  Result<RoundInstructionsMessage> m = DecodeRoundInstructions(frame, limits);
  if (!m.ok()) return m.status();
  if (m->payload.index == 0) {
    if (m->model_parameters != d) {
      return Status(StatusCode::kFailedPrecondition,
                    Concat({"the aggregator's model has ", m->model_parameters, " parameters, this device's ", d}));
    }
    model_encoding = m->model_encoding;
    const bool full = model_encoding == ModelEncoding::kFullModelFp32;
    if (!full && m->payload.total_size > payload_capacity) {
      return Status(StatusCode::kResourceExhausted,
                    Concat({"a model delta of ", m->payload.total_size, " bytes; this device holds ", payload_capacity,
                           " (DeviceClientConfig::codecs sizes it)"}));
    }
    model_chunks = ChunkSequence(full ? d * sizeof(float) : payload_capacity);
    if (m->codec_spec.size() > kMaxCodecSpecBytes || m->level_table_size > kMaxLevelTableSize) {
      return Corrupt("round instructions with an oversized codec spec or level table");
    }
    if (m->level_table_size > 0 && !adaptive) {
      return Corrupt("round instructions with a level table for a device that accepts no alq or amq codec");
    }
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
  } else if (!model_chunks.started() || m->round_id != plan.round) {
    return Corrupt("a model chunk without its first chunk");
  }
  FEDRT_RETURN_IF_ERROR(model_chunks.Accept(m->payload));
  uint8_t* destination = model_encoding == ModelEncoding::kFullModelFp32
                             ? reinterpret_cast<uint8_t*>(model.parameters())
                             : payload;
  if (m->payload.size != 0) {
    std::memcpy(destination + m->payload.offset, m->payload.data, static_cast<std::size_t>(m->payload.size));
  }
  if (!model_chunks.complete()) return Status::Ok();
  Status applied = ApplyModel();
  model_chunks.Reset();
  if (!applied.ok()) {
    // A reconnect gets the full model; a bad one is the aggregator's fault.
    if (applied.code() == StatusCode::kFailedPrecondition) return Status(StatusCode::kUnavailable, applied.message());
    return applied;
  }
  SendAck(link);
  round_ready = true;
  ready_ms = config.clock != nullptr ? config.clock->NowMs() : 0;
  epoch = 0;
  loss = 0;
  return Status::Ok();
}

// The ack is a courtesy (the update is what counts): a failure to send it
// shows up as a closed connection.
void DeviceClient::State::SendAck(Connection& link) {
  AckMessage ack;
  ack.round_id = plan.round;
  ack.acked = MessageKind::kRoundInstructions;
  // The slot is free unless the previous ack is still queued on a slow link.
  Result<OutFrame> out = ack_slot->busy() ? Encode(ack, limits) : Encode(ack, limits, *ack_slot);
  if (out.ok()) (void)link.Send(std::move(*out));
}

// The aggregator's broadcast, once complete (in the parameters, or the
// payload buffer): the full model, or a delta compressed with the codec its
// payload names, added to the previous round's model (to zeros for a
// compressed whole model) exactly as the aggregator adds it to its copy.
Status DeviceClient::State::ApplyModel() {
  // The next model is built in the model's parameters (training copies
  // `global` into them before it starts anyway) and becomes `global` only
  // once it is complete and finite; a bad one leaves the previous global
  // model in both.
  float* next = model.parameters();
  const std::size_t bytes = static_cast<std::size_t>(model_chunks.total_size());
  if (model_encoding == ModelEncoding::kFullModelFp32) {
    if (bytes != d * sizeof(float)) {
      std::memcpy(next, global, d * sizeof(float));
      return Corrupt("the global model has the wrong size");
    }
  } else {
    const bool whole = model_encoding == ModelEncoding::kCompressedModel;  // a delta from zeros
    if (!whole && (model_round < 0 || model_round + 1 != static_cast<int64_t>(plan.round))) {
      return Status(StatusCode::kFailedPrecondition,
                    Concat({"a model delta for round ", plan.round, " without the model of the round before"}));
    }
    // The quantizers' deltas come tensor by tensor (a tensor set), as the
    // updates go up: the first part names the codec.
    Result<PayloadView> view = ParseFirstPart(payload, bytes);
    if (!view.ok()) return view.status();
    Result<Codec*> delta_codec = codec.For(view->spec, d);
    if (!delta_codec.ok()) {
      if (delta_codec.status().code() == StatusCode::kResourceExhausted) outgrown_spec = std::string(view->spec);
      return delta_codec.status();
    }
    if ((*delta_codec)->needs_side_info()) return InvalidArgument(Concat({"a model delta in '", view->spec, "'"}));
    CodecContext context;
    context.session_seed = plan.session_seed;
    context.round = static_cast<uint32_t>(plan.round);
    context.sender_id = 0xFFFFFFu;  // the aggregator's broadcast
    // Decoded in `next` itself, then added to the model it holds (to zeros
    // for a whole model).
    const Status decoded = ApplyModelDelta(OverTensorTable(**delta_codec), payload, bytes, context,
                                           whole ? nullptr : global, next, next, d);
    if (!decoded.ok()) {
      std::memcpy(next, global, d * sizeof(float));
      return decoded;
    }
  }
  if (!CheckFinite(next, d).ok()) {
    std::memcpy(next, global, d * sizeof(float));
    return Corrupt("the global model is not finite");
  }
  std::memcpy(global, next, d * sizeof(float));
  model_round = static_cast<int64_t>(plan.round);
  if (hooks.on_model) hooks.on_model(static_cast<uint32_t>(plan.round), global, d);
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
    std::memcpy(model.parameters(), global, d * sizeof(float));
    SgdOptions sgd_options;
    sgd_options.schedule.base_lr = plan.lr;
    Result<Sgd> created = Sgd::CreateInBuffer(sgd_options, d, {sgd_state, sgd_floats});
    if (!created.ok()) return created.status();
    sgd.emplace(std::move(*created));
  }
  std::size_t left = max_steps;
  while (epoch < plan.epochs && (max_steps == 0 || left > 0)) {
    if (!pass) {
      TrainOptions train;
      train.batch = config.batch;
      train.seed = config.shuffle_seed;
      train.subset = share;
      train.max_steps = plan.steps;
      Result<TrainingPass> started = TrainingPass::StartIn(model, data, plan.round * 64 + epoch, train, pass_memory);
      if (!started.ok()) return started.status();
      pass.emplace(std::move(*started));
    }
    const std::size_t before = pass->stats().steps;
    FEDRT_RETURN_IF_ERROR(pass->Run(model, *sgd, max_steps == 0 ? 0 : left));
    if (max_steps != 0) left -= std::min(left, pass->stats().steps - before);
    if (hooks.on_progress && pass->total_steps() > 0) {
      const double in_epoch = static_cast<double>(pass->stats().steps) / static_cast<double>(pass->total_steps());
      hooks.on_progress(static_cast<uint32_t>(plan.round), (static_cast<double>(epoch) + in_epoch) / plan.epochs);
    }
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

// The instructed codec, in the codec storage. For ALQ / AMQ: with the
// instructed level table installed (or its initial table, kept from when it
// was built: building an alq / amq codec allocates its configuration, so it
// is built once and given each round's table), and its version in *version.
Result<Codec*> DeviceClient::State::InstructedCodec(uint32_t* version) {
  bool built = false;
  Result<Codec*> made = codec.For(plan.codec_spec, d, &built);
  if (!made.ok()) {
    if (made.status().code() == StatusCode::kResourceExhausted) outgrown_spec = plan.codec_spec;
    return made;
  }
  AdaptiveCodec* levels = AsAdaptiveCodec(*made);
  if (levels == nullptr) return made;
  if (built) {
    initial_table.version = levels->level_table().version;
    initial_table.levels.assign(levels->level_table().levels.begin(), levels->level_table().levels.end());
  }
  if (!plan.level_table.empty()) {
    level_table.version = plan.level_table_version;
    level_table.levels.assign(plan.level_table.begin(), plan.level_table.end());
    const Status installed = levels->SetLevelTable(level_table);
    if (!installed.ok()) return Corrupt(Concat({"the instructed level table: ", installed.message()}));
  } else if (plan.level_table_version != 0) {
    return Corrupt(
        Concat({"the instructions name level table version ", plan.level_table_version, " without the table"}));
  } else if (!built) {
    FEDRT_RETURN_IF_ERROR(levels->SetLevelTable(initial_table));
  }
  *version = levels->level_table().version;
  return made;
}

// ALQ / AMQ: the statistics of the vector about to be encoded (delta, plus
// the residual with error feedback), measured tensor by tensor as the update
// is encoded (buckets never span two tensors; the merge is exact), into the
// update message for the aggregator's next fit.
Status DeviceClient::State::MeasureStatistics(AdaptiveCodec& levels, const float* vector) {
  statistics.count = statistics.sum = statistics.sum_sq = 0;
  statistics.bucket_norms.clear();
  statistics.largest_buckets.clear();
  const bool per_tensor_codec = EncodesPerTensor(levels) && tensor_sizes.size() > 1;
  std::size_t offset = 0;
  for (std::size_t t = 0; t < (per_tensor_codec ? tensor_sizes.size() : 1); ++t) {
    const std::size_t size = per_tensor_codec ? tensor_sizes[t] : d;
    FEDRT_RETURN_IF_ERROR(levels.MeasureLevelStatisticsInto(vector + offset, size, &tensor_statistics));
    statistics.Merge(tensor_statistics);
    offset += size;
  }
  LevelStatisticsMessage& out = update.stats.level_statistics;
  out.present = true;
  out.count = statistics.count;
  out.sum = statistics.sum;
  out.sum_sq = statistics.sum_sq;
  out.bucket_norms.assign(statistics.bucket_norms.begin(), statistics.bucket_norms.end());
  out.largest_buckets.clear();
  for (const BucketMoments& b : statistics.largest_buckets) out.largest_buckets.push_back({b.norm, b.count, b.sum, b.sum_sq});
  return Status::Ok();
}

// `inner` over the model's tensor table, as the aggregator's MakeUpdateCodec
// has it: tensor by tensor for the quantizers (the per-tensor wrapper,
// rebound to this codec), the codec itself (one vector) for the others.
Codec& DeviceClient::State::OverTensorTable(Codec& inner) {
  if (!EncodesPerTensor(inner) || tensor_sizes.size() <= 1) return inner;
  per_tensor->Rebind(inner);
  return *per_tensor;
}

// Encodes `delta` (p = delta + residual with error feedback, formed in
// place) into `payload` with `codec` over the model's tensor table.
Result<std::size_t> DeviceClient::State::EncodeUpdate(Codec& instructed, float* delta, const CodecContext& context) {
  Codec* encoder = &OverTensorTable(instructed);
  const std::size_t needed = encoder->MaxEncodedSize(d);  // placed for d: MaxPayloadSize
  if (needed > payload_capacity) {
    outgrown_spec = plan.codec_spec;
    return Status(StatusCode::kResourceExhausted,
                  Concat({"an update in '", plan.codec_spec, "' takes up to ", needed, " bytes; this device holds ",
                          payload_capacity, " (DeviceClientConfig::codecs sizes it)"}));
  }
  if (!instructed.wants_error_feedback()) return encoder->Encode(delta, d, context, payload, payload_capacity);
  if (!feedback) {
    outgrown_spec = plan.codec_spec;
    return Status(StatusCode::kResourceExhausted, "'" + plan.codec_spec +
                                                      "' asks for error feedback; this device holds no residual "
                                                      "(DeviceClientConfig::codecs sizes it)");
  }
  Result<std::size_t> size = feedback->EncodeSum(*encoder, delta, d, context, payload, payload_capacity);
  if (size.ok() && hooks.on_residual) hooks.on_residual(feedback->residual(), d);
  return size;
}

Status DeviceClient::State::EncodeAndSend(Connection& link) {
  // Training is over: its gradient buffer holds the delta, and with error
  // feedback p = delta + residual, the vector encoded.
  const float* local = model.parameters();
  float* delta = model.gradients();
  for (std::size_t i = 0; i < d; ++i) delta[i] = local[i] - global[i];
  if (hooks.transform_update) hooks.transform_update(static_cast<uint32_t>(plan.round), delta, d);
  uint32_t table_version = 0;
  Result<Codec*> instructed = InstructedCodec(&table_version);
  if (!instructed.ok()) return instructed.status();
  const bool with_feedback = (*instructed)->wants_error_feedback();
  if (with_feedback) (void)HaveFeedback();  // none: EncodeUpdate refuses
  if (feedback && (with_feedback || residual_pending)) {
    const float* residual = feedback->residual();
    for (std::size_t i = 0; i < d; ++i) delta[i] += residual[i];
    // Without error feedback a restored residual is sent once, then dropped.
    if (!with_feedback) feedback->Reset();
  }
  residual_pending = false;
  update.stats.level_statistics.present = false;
  if (AdaptiveCodec* levels = AsAdaptiveCodec(*instructed)) FEDRT_RETURN_IF_ERROR(MeasureStatistics(*levels, delta));
  CodecContext context;
  context.session_seed = plan.session_seed;
  context.round = static_cast<uint32_t>(plan.round);
  context.sender_id = sender_id;
  Result<std::size_t> size = EncodeUpdate(**instructed, delta, context);
  if (!size.ok()) return size.status();
  const uint64_t num_samples = share != nullptr ? share->size() : data.count;
  if (hooks.on_update) {
    hooks.on_update(static_cast<uint32_t>(plan.round), plan.codec_spec, payload, *size, num_samples);
  }

  update.round_id = plan.round;
  update.num_samples = num_samples;
  update.training_loss = static_cast<float>(loss);
  update.codec_spec = plan.codec_spec;
  update.level_table_version = table_version;
  update.stats.encoded_bytes = *size;
  update.stats.raw_bytes = d * sizeof(float);
  if (config.clock != nullptr) {
    update.compute_ms = static_cast<uint32_t>(std::min<uint64_t>(UINT32_MAX, config.clock->NowMs() - ready_ms));
  }
  // The frames borrow the payload (chunk 0 carries the statistics); it is
  // not touched again before they are written (Flush below).
  std::size_t count = 0;
  FEDRT_RETURN_IF_ERROR(EncodeChunked(update, payload, *size, limits, slots, frames, frame_capacity, &count));
  for (std::size_t i = 0; i < count; ++i) {
    const Status sent = link.Send(frames[i]);
    frames[i] = OutFrame();
    FEDRT_RETURN_IF_ERROR(sent);
  }
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

uint8_t* DeviceConnectionHandler::LendFrameStorage(Connection&, std::size_t size) {
  return device_.ReceiveBuffer(size);
}

void DeviceConnectionHandler::OnClose(Connection&, const Status& reason) {
  closed_ = true;
  close_reason_ = reason;
  device_.OnDisconnected();
}

namespace {

// Reads what the stream has (waiting up to timeout_ms) into the link. Its own
// frame, so that the read buffer is off the stack while the device trains and
// encodes (a microcontroller's stack high-water is set there).
[[gnu::noinline]] void ReceiveFromStream(const DeviceIo& io, StreamConnection& link, uint32_t timeout_ms) {
  uint8_t buffer[4096];
  Result<std::size_t> got = io.receive(buffer, sizeof(buffer), timeout_ms);
  if (!got.ok()) {
    link.OnStreamClosed(got.status().code() == StatusCode::kUnavailable ? Status::Ok() : got.status());
    return;
  }
  if (*got > 0) (void)link.Receive(buffer, *got);  // a bad frame closes the link; the handler has it
}

}  // namespace

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
    ReceiveFromStream(io, link, device.has_work() ? 0 : std::min<uint32_t>(wait, 200));
  }
}

}  // namespace fedrt
