// The C API's peer trainer: fedrt::peer::PeerTrainer (peer_trainer.h) placed
// in the caller's memory, over a stream collective context
// (stream_peer_context.h) whose bytes move through the application's
// callbacks. This file only adapts: options become PeerTrainerOptions, the
// callbacks the context's streams, Clock and Crypto, the key the join's
// KeyStore, progress a C struct. No
// training or collective logic lives here.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "capi/capi_internal.h"
#include "fedrt/fedrt.h"
#include "fedrt/runtime/collective_context.h"
#include "fedrt/runtime/peer_trainer.h"
#include "fedrt/runtime/stream_peer_context.h"
#include "fedrt/transport/frame.h"
#include "peer/formation.h"

namespace fedrt::capi {
namespace {

static_assert(FEDRT_PEER_RING == static_cast<int>(peer::PeerReduce::kDense), "pinned to PeerReduce");
static_assert(FEDRT_PEER_RING_CODEC == static_cast<int>(peer::PeerReduce::kCodec), "pinned to PeerReduce");
static_assert(FEDRT_PEER_RING_COMPRESSED == static_cast<int>(peer::PeerReduce::kCompressed), "pinned to PeerReduce");
static_assert(FEDRT_PEER_IWP == static_cast<int>(peer::PeerReduce::kIwp), "pinned to PeerReduce");
static_assert(FEDRT_PEER_GOSSIP == static_cast<int>(peer::PeerReduce::kGossip), "pinned to PeerReduce");
static_assert(FEDRT_PEER_LOCAL == static_cast<int>(peer::PeerReduce::kLocal), "pinned to PeerReduce");
static_assert(FEDRT_PEER_GRAPH_RING == static_cast<int>(peer::GossipGraph::kRing), "pinned to GossipGraph");
static_assert(FEDRT_PEER_GRAPH_TORUS == static_cast<int>(peer::GossipGraph::kTorus), "pinned to GossipGraph");

// Everything the engine takes from the C options, checked.
struct PeerSetup {
  peer::PeerTrainerOptions trainer;
  peer::ContextOptions context;
  transport::FrameLimits limits;
  uint32_t rank = 0;
  uint32_t peers = 1;
  bool keyed = false;
  transport::KeyStore keys;  // with a key: the group's key under every peer's id
};

// The bytes of a C enum field as an int, at whatever size the target gives C
// enums (int on Linux, one byte with -fshort-enums on arm-none-eabi).
template <typename Enum>
int EnumAsInt(const Enum& value) {
  std::underlying_type_t<Enum> bits{};
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<int>(bits);
}

Result<PeerSetup> SetupFrom(const fedrt_peer_options& o, const fedrt_model& model) {
  PeerSetup setup;
  if (o.peers < 1 || o.rank >= o.peers) {
    return InvalidArgument("options: rank " + std::to_string(o.rank) + " is not one of " + std::to_string(o.peers) +
                           " peers");
  }
  // The C caller may store any int in an enum field; reading a value outside
  // the enumerators as the C++ enum type is undefined, so the bytes are read
  // as an int (UBSan's check in the asan preset).
  const int reduce = EnumAsInt(o.reduce);
  if (reduce < FEDRT_PEER_RING || reduce > FEDRT_PEER_LOCAL) {
    return InvalidArgument("options: reduce " + std::to_string(reduce) + " is not a fedrt_peer_reduce");
  }
  const int graph = EnumAsInt(o.graph);
  if (graph != FEDRT_PEER_GRAPH_RING && graph != FEDRT_PEER_GRAPH_TORUS) {
    return InvalidArgument("options: graph " + std::to_string(graph) + " is not a fedrt_peer_graph");
  }
  if (graph == FEDRT_PEER_GRAPH_TORUS && reduce != FEDRT_PEER_GOSSIP) {
    return InvalidArgument("options: the torus graph applies to gossip only; the ring reduces run on the ring");
  }
  if (o.iwp_density != 0 && reduce != FEDRT_PEER_IWP) {
    return InvalidArgument("options: iwp_density applies to FEDRT_PEER_IWP only");
  }
  if (reduce == FEDRT_PEER_IWP && o.iwp_density != 0 && !(o.iwp_density > 0 && o.iwp_density <= 1)) {
    return InvalidArgument("options: iwp_density must be in (0, 1]");
  }
  if ((reduce == FEDRT_PEER_GOSSIP || reduce == FEDRT_PEER_LOCAL) &&
      (o.sgd.momentum != 0 || o.sgd.nesterov != 0 || o.sgd.weight_decay != 0 || o.sgd.clip_norm != 0)) {
    return InvalidArgument(
        "options: gossip and the local baseline take plain SGD steps at the learning rate: momentum, nesterov, "
        "weight_decay and clip_norm do not apply");
  }
  if (o.step_timeout_ms == 0) return InvalidArgument("options: step_timeout_ms must be above 0");
  if (o.batch > model.max_batch) {
    return OutOfRange("options: batch " + std::to_string(o.batch) + " is above the model's max_batch of " +
                      std::to_string(model.max_batch));
  }
  setup.rank = o.rank;
  setup.peers = o.peers;
  peer::PeerTrainerOptions& t = setup.trainer;
  t.reduce = static_cast<peer::PeerReduce>(reduce);
  if (o.codec != nullptr) t.codec = o.codec;
  t.sgd = ToSgdOptions(&o.sgd);
  t.epochs = o.epochs;
  t.batch = o.batch;
  t.seed = o.seed;
  t.max_steps = o.max_steps;
  t.evals_per_epoch = o.evals_per_epoch;
  t.chunk_floats = o.chunk_floats;
  if (o.iwp_density != 0) t.iwp.density = o.iwp_density;
  setup.context.graph = static_cast<peer::GossipGraph>(graph);
  setup.context.step_timeout_ms = o.step_timeout_ms;
  setup.limits.max_frame_bytes = o.max_frame_bytes;
  FEDRT_RETURN_IF_ERROR(setup.limits.Validate());
  if (o.key == nullptr && o.key_size != 0) {
    return InvalidArgument("options: key is NULL with key_size " + std::to_string(o.key_size));
  }
  if (o.key != nullptr) {
    // One group key: every peer proves it under its own id ("p<rank>").
    std::vector<std::string> ids(o.peers);
    std::vector<fedrt_aggregator_key> keys(o.peers);
    for (uint32_t r = 0; r < o.peers; ++r) {
      ids[r] = peer::internal::PeerId(r);
      keys[r] = fedrt_aggregator_key{ids[r].c_str(), o.key, o.key_size};
    }
    Result<transport::KeyStore> store = KeysFrom(keys.data(), keys.size());
    if (!store.ok()) return InvalidArgument("options: key: " + store.status().message());
    setup.keyed = true;
    setup.keys = std::move(*store);
    // A neighbour's join waits as long as a step waits for it.
    setup.context.join_timeout_ms = o.step_timeout_ms;
  }
  return setup;
}

// The data the trainer reads: the caller's share, or all of the examples
// (`all`, filled here, which must then live as long as the trainer).
peer::PeerData DataFrom(const fedrt_data_view& data, const uint32_t* share, std::size_t share_count,
                        std::vector<uint32_t>* all) {
  peer::PeerData d;
  d.set = ToDataView(data);
  if (share != nullptr) {
    d.share = share;
    d.share_size = share_count;
  } else {
    all->resize(data.count);
    for (std::size_t i = 0; i < data.count; ++i) (*all)[i] = static_cast<uint32_t>(i);
    d.share = all->data();
    d.share_size = all->size();
  }
  return d;
}

constexpr std::size_t kHandleAlignment = alignof(std::max_align_t);

}  // namespace
}  // namespace fedrt::capi

