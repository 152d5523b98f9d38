#include "scripted_aggregator.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/platform/config.h"
#include "fedrt/runtime/device_client.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/chunking.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/join.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/stream.h"

namespace {

using namespace fedrt;             // NOLINT: a test helper in the runtime's vocabulary
using namespace fedrt::transport;  // NOLINT

constexpr uint64_t kSessionSeed = 99;

class ToyCrypto final : public Crypto {
 public:
  Status RandomBytes(uint8_t* out, std::size_t size) override {
    for (std::size_t i = 0; i < size; ++i) {
      state_ = state_ * 6364136223846793005u + 1442695040888963407u;
      out[i] = static_cast<uint8_t>(state_ >> 56);
    }
    return Status::Ok();
  }
  Status HmacSha256(const uint8_t* key, std::size_t key_size, const uint8_t* message, std::size_t message_size,
                    std::array<uint8_t, kSha256Bytes>* mac) override {
    toy_hmac_sha256(nullptr, key, key_size, message, message_size, mac->data());
    return Status::Ok();
  }
  bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, std::size_t size) override {
    return std::memcmp(a, b, size) == 0;  // a test: timing does not matter
  }

 private:
  uint64_t state_ = 7;
};

Crypto& ChooseCrypto(bool system, ToyCrypto& toy) {
#if FEDRT_HAVE_OPENSSL
  if (system) return SystemCrypto();
#else
  (void)system;
#endif
  return toy;
}

}  // namespace

struct scripted_aggregator {
  scripted_aggregator_options options;
  std::string device_id, codec;
  KeyStore keys;
  ToyCrypto toy;
  FrameLimits limits;
  std::vector<float> model;

  // The connection.
  std::unique_ptr<FrameReader> reader;
  std::unique_ptr<JoinServer> join;
  bool joined = false;
  bool closed = false;
  std::vector<uint8_t> outbound;  // wire bytes not read by the device yet
  std::size_t read_at = 0;

  // The rounds.
  uint32_t round = 0;
  std::unique_ptr<Reassembler> update;
  uint32_t joins = 0, updates = 0, device_errors = 0;
  float first_loss = 0.0f, last_loss = 0.0f;  // training losses the updates reported
  std::string failure;

  void Connect() {
    reader = std::make_unique<FrameReader>(limits);
    join = std::make_unique<JoinServer>(keys, ChooseCrypto(options.system_crypto != 0, toy), limits);
    joined = false;
    closed = false;
    outbound.clear();
    read_at = 0;
    update.reset();
  }
  void Send(const Result<OutFrame>& frame) {
    if (!frame.ok()) return Fail(frame.status().ToString());
    frame->AppendWireBytes(&outbound);
  }
  void Fail(const std::string& what) {
    if (failure.empty()) failure = what;
    closed = true;
  }
  // A join that failed: the device hears why, as from fedrt serve.
  void RefuseJoin(const Status& status) {
    Result<OutFrame> error = EncodeStatus(status, limits);
    if (error.ok()) error->AppendWireBytes(&outbound);
    Fail("join: " + status.ToString());
  }
  void SendRound() {
    if (round >= options.rounds) {
      LeaveMessage leave;
      leave.reason = "script done";
      Send(Encode(leave, limits));
      return;
    }
    RoundInstructionsMessage m;
    m.round_id = round;
    m.model_parameters = model.size();
    m.codec_spec = codec;
    m.session_seed = kSessionSeed;
    m.local_epochs = 1;
    m.local_steps = options.local_steps;
    m.learning_rate = options.learning_rate;
    Result<std::vector<OutFrame>> frames = EncodeChunked(m, reinterpret_cast<const uint8_t*>(model.data()),
                                                         model.size() * sizeof(float), limits);
    if (!frames.ok()) return Fail(frames.status().ToString());
    for (const OutFrame& frame : *frames) frame.AppendWireBytes(&outbound);
  }
  // The update's payload, complete: decoded with the round's context and
  // added to the model.
  void ApplyUpdate() {
    Result<std::unique_ptr<Codec>> made = MakeCodec(codec);
    if (!made.ok()) return Fail(made.status().ToString());
    CodecContext context;
    context.session_seed = kSessionSeed;
    context.round = round;
    context.sender_id = DeviceSenderId(device_id);
    // Side information (NDQSG) is the receiver's estimate of the update:
    // zeros here, which decodes, if less exactly than a running mean.
    std::vector<float> delta(model.size()), estimate(model.size(), 0.0f);
    const Status decoded =
        (*made)->Decode(update->data(), static_cast<std::size_t>(update->size()), context, delta.data(), delta.size(),
                        (*made)->needs_side_info() ? estimate.data() : nullptr);
    if (!decoded.ok()) return Fail("the update does not decode: " + decoded.ToString());
    for (std::size_t i = 0; i < model.size(); ++i) model[i] += delta[i];
    update.reset();
    ++updates;
    ++round;
    SendRound();
  }
  void OnFrame(const Frame& frame) {
    if (closed) return;
    if (!joined) {
      JoinResult result;
      result.current_round = round;
      Result<OutFrame> reply = join->OnFrame(frame, result);
      if (!reply.ok()) return RefuseJoin(reply.status());
      Send(reply);
      if (!join->done()) return;
      joined = true;
      ++joins;
      if (options.close_after_join != 0 && joins == 1) {
        closed = true;
        return;
      }
      SendRound();
      return;
    }
    switch (frame.kind()) {
      case MessageKind::kUpdate: {
        Result<UpdateMessage> m = DecodeUpdate(frame, limits);
        if (!m.ok()) return Fail(m.status().ToString());
        if (m->round_id != round) return Fail("an update for round " + std::to_string(m->round_id));
        if (m->payload.index == 0) {
          update = std::make_unique<Reassembler>(limits.max_payload_bytes);
          if (updates == 0) first_loss = m->training_loss;
          last_loss = m->training_loss;
        }
        if (!update) return Fail("an update chunk without its first chunk");
        const Status added = update->Add(m->payload);
        if (!added.ok()) return Fail(added.ToString());
        if (update->complete()) ApplyUpdate();
        return;
      }
      case MessageKind::kError:
        ++device_errors;
        return;
      default:
        return;  // acks, heartbeats
    }
  }
};