// Placed at the start of the caller's memory, the trainer's block after it.
// The trainer, which refers to the context, is ended first.
struct fedrt_peer {
  explicit fedrt_peer(const fedrt_peer_callbacks& c)
      : callbacks(c), clock(c.user, c.now_ms), crypto(c.user, c.random_bytes, c.hmac_sha256) {}
  ~fedrt_peer() { fedrt::peer::PeerTrainer::Destroy(trainer); }

  const fedrt_peer_callbacks callbacks;
  fedrt::capi::CallbackClock clock;
  fedrt::capi::CallbackCrypto crypto;
  fedrt::transport::KeyStore keys;     // the join's (empty without a key)
  std::vector<uint32_t> all_examples;  // the share when the caller gave none
  std::unique_ptr<fedrt::peer::CollectiveContext> context;
  fedrt::peer::PeerTrainer* trainer = nullptr;
  std::vector<uint32_t> neighbours;  // ranks with a stream, ascending
  bool ran = false;
};

namespace fedrt::capi {
namespace {

std::size_t HandleBytes() { return sizeof(fedrt_peer) + kHandleAlignment - 1; }

// The application's callbacks as the context's streams.
peer::PeerStreams StreamsOf(const fedrt_peer_callbacks* c) {
  peer::PeerStreams streams;
  streams.write = [c](uint32_t to, const uint8_t* data, std::size_t size) {
    return FromCallback(c->send(c->user, to, data, size), "send");
  };
  streams.read = [c](uint32_t from, uint8_t* buffer, std::size_t capacity,
                     uint32_t timeout_ms) -> Result<std::size_t> {
    std::size_t received = 0;
    const Status status = FromCallback(c->receive(c->user, from, buffer, capacity, timeout_ms, &received), "receive");
    if (!status.ok()) return status;
    return received;  // the context refuses a count above capacity
  };
  return streams;
}

// A formed context over `streams` (Form sends nothing on this binding; the
// join, if any, runs at the first exchange).
Result<std::unique_ptr<peer::CollectiveContext>> FormedContext(const PeerSetup& setup, peer::PeerStreams streams,
                                                               const peer::StreamJoin& join) {
  Result<std::unique_ptr<peer::CollectiveContext>> context = peer::CreateStreamPeerContext(
      setup.rank, setup.peers, std::move(streams), setup.context, setup.limits, join);
  if (!context.ok()) return context.status();
  FEDRT_RETURN_IF_ERROR((*context)->Form({}));
  return context;
}

fedrt_status CheckPeerArguments(const char* function, const fedrt_model_t* model, const fedrt_data_view* data,
                                const uint32_t* share, std::size_t share_count) {
  FEDRT_C_REQUIRE(model, function);
  FEDRT_C_REQUIRE(data, function);
  if (share == nullptr && share_count != 0) {
    return Fail(InvalidArgument(std::string(function) + ": share is NULL with share_count " +
                                std::to_string(share_count)));
  }
  return FEDRT_OK;
}

// Forwards the trainer's reports to on_progress.
class ProgressRelay final : public peer::PeerTrainerObserver {
 public:
  explicit ProgressRelay(const fedrt_peer_callbacks& c) : callbacks_(c) {}
  Status OnProgress(const peer::PeerProgress& p) override {
    if (callbacks_.on_progress == nullptr) return Status::Ok();
    fedrt_peer_progress c;
    c.epoch = p.epoch;
    c.steps_done = p.steps_done;
    c.steps_per_epoch = p.steps_per_epoch;
    c.step = p.step;
    c.epoch_end = p.epoch_end ? 1 : 0;
    c.train_loss = p.train_loss;
    c.epoch_loss = p.epoch_loss;
    c.bytes_sent = p.total_bytes_sent;
    c.fp32_bytes = p.fp32_bytes;
    c.wraps = p.wraps;
    c.moniqua_theta = p.moniqua_theta;
    return FromCallback(callbacks_.on_progress(callbacks_.user, &c), "on_progress");
  }

 private:
  const fedrt_peer_callbacks& callbacks_;
};

}  // namespace
}  // namespace fedrt::capi

using fedrt::capi::Fail;

extern "C" {

fedrt_peer_options fedrt_peer_options_default(void) {
  const fedrt::peer::PeerTrainerOptions trainer;
  const fedrt::peer::ContextOptions context;
  const fedrt::transport::FrameLimits limits;
  fedrt_peer_options o;
  o.rank = 0;
  o.peers = 1;
  o.reduce = FEDRT_PEER_RING;
  o.codec = nullptr;
  o.graph = FEDRT_PEER_GRAPH_RING;
  o.sgd = fedrt_sgd_options_default();
  o.epochs = trainer.epochs;
  o.batch = trainer.batch;
  o.seed = trainer.seed;
  o.max_steps = trainer.max_steps;
  o.evals_per_epoch = trainer.evals_per_epoch;
  o.chunk_floats = trainer.chunk_floats;
  o.iwp_density = 0;
  o.step_timeout_ms = context.step_timeout_ms;
  o.max_frame_bytes = limits.max_frame_bytes;
  o.key = nullptr;
  o.key_size = 0;
  return o;
}

fedrt_status fedrt_peer_size(const fedrt_model_t* model, const fedrt_data_view* data, const uint32_t* share,
                             size_t share_count, const fedrt_peer_options* options, size_t* bytes) {
  constexpr const char* kFunction = "fedrt_peer_size";
  const fedrt_status checked = fedrt::capi::CheckPeerArguments(kFunction, model, data, share, share_count);
  if (checked != FEDRT_OK) return checked;
  FEDRT_C_REQUIRE(bytes, kFunction);
  const fedrt_peer_options o = options != nullptr ? *options : fedrt_peer_options_default();
  fedrt::Result<fedrt::capi::PeerSetup> setup = fedrt::capi::SetupFrom(o, *model);
  if (!setup.ok()) return Fail(setup.status());
  // A context that is only measured: its streams are never used.
  fedrt::peer::PeerStreams unused;
  unused.write = [](uint32_t, const uint8_t*, std::size_t) { return fedrt::Status::Ok(); };
  unused.read = [](uint32_t, uint8_t*, std::size_t, uint32_t) -> fedrt::Result<std::size_t> { return std::size_t{0}; };
  auto context = fedrt::capi::FormedContext(*setup, std::move(unused), fedrt::peer::StreamJoin());
  if (!context.ok()) return Fail(context.status());
  std::vector<uint32_t> all;
  const fedrt::peer::PeerData view = fedrt::capi::DataFrom(*data, share, share_count, &all);
  fedrt::Result<std::size_t> needed =
      fedrt::peer::PeerTrainer::RequiredBytes(model->model, view, **context, setup->trainer);
  if (!needed.ok()) return Fail(needed.status());
  *bytes = fedrt::capi::HandleBytes() + *needed;
  return FEDRT_OK;
}

fedrt_status fedrt_peer_init(void* memory, size_t size, fedrt_model_t* model, const fedrt_data_view* data,
                             const uint32_t* share, size_t share_count, const fedrt_peer_options* options,
                             const fedrt_peer_callbacks* callbacks, fedrt_peer_t** peer) {
  constexpr const char* kFunction = "fedrt_peer_init";
  FEDRT_C_REQUIRE(memory, kFunction);
  const fedrt_status checked = fedrt::capi::CheckPeerArguments(kFunction, model, data, share, share_count);
  if (checked != FEDRT_OK) return checked;
  FEDRT_C_REQUIRE(callbacks, kFunction);
  FEDRT_C_REQUIRE(peer, kFunction);
  const struct {
    bool present;
    const char* name;
  } required[] = {{callbacks->send != nullptr, "callbacks->send"},
                  {callbacks->receive != nullptr, "callbacks->receive"},
                  {callbacks->now_ms != nullptr, "callbacks->now_ms"}};
  for (const auto& callback : required) {
    if (!callback.present) return fedrt::capi::RequireNonNull(nullptr, kFunction, callback.name);
  }
  const fedrt_peer_options o = options != nullptr ? *options : fedrt_peer_options_default();
  fedrt::Result<fedrt::capi::PeerSetup> setup = fedrt::capi::SetupFrom(o, *model);
  if (!setup.ok()) return Fail(setup.status());
  if (setup->keyed) {
    if (callbacks->random_bytes == nullptr) {
      return fedrt::capi::RequireNonNull(nullptr, kFunction, "callbacks->random_bytes (the join's, with a key)");
    }
    const fedrt_status hmac = fedrt::capi::RequireHmac(callbacks->hmac_sha256, kFunction);
    if (hmac != FEDRT_OK) return hmac;
  }
  const std::size_t handle_bytes = fedrt::capi::HandleBytes();
  if (size < handle_bytes) {
    return Fail(fedrt::OutOfRange(std::string(kFunction) + ": " + std::to_string(size) +
                                  " bytes of memory, fedrt_peer_size says how many it needs"));
  }
  auto* base = static_cast<unsigned char*>(memory);
  const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(base) % fedrt::capi::kHandleAlignment;
  unsigned char* at = base + (misalignment == 0 ? 0 : fedrt::capi::kHandleAlignment - misalignment);

  auto* created = new (at) fedrt_peer(*callbacks);
  fedrt_peer& p = *created;
  setup->context.clock = &p.clock;
  fedrt::peer::StreamJoin join;
  if (setup->keyed) {
    p.keys = std::move(setup->keys);
    join.keys = &p.keys;
    join.crypto = &p.crypto;
  }
  auto context = fedrt::capi::FormedContext(*setup, fedrt::capi::StreamsOf(&p.callbacks), join);
  if (!context.ok()) {
    created->~fedrt_peer();
    return Fail(context.status());
  }
  p.context = std::move(*context);
  const fedrt::peer::PeerData view = fedrt::capi::DataFrom(*data, share, share_count, &p.all_examples);
  fedrt::Result<fedrt::peer::PeerTrainer*> trainer = fedrt::peer::PeerTrainer::CreateIn(
      base + handle_bytes, size - handle_bytes, model->model, view, *p.context, setup->trainer);
  if (!trainer.ok()) {
    created->~fedrt_peer();
    fedrt::Status status = trainer.status();
    if (status.code() == fedrt::StatusCode::kOutOfRange && status.message().find("bytes of memory") != std::string::npos) {
      status = fedrt::OutOfRange(std::string(kFunction) + ": " + std::to_string(size) +
                                 " bytes of memory are too few; fedrt_peer_size says how many it needs");
    }
    return Fail(status);
  }
  p.trainer = *trainer;
  // The ring's left and right members, or the graph's neighbours.
  for (const fedrt::peer::Neighbour& n : p.context->neighbours()) p.neighbours.push_back(n.rank);
  std::sort(p.neighbours.begin(), p.neighbours.end());
  *peer = created;
  return FEDRT_OK;
}

void fedrt_peer_destroy(fedrt_peer_t* peer) {
  if (peer == nullptr) return;
  peer->~fedrt_peer();
}

fedrt_status fedrt_peer_run(fedrt_peer_t* peer) {
  FEDRT_C_REQUIRE(peer, "fedrt_peer_run");
  if (peer->ran) {
    return Fail(fedrt::Status(fedrt::StatusCode::kFailedPrecondition,
                              "fedrt_peer_run: this peer has run already; init a new one to train again"));
  }
  peer->ran = true;
  fedrt::capi::ProgressRelay relay(peer->callbacks);
  const fedrt::Status status = peer->trainer->Run(relay);
  if (!status.ok()) return Fail(status);
  return fedrt::capi::FromStatus(peer->context->Close());
}

size_t fedrt_peer_steps_per_epoch(const fedrt_peer_t* peer) {
  return peer != nullptr ? peer->trainer->steps_per_epoch() : 0;
}

uint64_t fedrt_peer_bytes_sent(const fedrt_peer_t* peer) {
  return peer != nullptr ? peer->trainer->total_bytes_sent() : 0;
}

const char* fedrt_peer_gossip_codec(const fedrt_peer_t* peer) {
  return peer != nullptr ? peer->trainer->gossip_codec().c_str() : nullptr;
}

fedrt_status fedrt_peer_neighbours(const fedrt_peer_t* peer, uint32_t* ranks, size_t capacity, size_t* count) {
  constexpr const char* kFunction = "fedrt_peer_neighbours";
  FEDRT_C_REQUIRE(peer, kFunction);
  FEDRT_C_REQUIRE(count, kFunction);
  if (capacity < peer->neighbours.size()) {
    return Fail(fedrt::OutOfRange(std::string(kFunction) + ": room for " + std::to_string(capacity) + " ranks, " +
                                  std::to_string(peer->neighbours.size()) + " neighbours"));
  }
  if (!peer->neighbours.empty()) FEDRT_C_REQUIRE(ranks, kFunction);
  for (std::size_t i = 0; i < peer->neighbours.size(); ++i) ranks[i] = peer->neighbours[i];
  *count = peer->neighbours.size();
  return FEDRT_OK;
}

}  // extern "C"