extern "C" {

scripted_aggregator* scripted_aggregator_create(const scripted_aggregator_options* options) {
  auto a = std::make_unique<scripted_aggregator>();
  a->options = *options;
  a->device_id = options->device_id;
  a->codec = options->codec;
  std::string hex;
  static const char digits[] = "0123456789abcdef";
  for (std::size_t i = 0; i < options->key_size; ++i) {
    hex += digits[options->key[i] >> 4];
    hex += digits[options->key[i] & 15];
  }
  Result<KeyStore> keys = KeyStore::Parse(a->device_id + " " + hex + "\n");
  if (!keys.ok()) return nullptr;
  a->keys = std::move(*keys);
  // Small values that break the hidden units' symmetry, as a model's
  // initialisation does.
  a->model.resize(options->parameters);
  uint32_t state = 2024u;
  for (float& v : a->model) {
    state = state * 1664525u + 1013904223u;
    v = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.5f;
  }
  a->Connect();
  return a.release();
}

void scripted_aggregator_destroy(scripted_aggregator* aggregator) { delete aggregator; }

fedrt_status scripted_aggregator_write(scripted_aggregator* a, const uint8_t* data, size_t size) {
  if (a->closed) return FEDRT_UNAVAILABLE;
  if (a->options.silent != 0) return FEDRT_OK;
  const Status fed = a->reader->Feed(data, size, [a](Frame frame) { a->OnFrame(frame); });
  if (!fed.ok()) a->Fail("the device's bytes: " + fed.ToString());
  return FEDRT_OK;
}

fedrt_status scripted_aggregator_read(scripted_aggregator* a, uint8_t* buffer, size_t capacity, size_t* size) {
  const std::size_t n = std::min(capacity, a->outbound.size() - a->read_at);
  if (n > 0) std::memcpy(buffer, a->outbound.data() + a->read_at, n);
  a->read_at += n;
  *size = n;
  if (n == 0 && a->closed) return FEDRT_UNAVAILABLE;
  return FEDRT_OK;
}

void scripted_aggregator_reconnect(scripted_aggregator* a) { a->Connect(); }

uint32_t scripted_aggregator_joins(const scripted_aggregator* a) { return a->joins; }
uint32_t scripted_aggregator_updates(const scripted_aggregator* a) { return a->updates; }
uint32_t scripted_aggregator_device_errors(const scripted_aggregator* a) { return a->device_errors; }

float scripted_aggregator_first_loss(const scripted_aggregator* a) { return a->first_loss; }
float scripted_aggregator_last_loss(const scripted_aggregator* a) { return a->last_loss; }

const char* scripted_aggregator_failure(const scripted_aggregator* a) { return a->failure.c_str(); }

fedrt_status toy_hmac_sha256(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                             size_t message_size, uint8_t* mac) {
  (void)user;
  for (std::size_t lane = 0; lane < FEDRT_MAC_BYTES; ++lane) {
    uint32_t h = 2166136261u ^ static_cast<uint32_t>(lane);
    for (std::size_t i = 0; i < key_size; ++i) h = (h ^ key[i]) * 16777619u;
    for (std::size_t i = 0; i < message_size; ++i) h = (h ^ message[i]) * 16777619u;
    mac[lane] = static_cast<uint8_t>(h >> 24);
  }
  return FEDRT_OK;
}

}  // extern "C"
