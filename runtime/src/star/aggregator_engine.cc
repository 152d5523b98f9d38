// The star aggregator engine (contract in fedrt/runtime/aggregator_engine.h;
// what it does in fedrt/runtime/aggregator.h). Every connection reports to
// one State on the driving thread; Tick() checks joins, round deadlines and
// quorums between I/O events.
#include "fedrt/runtime/aggregator_engine.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "fedrt/codecs/ndqsg.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/platform/log.h"
#include "fedrt/runtime/aggregator_tier.h"
#include "fedrt/runtime/device_client.h"
#include "fedrt/runtime/trainer.h"
#include "fedrt/transport/chunking.h"
#include "fedrt/transport/join.h"
#include "fedrt/transport/messages.h"
#include "persist/coding.h"
#include "common/block_carver.h"

namespace fedrt {

using namespace transport;  // NOLINT: the aggregator speaks the transport's vocabulary throughout

namespace {

// The largest max_update_samples a config may set.
constexpr uint64_t kMaxSamplesPerUpdate = uint64_t{1} << 32;
// The sender id of the aggregator's broadcast in the codec context.
constexpr uint32_t kBroadcastSender = 0xFFFFFFu;

// The address a connection comes from, for the per-address cap: its peer()
// text before the last ':' ("127.0.0.1:40312" -> "127.0.0.1", "::1:40312" ->
// "::1").
std::string AddressOf(const std::string& peer) {
  const std::size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

// One connection's state.
struct Peer {
  std::shared_ptr<Connection> connection;
  std::string address;                // AddressOf(peer()): counts against the cap until it joins
  std::unique_ptr<JoinServer> join;
  std::string device_id;  // once authenticated
  bool authenticated = false;
  uint64_t opened_ms = 0;
  // Joined: when its byte count was last seen to change (frames and
  // heartbeats), for StillHeard().
  uint64_t heard_ms = 0;
  uint64_t heard_bytes = 0;
  // The update being received: its chunks are checked by `update` and copied
  // into the round's payload slot `slot` (-1: none).
  ChunkSequence update{0};
  bool receiving = false;
  int slot = -1;
  uint64_t update_round = 0;
  uint64_t num_samples = 0;
  float loss = 0;
  LevelStatistics levels;  // ALQ / AMQ: the statistics of the update being received
  uint64_t instructions_acked_ms = 0;  // this round's instructions arrived (0: not acknowledged)
  uint32_t compute_ms = 0;             // what its update says it took to train and encode
  // The largest frame the device takes (its Join; at most this aggregator's
  // own limit, at least kMinFrameBytes): its instructions are cut to it, so a
  // microcontroller that announces 64 KiB gets the model in 32 KiB chunks.
  uint32_t max_frame_bytes = 0;
  // The round whose instructions last went out on this connection: the
  // stream is ordered, so the device holds that round's model before it
  // reads any later instructions, acknowledged or not.
  int64_t instructions_round = -1;
};

// Room for the largest statistics an update may carry (ValidateLevelStatistics),
// so CheckLevels and the copies into received_ allocate nothing.
void ReserveLevels(LevelStatistics* levels) {
  levels->bucket_norms.reserve(kMaxBucketNorms);
  levels->largest_buckets.reserve(kMaxMixtureBuckets);
}

// A map whose entries are recycled from round to round: Recycle() empties
// it into spare nodes (C++17 node handles) and Put() takes one for a new key,
// so once the nodes and their strings have grown, a round's bookkeeping
// allocates nothing.
template <typename Key, typename Value>
class ReusedMap : public std::map<Key, Value> {
 public:
  void Recycle() {
    while (!this->empty()) spare_.push_back(this->extract(this->begin()));
  }
  // The entry of `key`, made from a spare node when absent (its value is the
  // last round's: the caller assigns every field).
  Value& Put(const Key& key) {
    auto it = this->find(key);
    if (it != this->end()) return it->second;
    if (spare_.empty()) {
      // A new node, its key made with room for any device id.
      Key made;
      made.reserve(kMaxDeviceIdBytes);
      made = key;
      return this->emplace(std::move(made), Value()).first->second;
    }
    auto node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = key;  // copy-assigned: reuses the string's capacity
    return this->insert(std::move(node)).position->second;
  }
  void ReserveSpares(std::size_t n) { spare_.reserve(n); }
  // Takes `key`'s entry out into the spares (no-op when absent).
  void Erase(const Key& key) {
    auto it = this->find(key);
    if (it != this->end()) spare_.push_back(this->extract(it));
  }
  // Makes `n` spare nodes now, their keys with room for any device id, so
  // that up to n more entries than ever before allocate nothing.
  void MakeSpares(std::size_t n) {
    spare_.reserve(spare_.size() + n);
    std::map<Key, Value> made;
    for (std::size_t i = 0; i < n; ++i) {
      Key key;
      key.reserve(kMaxDeviceIdBytes);
      key = std::to_string(i);
      made.emplace(std::move(key), Value());
    }
    while (!made.empty()) spare_.push_back(made.extract(made.begin()));
  }

 private:
  std::vector<typename std::map<Key, Value>::node_type> spare_;
};

// The checkpoint's maps and sets are refilled from recycled nodes (keys made
// with room for any device id), so on_checkpoint allocates nothing once
// there are as many as entries. `spares` holds the nodes not in use.
template <typename Container>
void RecycleNodes(Container* c, std::vector<typename Container::node_type>* spares) {
  while (!c->empty()) spares->push_back(c->extract(c->begin()));
}
template <typename Container>
void MakeNodes(std::size_t n, std::vector<typename Container::node_type>* spares) {
  spares->reserve(spares->size() + n);
  Container made;
  for (std::size_t i = 0; i < n; ++i) {
    std::string key;
    key.reserve(kMaxDeviceIdBytes);
    key = std::to_string(i);
    if constexpr (std::is_same<typename Container::key_type, typename Container::value_type>::value) {
      made.insert(std::move(key));
    } else {
      made.emplace(std::move(key), typename Container::mapped_type());
    }
  }
  RecycleNodes(&made, spares);
}
// `out` = `source`'s entries (key -> value, sorted), in recycled nodes.
template <typename Map, typename Source>
void RefillMap(const Source& source, Map* out, std::vector<typename Map::node_type>* spares) {
  RecycleNodes(out, spares);
  for (const auto& [key, value] : source) {
    if (spares->empty()) {
      out->emplace_hint(out->end(), key, value);
      continue;
    }
    auto node = std::move(spares->back());
    spares->pop_back();
    node.key() = key;  // copy-assigned: reuses the string's capacity
    node.mapped() = value;
    out->insert(out->end(), std::move(node));
  }
}
// `out` = the keys of `source` (sorted), in recycled nodes.
template <typename Set, typename Source>
void RefillKeys(const Source& source, Set* out, std::vector<typename Set::node_type>* spares) {
  RecycleNodes(out, spares);
  for (const auto& entry : source) {
    if (spares->empty()) {
      out->emplace_hint(out->end(), entry.first);
      continue;
    }
    auto node = std::move(spares->back());
    spares->pop_back();
    node.value() = entry.first;
    out->insert(out->end(), std::move(node));
  }
}

// What a device was told to send this round. Made with room for any
// canonical spec: an entry reused for another device (an anchor's dqsg spec,
// then an ndqsg one) never grows.
struct Assignment {
  Assignment() { spec.reserve(kMaxCodecSpecSize); }
  std::string spec;
  AnchorRole role = AnchorRole::kNone;
  int rho = 0;  // nested: the nesting ratio in spec
  uint32_t level_table_version = 0;  // ALQ / AMQ: the table it encodes with
};

// A received and checked update, waiting for the round to close.
struct Received {
  std::string device_id;
  uint32_t sender_id = 0;
  std::string spec;
  AnchorRole role = AnchorRole::kNone;
  int rho = 0;
  uint64_t num_samples = 0;
  float loss = 0;
  // The payload in its slot of the block, until it is summed (mean rounds) or
  // the round closes (NDQSG, rules other than mean).
  const uint8_t* payload = nullptr;
  std::size_t payload_size = 0;  // bounded by the slot (the codec's largest payload)
  int slot = -1;                 // -1: summed, the slot given back
  bool in_scratch = false;       // decoded into scratch_ on arrival, and still there
  float* decoded = nullptr;      // decoded on arrival into a buffer of the decoded pool, until its turn
  uint64_t wire_bytes = 0;       // payload size as received
  bool added = true;             // plain rounds: false when the sum refused it
  LevelStatistics levels;        // ALQ / AMQ: the statistics it carried
  // Its part of the round's time: instructions until acknowledged, the
  // device's own compute time, the rest until its last chunk arrived.
  uint64_t download_ms = 0, compute_ms = 0, upload_ms = 0;
  uint64_t arrived_ms = 0;
};

// What the block holds, measured by an initialised State.
struct BlockSizes {
  std::size_t d = 0;
  std::size_t updates = 0;       // max_updates_
  std::size_t slots = 0;         // payload_slot_count_
  std::size_t slot_bytes = 0;    // payload_slot_bytes_
  std::size_t held = 0;          // a rule other than mean: decoded updates (held_capacity_), else 0
  std::size_t decoded = 0;       // early updates waiting decoded (decoded_capacity_)
  std::size_t codec_bytes = 0;   // the update codecs (ConstructCodec), in codecs_ order, then the downlink's
  std::size_t codec_alignment = 1;
  bool dp = false;
  bool downlink = false;
  std::size_t broadcast_bytes = 0;         // a downlink codec: the broadcast's largest payload
  std::size_t instruction_slots = 0;       // frame slots for the instructions (ReserveInstructions)
  std::size_t instruction_slot_bytes = 0;  // each (FrameSlotStorageBytes)
};

// RequiredBytes' stand-in for the application's Crypto: measuring the block
// needs no key and no randomness that matters.
class MeasuringCrypto final : public Crypto {
 public:
  Status RandomBytes(uint8_t* out, std::size_t size) override {
    std::fill(out, out + size, uint8_t{1});
    return Status::Ok();
  }
  Status HmacSha256(const uint8_t*, std::size_t, const uint8_t*, std::size_t,
                    std::array<uint8_t, kSha256Bytes>*) override {
    return Status(StatusCode::kFailedPrecondition, "measuring only");
  }
  bool ConstantTimeEqual(const uint8_t*, const uint8_t*, std::size_t) override { return false; }
};

}  // namespace

struct Aggregator::State {
  State(const AggregatorConfig& config, const KeyStore& keys, Crypto& crypto, const Clock& clock,
        AggregatorHooks hooks)
      : config_(config), keys_(keys), crypto_(crypto), clock_(clock), hooks_(std::move(hooks)) {
    tier_ = hooks_.tier;
  }

  Status Init(const DataView* test_set);
  BlockSizes Sizes() const;
  // Lays the update codecs Init made out in `storage` (null: measures), so
  // decoding allocates no scratch. Returns the bytes used.
  Result<std::size_t> PlaceCodecs(unsigned char* storage);
  ~State() {
    codecs_.clear();  // the wrappers borrow the placed codecs
    levels_tensors_.reset();
    downlink_.reset();
    for (Codec* codec : placed_codecs_) DestroyCodec(codec);
  }
  Status Restore(AggregatorCheckpoint& saved);

  void OnOpen(const std::shared_ptr<Connection>& connection);
  void OnFrame(Connection& connection, const Frame& frame);
  void OnClose(Connection& connection, const Status& reason);
  uint32_t Tick();
  void FinishAll(const std::string& reason = "training finished");
  void AbortAll(const Status& reason);

  void Refuse(Connection& connection, const Status& reason);
  void RefuseUnjoined(Connection& connection, const std::string& why);
  void Joined(Peer& peer);
  bool StillHeard(Peer& peer);
  uint64_t StaleAfterMs() const { return config_.idle_timeout_ms / 2; }
  // Updates that close the open round before its deadline: a share of the
  // devices the round wants, so over-selected devices are spares whose late
  // updates the round does not wait for.
  std::size_t Quorum() const {
    const std::size_t wanted = std::min(wanted_, selected_.size());
    return std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(config_.quorum * static_cast<double>(wanted))));
  }
  void OnJoinFrame(Peer& peer, Connection& connection, const Frame& frame);
  void OnUpdateFrame(Peer& peer, Connection& connection, const Frame& frame);
  Status CheckUpdate(Received& received);
  Status Contribute(const Received& received, const float* decoded);
  Status Combine(std::vector<float>* mean, RoundReport& report);
  Status CombineHere(std::vector<float>* mean, RoundReport& report);
  bool dp() const { return config_.dp.noise_multiplier > 0; }
  std::size_t HeldUpdatesCap() const {
    return config_.max_held_updates != 0 ? config_.max_held_updates : AggregatorConfig::kDefaultHeldUpdates;
  }
  bool BudgetAllowsRound(std::size_t connected);
  void SumInOrder(bool closing);
  CodecContext ContextFor(uint32_t sender_id) const;
  void StartRound();
  Status SendInstructions(Peer& peer);
  // The pool of payload slots (max_waiting_updates): whether the device's
  // turn in the sum has come, deferring an update that finds no room, and
  // inviting deferred devices again as slots free.
  bool IsNextToSum(const std::string& device) const;
  void Defer(Peer& peer, Connection& connection);
  void InviteDeferred();
  // Makes, at placement, the instruction entries and frame slots every kind
  // of assignment a round can send needs, the slots building in `storage`
  // (instruction_entries_ * instruction_frames_per_entry_ slots of
  // instruction_slot_bytes_).
  void ReserveInstructions(unsigned char* storage);
  Status EncodeInstructions(const Assignment& assignment, ModelEncoding encoding, uint32_t max_frame_bytes,
                            std::vector<OutFrame>* frames);
  void CloseRound();
  // The heavy end of an applied round's close: the evaluation, then
  // on_checkpoint. It reads the model, the test set and checkpoint_, and
  // writes only evaluation_ (and evaluated_): with on_close_job it runs on
  // the host's thread while closing_ keeps the driving thread off them.
  void RunCloseJob();
  // On the driving thread, after RunCloseJob: the evaluation into the
  // report and counters, the round's time, on_round.
  void FinishClose();
  void TimeRound(RoundReport& report);
  bool closing_ = false;  // a close job is out: no round starts until CloseJobDone()
  Status evaluated_;      // RunCloseJob's evaluation
  Status PrepareBroadcast();
  int Adapt(const std::string& device, int rho, std::size_t near_wraps, RoundReport& report);
  TensorSetCodec* CodecFor(const std::string& spec);
  const std::string& NestedSpec(int rho);
  int RhoOf(const std::string& device) const;
  Peer* PeerOf(const std::string& device_id);
  Status CheckLevels(const UpdateMessage& m, const Assignment& assignment, LevelStatistics* levels) const;
  void RefitLevels();
  // Aggregator tier (aggregator_tier.h): this Tick's counts over every rank,
  // a device's shard, and the two exchanges of a closing round.
  struct TickView {
    uint64_t connected = 0, received = 0, waiting = 0, open = 0;
    bool deadline_passed = false, target_reached = false;
    bool closing = false;  // a rank's close job is out (any rank's: no rank starts a round)
  };
  TickView last_view_;  // the last Tick's (every rank's with a tier), for monitoring
  Status AgreeTick(TickView* view);
  bool Mine(const std::string& device) const {
    return tier_ == nullptr || ShardOfDevice(device, tier_->size()) == tier_->rank();
  }
  Status GatherDevices();
  Status ShareNestedUpdates();
  // The ranks no longer agree (a collective failed): the training stops.
  void TierFailed(const Status& why) {
    stopped_ = Status(why.code(), "aggregator tier: " + why.message());
    Log(LogLevel::kError, "aggregator: %s", stopped_.message().c_str());
    FinishAll(stopped_.message());
  }
  Status SharePlainRound(RoundReport& report, double* loss_sum, double* sample_sum);
  Status GatherHeld();
  Status ShareRank0Combination(const Status& combined, std::vector<float>* mean, RoundReport& report);
  Status ShareSynced();
  Status RestoreCodecState(AggregatorCheckpoint& saved);
  // The state to persist, into *checkpoint (its vectors reused from the last round).
  void FillCheckpoint(AggregatorCheckpoint* checkpoint);
  // With on_checkpoint: the nodes of checkpoint_'s maps not in use (made at
  // placement: a rho per device that can join, a forced anchor per sampled
  // device, a synced entry per device that can join).
  std::vector<std::map<std::string, int32_t>::node_type> checkpoint_rho_nodes_;
  std::vector<std::set<std::string>::node_type> checkpoint_anchor_nodes_;
  std::vector<std::map<std::string, int64_t>::node_type> checkpoint_synced_nodes_;

  AggregatorConfig config_;
  const KeyStore& keys_;
  Crypto& crypto_;
  const Clock& clock_;
  AggregatorHooks hooks_;
  FrameLimits limits_;
  std::map<uint64_t, Peer> peers_;
  std::size_t joining_ = 0;  // connections in peers_ that have not authenticated
  std::map<std::string, std::size_t> joining_by_address_;  // the same, per address (no zero entries)
  uint64_t refused_unjoined_ = 0;  // connections closed at once for the caps
  bool opened_any_ = false;  // Restore() is too late after this
  std::map<std::string, uint64_t> device_connection_;
  // Update codecs by spec, each over the model's tensor table (MakeUpdateCodec).
  std::map<std::string, std::unique_ptr<TensorSetCodec>> codecs_;
  std::vector<Codec*> placed_codecs_;  // those codecs, constructed in the block
  std::vector<std::size_t> tensor_sizes_;  // the model's tensor table (lengths)

  std::unique_ptr<Model> model_;
  std::unique_ptr<ServerOptimizer> optimizer_;
  DataView test_;
  bool evaluate_ = false;
  std::size_t d_ = 0;
  bool nested_ = false;              // the codec is NDQSG
  std::string anchor_spec_;
  int base_rho_ = 0;                       // the codec's rho, where adaptation starts and returns
  // Per device, when not base_rho_; its nodes recycled (ReusedMap).
  ReusedMap<std::string, int> rho_;
  std::map<int, std::string> nested_specs_;

  uint32_t round_ = 0;               // rounds completed
  bool in_round_ = false;
  bool started_any_ = false;
  bool finished_ = false;
  bool reached_target_ = false;  // config_.target_accuracy was reached: finish after this round
  uint32_t failed_in_a_row_ = 0;     // rounds closed in a row that applied nothing
  Status stopped_;                   // why the training stopped early (OK: it did not)
  uint64_t round_started_ms_ = 0;
  uint64_t round_deadline_ms_ = 0;
  std::vector<std::string> selected_;
  std::size_t wanted_ = 0;  // devices this round wants, before over-selection (SampleTarget)
  ReusedMap<std::string, Assignment> assigned_;
  // The round's updates in arrival order: received_[0, received_count_);
  // the entries past it keep their strings' memory for the next ones.
  std::vector<Received> received_;
  std::size_t received_count_ = 0;
  std::vector<const Received*> ordered_;  // CloseRound: the updates in selected_ order
  // StartRound's sampling buffers.
  std::vector<const std::string*> connected_;
  std::vector<uint32_t> chosen_, sample_words_;
  transport::OutFrame round_ack_;  // the Ack of an update this round, shared by every connection
  transport::FrameSlot ack_slot_{256};  // where it is encoded (unless a connection still holds last round's)
  // The round's instruction frames are encoded in these slots (each holds
  // one frame; one still queued on a connection is skipped), so a round
  // allocates no frame once they have grown.
  std::vector<std::unique_ptr<transport::FrameSlot>> instruction_slots_;
  // NDQSG: this round's senders, then (ChooseNdqsgAnchors) its anchors, sorted.
  std::vector<uint32_t> anchors_;
  // Reused from round to round: the report handed to on_round, the test
  // evaluation and its buffers, the checkpoint handed to on_checkpoint.
  RoundReport report_;
  transport::UpdateMessage update_message_;  // OnUpdateFrame's, reused (its statistics reserved)
  // The strings of the last reports' entries, which the next are made from
  // (moved, so their memory stays): a report allocates nothing once they
  // exist (made with room for any device id).
  std::vector<DeviceRoundReport> spare_devices_;
  std::vector<std::string> spare_ids_;
  DeviceRoundReport& NextDeviceReport(RoundReport* report) {
    if (spare_devices_.empty()) {
      report->devices.emplace_back().device_id.reserve(kMaxDeviceIdBytes);
    } else {
      report->devices.push_back(std::move(spare_devices_.back()));
      spare_devices_.pop_back();
    }
    DeviceRoundReport& device = report->devices.back();
    device.anchor = false;
    device.rho = 0;
    device.near_wraps = 0;
    device.next_rho = 0;
    device.bytes = 0;
    return device;
  }
  static void AppendId(std::vector<std::string>* ids, std::vector<std::string>* spares, const std::string& id) {
    if (spares->empty()) {
      ids->emplace_back().reserve(kMaxDeviceIdBytes);
    } else {
      ids->push_back(std::move(spares->back()));
      spares->pop_back();
    }
    ids->back() = id;
  }
  Evaluation evaluation_;
  EvaluationScratch evaluation_scratch_;
  AggregatorCheckpoint checkpoint_;
  // The round sum (the running aggregate an MPI tier would export): the
  // weighted double sum of the decoded updates in selected_ order, their
  // count and total weight, in the block. Robust rules hold the updates
  // (held_) instead; NDQSG anchors feed ndqsg_mean_ first.
  std::unique_ptr<UpdateAccumulator> sum_;
  ReusedMap<std::string, std::size_t> answered_;  // device -> its entry in received_ (O(log n) per event)
  // Plain rounds sum the updates in the order of selected_ (sorted device
  // ids), whatever order they arrive in: selected_[0, next_sum_) are summed.
  std::size_t next_sum_ = 0;
  // This round's instruction frames per (codec spec, anchor role, model
  // encoding, level table version): encoded once and shared by
  // every connection they go to.
  // By assignment (spec, role, model encoding, level table version) and
  // frame limit; instruction_frames_[0, instruction_frames_used_) are this
  // round's, the rest keep their memory for the next.
  struct InstructionFrames {
    std::string spec;
    AnchorRole role = AnchorRole::kNone;
    ModelEncoding encoding = ModelEncoding::kFullModelFp32;
    uint32_t level_table_version = 0;
    uint32_t max_frame_bytes = 0;
    std::vector<OutFrame> frames;
  };
  std::vector<InstructionFrames> instruction_frames_;
  std::size_t instruction_frames_used_ = 0;
  // ALQ / AMQ: the codec holding the table of the current round (updates are
  // decoded with it), and the statistics merged from this round's accepted
  // updates, which the next table is fitted to when the round closes.
  // In the block once placed (PlaceCodecs); Init's heap codec until then.
  AdaptiveCodec* levels_ = nullptr;
  std::unique_ptr<AdaptiveCodec> levels_owned_;
  // refit=N: the statistics merged since the last fit and the rounds they
  // span (not checkpointed: a restarted aggregator starts a new interval).
  LevelStatistics pending_levels_;
  LevelTable fitted_table_;  // RefitLevels' result, reused
  uint32_t rounds_since_refit_ = 0;
  std::unique_ptr<TensorSetCodec> levels_tensors_;  // levels_ over the tensor table
  ReusedMap<std::string, bool> forced_anchors_;  // wrapped too often last round (the keys; nodes recycled)
  std::size_t rejected_ = 0;
  AggregatorCounters counters_;
  void Reject(UpdateRejection reason) {
    rejected_++;
    counters_.updates_rejected[static_cast<int>(reason)]++;
  }
  uint64_t bytes_down_ = 0;
  std::size_t full_models_down_ = 0;
  // Downlink compression: the model the devices hold, the round it belongs
  // to, and this round's compressed delta from the previous one.
  // Over the model's tensor table; its codec in the block once placed
  // (PlaceCodecs), Init's heap codec (MakeUpdateCodec) until then.
  std::unique_ptr<TensorSetCodec> downlink_;
  std::vector<float> device_model_;
  int64_t device_model_round_ = -1;     // round whose instructions carry device_model_
  // The compressed delta device_model_(round-1) -> device_model_(round): in
  // the block, room for the codec's largest payload.
  uint8_t* broadcast_ = nullptr;
  std::size_t broadcast_capacity_ = 0;
  std::size_t broadcast_size_ = 0;
  // The devices' model starts at zeros (not the fp32 model) when nothing was
  // restored, so the first broadcast is the whole model compressed: a device
  // that holds no model takes it as kCompressedModel instead of d floats, the
  // largest transfer of a run on a slow link. What the codec loses of the
  // initial model stays in model - device_model_, as any delta's loss does.
  bool device_model_zero_ = false;      // device_model_ is zeros and never broadcast
  bool broadcast_from_zeros_ = false;   // broadcast_ is device_model_ itself (delta from zeros)
  std::map<std::string, int64_t> synced_;  // device -> last round whose model it acknowledged
  // With a tier, on rank 0: every rank's synced_ (its own devices'), for the checkpoint.
  std::map<std::string, int64_t> tier_synced_;
  // Model-sized buffers in the block (d floats each; delta_ with a downlink
  // codec, noised_ (d doubles) under DP).
  float* scratch_ = nullptr;
  float* zeros_ = nullptr;
  float* contribution_ = nullptr;  // the update being clipped
  float* delta_ = nullptr;
  double* noised_ = nullptr;
  std::vector<float> mean_;        // the combined update (on_aggregate's type), made at Create
  std::unique_ptr<NdqsgRunningMean> ndqsg_mean_;
  // The round's update storage in the block: payload_slot_count_ slots of
  // payload_slot_bytes_ each (max_waiting_updates + 1, or max_updates_ for
  // NDQSG), those free, and (rules other than mean) max_updates_ decoded
  // updates of d floats.
  std::size_t max_updates_ = 0;
  std::size_t max_payload_bytes_ = 0;
  std::size_t payload_slot_count_ = 0;
  std::size_t payload_slot_bytes_ = 0;
  // The instructions' frame slots in the block: an entry per kind of
  // instructions a round can send (at most one per sampled device), each
  // with a slot per chunk of the largest model payload (the fp32 model, or
  // a downlink codec's largest), instruction_slot_bytes_ each.
  std::size_t instruction_entries_ = 0;
  std::size_t instruction_frames_per_entry_ = 0;
  std::size_t instruction_slot_bytes_ = 0;
  // Devices whose update found the pool full (in the order they were
  // deferred): InviteDeferred sends them the round's instructions again.
  std::vector<std::string> deferred_;
  std::size_t deferred_count_ = 0;  // deferred_[0, deferred_count_) wait; the rest keep their strings
  uint8_t* payload_slots_ = nullptr;
  std::vector<int> free_slots_;
  uint8_t* SlotData(int slot) { return payload_slots_ + static_cast<std::size_t>(slot) * payload_slot_bytes_; }
  void FreeSlot(int& slot) {
    if (slot >= 0) free_slots_.push_back(slot);
    slot = -1;
  }
  // Early updates waiting decoded (max_decoded_waiting, at most the waiting
  // payloads; none for NDQSG): decoded_capacity_ buffers of d floats in
  // decoded_memory_, those free. An early update whose decode (its check)
  // found one free stays there until its turn instead of being decoded
  // again from its payload.
  std::size_t decoded_capacity_ = 0;
  float* decoded_memory_ = nullptr;
  std::vector<float*> free_decoded_;
  // Robust rules: this round's decoded (clipped) updates, in held_memory_
  // (room for held_capacity_: max_held_updates, at most max_updates_), and
  // their weights, in the order of selected_; mean sums into sum_.
  std::size_t held_capacity_ = 0;
  AggregationDetail aggregation_detail_;    // the rule's choice and
  AggregationScratch aggregation_scratch_;  // working vectors, reserved for held_capacity_
  float* held_memory_ = nullptr;
  std::vector<const float*> held_;
  std::vector<double> held_weights_;
  std::vector<const std::string*> held_devices_;  // into received_, which does not move within a round
  std::size_t clipped_ = 0;
  // DP: the accountant, the noise key and the devices connected when the
  // round was sampled (q = sampled / connected).
  RdpAccountant accountant_;
  uint64_t dp_noise_seed_ = 0;
  std::size_t population_ = 0;
  std::size_t max_devices_ = 0;  // config_.max_devices, at most the keys known
  AggregatorTier* tier_ = nullptr;  // hooks_.tier: null when this engine is the whole aggregator
  // With a tier: every rank's connected devices, sorted (connected_ points
  // into it), this round's exchange of NDQSG updates (the payloads of other
  // ranks' devices, pointed to by their received_ entries until the next
  // round starts) and the ALQ / AMQ statistics of every rank.
  std::vector<std::string> tier_devices_;
  RoundPartial tier_round_;
  LevelStatistics tier_levels_;
  // Robust rules in plain rounds: the updates every rank held (GatherHeld
  // puts them all in rank 0's held_, which alone combines them).
  std::size_t tier_held_ = 0;
};

Status Aggregator::State::Init(const DataView* test_set) {
  limits_.max_frame_bytes = config_.max_frame_bytes;
  FEDRT_RETURN_IF_ERROR(limits_.Validate());
  if (!(config_.max_update_norm >= 0) || !std::isfinite(config_.max_update_norm)) {
    return InvalidArgument("max update norm must be finite and not negative (0: no bound)");
  }
  if (config_.max_unjoined_connections < 1 || config_.max_unjoined_per_address < 1) {
    return InvalidArgument("the caps on connections that have not joined must be at least 1");
  }
  if (config_.max_failed_rounds < 1) {
    return InvalidArgument("max failed rounds must be at least 1 (a run that never applies a round must stop)");
  }
  if (config_.max_update_samples < 1 || config_.max_update_samples > kMaxSamplesPerUpdate) {
    return InvalidArgument("max update samples " + std::to_string(config_.max_update_samples) +
                           " must be from 1 to 2^32");
  }

  if (!(config_.clip_update_norm >= 0) || !std::isfinite(config_.clip_update_norm)) {
    return InvalidArgument("clip update norm must be finite and not negative (0: no clipping)");
  }
  if (HoldsUpdates(config_.aggregation) || MinimumUpdates(config_.aggregation) > 1) {
    // The first round samples from the min_devices that joined; a rule that
    // cannot combine that many could never apply a round.
    const std::size_t joined = std::max<std::size_t>(1, config_.min_devices);
    std::vector<uint32_t> indices(joined);
    for (uint32_t i = 0; i < indices.size(); ++i) indices[i] = i;
    const std::size_t sampled = SampleDevices(indices, config_.sampling, config_.session_seed, 0).size();
    if (sampled < MinimumUpdates(config_.aggregation)) {
      return InvalidArgument("aggregation " + AggregationRuleName(config_.aggregation) + " needs at least " +
                             std::to_string(MinimumUpdates(config_.aggregation)) +
                             " updates per round (2F + 3); the first round samples " + std::to_string(sampled) +
                             " of " + std::to_string(joined) + " devices (raise min devices or the sampling)");
    }
    const std::size_t cap = HeldUpdatesCap();
    if (HoldsUpdates(config_.aggregation) && sampled > cap) {
      return InvalidArgument("aggregation " + AggregationRuleName(config_.aggregation) +
                             " holds every decoded update of a round; the first round samples " +
                             std::to_string(sampled) + " of " + std::to_string(joined) +
                             " devices, more than max held updates (" + std::to_string(cap) +
                             "): raise max held updates or sample fewer");
    }
  }
  if (!HoldsUpdates(config_.aggregation) && config_.max_held_updates != 0) {
    return InvalidArgument("max held updates applies to an aggregation rule other than mean only (mean keeps a "
                           "running sum); this run aggregates mean");
  }
  if (dp()) {
    FEDRT_RETURN_IF_ERROR(ValidateDpOptions(config_.dp));
    if (config_.aggregation.kind != AggregationKind::kMean) {
      return InvalidArgument("DP-FedAvg calibrates its noise to the sum of clipped updates: it needs aggregation "
                             "mean, not " + AggregationRuleName(config_.aggregation));
    }
    if (config_.clip_update_norm > 0) {
      return InvalidArgument("DP rounds clip every update to the DP clip norm; clip update norm must be 0");
    }
    dp_noise_seed_ = config_.dp.noise_seed;
    if (dp_noise_seed_ == 0) {
      uint8_t bytes[8];
      FEDRT_RETURN_IF_ERROR(crypto_.RandomBytes(bytes, sizeof(bytes)));
      for (uint8_t b : bytes) dp_noise_seed_ = dp_noise_seed_ << 8 | b;
    }
  } else if (config_.dp.clip != 0 || config_.dp.epsilon_budget != 0 || config_.dp.noise_seed != 0) {
    return InvalidArgument("the DP clip, budget and noise seed apply only with a DP noise multiplier above 0");
  }

  Result<Model> model = Model::Create(config_.model, config_.model_seed);
  if (!model.ok()) return model.status();
  model_ = std::make_unique<Model>(std::move(*model));
  d_ = model_->parameter_count();
  tensor_sizes_ = ModelTensorSizes(*model_);
  limits_.max_payload_bytes = std::max<uint64_t>(uint64_t{1} << 20, uint64_t{d_} * 8 + (1u << 16));

  Result<std::unique_ptr<Codec>> codec = MakeCodec(config_.codec);
  if (!codec.ok()) return codec.status();
  config_.codec = (*codec)->spec();
  nested_ = (*codec)->needs_side_info() && config_.codec.rfind("ndqsg", 0) == 0;
  if ((*codec)->needs_side_info() && !nested_) {
    return InvalidArgument("codec '" + config_.codec + "' needs side information the star aggregator does not have");
  }
  if (nested_) {
    Result<std::string> anchor = NdqsgAnchorSpec(config_.codec, config_.anchor_levels);
    if (!anchor.ok()) return anchor.status();
    Result<CodecSpec> parsed = CodecSpec::Parse(config_.codec);
    if (!parsed.ok()) return parsed.status();
    Result<int64_t> rho = parsed->GetInt("rho", 3, 2, 255);
    if (!rho.ok()) return rho.status();
    base_rho_ = static_cast<int>(*rho);
    if (config_.max_rho < base_rho_ || config_.max_rho > 255) {
      return InvalidArgument("max rho " + std::to_string(config_.max_rho) + " must be from the codec's rho (" +
                             std::to_string(base_rho_) + ") to 255");
    }
    nested_specs_[base_rho_] = config_.codec;
    Result<std::unique_ptr<Codec>> dqsg = MakeCodec(*anchor);
    if (!dqsg.ok()) return dqsg.status();
    anchor_spec_ = (*dqsg)->spec();
  }
  Result<std::unique_ptr<AdaptiveCodec>> adaptive = MakeAdaptiveCodec(config_.codec);
  if (adaptive.ok()) {
    levels_owned_ = std::move(*adaptive);  // starts with the codec's initial table, version 0
    levels_ = levels_owned_.get();
    update_message_.stats.level_statistics.bucket_norms.reserve(kMaxLevelStatisticsNorms);
    update_message_.stats.level_statistics.largest_buckets.reserve(kMaxLevelStatisticsBuckets);
    fitted_table_.levels.reserve(static_cast<std::size_t>(levels_->levels_per_sign()) + 1);
    // Merge appends a round's statistics before it keeps the largest.
    pending_levels_.bucket_norms.reserve(2 * kMaxBucketNorms);
    pending_levels_.largest_buckets.reserve(2 * kMaxMixtureBuckets);
    Result<std::unique_ptr<TensorSetCodec>> tensors = BorrowUpdateCodec(*levels_, tensor_sizes_);
    if (!tensors.ok()) return tensors.status();
    levels_tensors_ = std::move(*tensors);
  }
  optimizer_ = std::make_unique<ServerOptimizer>(config_.server_optimizer, d_);

  if (test_set != nullptr) {
    FEDRT_RETURN_IF_ERROR(test_set->Validate());
    if (test_set->example_size != model_->input_size()) {
      return InvalidArgument("model '" + config_.model + "' takes " + std::to_string(model_->input_size()) +
                             " features, the test set has " + std::to_string(test_set->example_size));
    }
    FEDRT_RETURN_IF_ERROR(CheckClassCount(*model_, test_set->num_classes, "the test set"));
    test_ = *test_set;
    evaluate_ = true;
  }

  if (config_.max_devices < 1) return InvalidArgument("max devices must be at least 1");
  if (config_.min_devices > config_.max_devices) {
    return InvalidArgument("min devices " + std::to_string(config_.min_devices) + " is more than max devices " +
                           std::to_string(config_.max_devices));
  }
  // Devices join with a key of the key store: no more can be joined at once.
  max_devices_ = std::min(config_.max_devices, std::max({std::size_t{1}, keys_.size(), config_.min_devices}));
  {
    std::vector<uint32_t> all(max_devices_);
    for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    const std::size_t bound = SampleDevices(all, config_.sampling, config_.session_seed, 0).size();
    if (config_.max_updates_per_round != 0 && config_.max_updates_per_round < bound) {
      return InvalidArgument("max updates per round " + std::to_string(config_.max_updates_per_round) +
                             " is less than a round samples from " + std::to_string(max_devices_) +
                             " devices (" + std::to_string(bound) + ")");
    }
    max_updates_ = config_.max_updates_per_round != 0 ? config_.max_updates_per_round : bound;
    held_capacity_ = HoldsUpdates(config_.aggregation) ? std::min(max_updates_, HeldUpdatesCap()) : 0;
  }
  // The largest payload a round may bring: every spec a device can be told
  // to send (NDQSG: the anchors' DQSG and each rho of the ladder).
  std::size_t instruction_specs = 1;
  {
    std::vector<std::string> specs = {config_.codec};
    if (nested_) {
      specs.push_back(anchor_spec_);
      for (int rho = base_rho_; rho <= config_.max_rho; rho = NdqsgNextRho(rho)) specs.push_back(NestedSpec(rho));
      instruction_specs = specs.size() - 1;  // the codec's spec is the base rho's
    }
    for (const std::string& spec : specs) {
      TensorSetCodec* built = CodecFor(spec);
      if (built == nullptr) return InvalidArgument("codec '" + spec + "' cannot be built for the model");
      max_payload_bytes_ = std::max(max_payload_bytes_, built->MaxEncodedSize(d_));
    }
  }
  payload_slot_bytes_ = (max_payload_bytes_ + 63) / 64 * 64;
  if (nested_) {
    if (config_.max_waiting_updates != 0) {
      return InvalidArgument("max waiting updates does not apply to NDQSG: its nested updates are decoded against "
                             "the mean of every anchor, so a round holds every payload until it closes");
    }
    payload_slot_count_ = max_updates_;
  } else {
    const std::size_t waiting = config_.max_waiting_updates != 0 ? config_.max_waiting_updates
                                                                 : AggregatorConfig::kDefaultWaitingUpdates;
    // The waiting ones plus one for the device whose turn it is.
    payload_slot_count_ = std::min(max_updates_, waiting + 1);
    // At most payload_slot_count_ - 1 updates wait, the last slot being kept
    // for the device whose turn it is.
    decoded_capacity_ = std::min(config_.max_decoded_waiting, payload_slot_count_ - 1);
  }
  mean_.assign(d_, 0.0f);
  if (nested_) ndqsg_mean_ = std::make_unique<NdqsgRunningMean>(d_);
  if (!config_.downlink_codec.empty() && config_.downlink_codec != "fp32") {
    Result<std::unique_ptr<Codec>> downlink = MakeCodec(config_.downlink_codec);
    if (!downlink.ok()) return downlink.status();
    if ((*downlink)->needs_side_info()) {
      return InvalidArgument("downlink codec '" + config_.downlink_codec + "' needs side information");
    }
    // Tensor by tensor for the quantizers, as the updates go up.
    Result<std::unique_ptr<TensorSetCodec>> tensors = MakeUpdateCodec(std::move(*downlink), tensor_sizes_);
    if (!tensors.ok()) return tensors.status();
    downlink_ = std::move(*tensors);
    device_model_.assign(d_, 0.0f);
    device_model_zero_ = true;
  }
  // The kinds of instructions a round can send: each spec a device can be
  // told to use (NDQSG: the anchors' DQSG and each rho of the ladder) in
  // each model encoding (full fp32, with a downlink codec also compressed
  // delta and compressed model), at the aggregator's frame limit; their
  // payload is at most the fp32 model or the downlink codec's largest.
  {
    instruction_entries_ = std::min(max_updates_, instruction_specs * (downlink_ ? 3 : 1));
    std::size_t model_bytes = d_ * sizeof(float);
    if (downlink_) model_bytes = std::max(model_bytes, downlink_->MaxPayloadSize(d_));
    Result<ChunkPlan> plan = ChunkPlan::Make(model_bytes, limits_.MaxChunkBytes());
    if (!plan.ok()) return plan.status();
    instruction_frames_per_entry_ = plan->count();
    const std::size_t chunk = std::min<std::size_t>(model_bytes, limits_.MaxChunkBytes());
    instruction_slot_bytes_ = (FrameSlotStorageBytes(chunk) + kBlockAlignment - 1) / kBlockAlignment * kBlockAlignment;
  }
  return Status();
}

Status Aggregator::State::Restore(AggregatorCheckpoint& saved) {
  if (opened_any_) return Status(StatusCode::kFailedPrecondition, "restore before the first connection opens");
  if (saved.model != config_.model || saved.parameters.size() != d_) {
    return Status(StatusCode::kFailedPrecondition,
                  "holds model '" + saved.model + "', not '" + config_.model + "'");
  }
  FEDRT_RETURN_IF_ERROR(optimizer_->Restore(std::move(saved.first_moment), std::move(saved.second_moment)));
  std::memcpy(model_->parameters(), saved.parameters.data(), d_ * sizeof(float));
  round_ = saved.round;
  counters_.rounds_completed = round_;
  if (dp() && !saved.dp_rdp.empty()) {
    FEDRT_RETURN_IF_ERROR(accountant_.Restore(saved.dp_rdp));
    Log(LogLevel::kInfo, "aggregator: DP: resumed at epsilon %.4g", accountant_.Epsilon(config_.dp.delta));
  } else if (dp() && round_ > 0) {
    // A checkpoint without privacy state (written without DP, or version 2):
    // its rounds are charged at q = 1, an upper bound.
    accountant_.Compose(1.0, config_.dp.noise_multiplier, round_);
    Log(LogLevel::kWarning, "aggregator: DP: the %" PRIu32 " restored rounds are charged at sampling rate 1 (epsilon %.4g)",
        round_, accountant_.Epsilon(config_.dp.delta));
  }
  if (dp() && round_ > 0) counters_.dp_epsilon = accountant_.Epsilon(config_.dp.delta);
  FEDRT_RETURN_IF_ERROR(RestoreCodecState(saved));
  if (downlink_ && device_model_round_ < 0) {
    // A trained model resumes exactly: its first broadcast is full models.
    device_model_.assign(model_->parameters(), model_->parameters() + d_);
    device_model_zero_ = false;
  }
  return Status();
}

// The codec state of a checkpoint, where it belongs to the codecs of this
// config: another update codec starts its table and rho afresh, another
// downlink codec (or none) starts from full models.
Status Aggregator::State::RestoreCodecState(AggregatorCheckpoint& saved) {
  if (!saved.codec.empty() && saved.codec == config_.codec) {
    if (levels_ && !saved.level_table.empty()) {
      LevelTable table;
      table.version = saved.level_table_version;
      table.levels = std::move(saved.level_table);
      const Status installed = levels_->SetLevelTable(table);
      if (!installed.ok()) return Corrupt("level table: " + installed.message());
    }
    if (levels_ && saved.rounds_since_refit < levels_->refit_interval()) {
      pending_levels_ = saved.pending_levels;  // copied: keeps the reserved room
      rounds_since_refit_ = saved.rounds_since_refit;
    }
    if (nested_) {
      for (const auto& [device, rho] : saved.rho) {
        if (rho < base_rho_ || rho > config_.max_rho) continue;  // the config changed: start over
        rho_.Put(device) = rho;
      }
      forced_anchors_.Recycle();
      for (const std::string& device : saved.forced_anchors) forced_anchors_.Put(device) = true;
    }
  } else if (!saved.codec.empty()) {
    Log(LogLevel::kInfo, "aggregator: the checkpoint holds the state of codec %s, not %s: its codec state is not used",
        saved.codec.c_str(), config_.codec.c_str());
  }
  if (downlink_ && saved.downlink_codec == downlink_->spec() && saved.device_model.size() == d_ &&
      saved.device_model_round >= 0 && CheckFinite(saved.device_model.data(), d_).ok()) {
    device_model_ = std::move(saved.device_model);
    device_model_round_ = saved.device_model_round;
    device_model_zero_ = false;
    synced_ = std::move(saved.synced);
    // Rank 0's file holds every rank's devices: a rank keeps its own.
    if (tier_ != nullptr) {
      for (auto it = synced_.begin(); it != synced_.end();) it = Mine(it->first) ? std::next(it) : synced_.erase(it);
    }
  }
  return Status();
}

void Aggregator::State::FillCheckpoint(AggregatorCheckpoint* checkpoint_out) {
  AggregatorCheckpoint& checkpoint = *checkpoint_out;
  checkpoint.model = config_.model;
  checkpoint.round = round_;
  checkpoint.parameters.assign(model_->parameters(), model_->parameters() + d_);
  checkpoint.first_moment = optimizer_->first_moment();
  checkpoint.second_moment = optimizer_->second_moment();
  checkpoint.codec = config_.codec;
  checkpoint.level_table_version = 0;
  checkpoint.level_table.clear();
  if (levels_) {
    checkpoint.level_table_version = levels_->level_table().version;
    checkpoint.level_table = levels_->level_table().levels;
    checkpoint.pending_levels = pending_levels_;
    checkpoint.rounds_since_refit = rounds_since_refit_;
  }
  RefillMap(rho_, &checkpoint.rho, &checkpoint_rho_nodes_);
  RefillKeys(forced_anchors_, &checkpoint.forced_anchors, &checkpoint_anchor_nodes_);
  checkpoint.dp_rdp.clear();
  if (dp()) checkpoint.dp_rdp = accountant_.rdp();
  checkpoint.downlink_codec.clear();
  checkpoint.device_model_round = -1;
  checkpoint.device_model.clear();
  RecycleNodes(&checkpoint.synced, &checkpoint_synced_nodes_);
  if (downlink_ && device_model_round_ >= 0) {
    const std::string_view spec = downlink_->spec().view();
    checkpoint.downlink_codec.assign(spec.data(), spec.size());
    checkpoint.device_model_round = device_model_round_;
    checkpoint.device_model = device_model_;
    RefillMap(tier_ != nullptr ? tier_synced_ : synced_, &checkpoint.synced, &checkpoint_synced_nodes_);
  }
}

// Once per round id: compresses model - device_model_ and applies the decoded
// delta to device_model_, exactly as every device will. What the codec loses
// stays in model - device_model_ and goes out with the next delta.
Status Aggregator::State::PrepareBroadcast() {
  if (!downlink_ || device_model_round_ == static_cast<int64_t>(round_)) return Status();
  float* delta = delta_;
  const float* model = model_->parameters();
  for (std::size_t i = 0; i < d_; ++i) delta[i] = model[i] - device_model_[i];
  const CodecContext context = ContextFor(kBroadcastSender);
  // The placed codec stages in its working space: its payload bound is room enough.
  Result<std::size_t> size = downlink_->Encode(delta, d_, context, broadcast_, broadcast_capacity_);
  if (!size.ok()) return size.status();
  broadcast_size_ = *size;
  // delta_ has been encoded: it is the scratch of the decode.
  FEDRT_RETURN_IF_ERROR(ApplyModelDelta(*downlink_, broadcast_, broadcast_size_, context, device_model_.data(),
                                        device_model_.data(), delta_, d_));
  broadcast_from_zeros_ = device_model_zero_;
  device_model_zero_ = false;
  device_model_round_ = round_;
  if (hooks_.on_broadcast) hooks_.on_broadcast(round_, device_model_);
  return Status();
}

const std::string& Aggregator::State::NestedSpec(int rho) {
  auto it = nested_specs_.find(rho);
  if (it != nested_specs_.end()) return it->second;
  Result<std::string> spec = NdqsgSpecWithRho(config_.codec, rho);
  // rho is always on the ladder between base_rho_ and max_rho, both checked.
  return nested_specs_[rho] = spec.ok() ? *spec : config_.codec;
}

int Aggregator::State::RhoOf(const std::string& device) const {
  auto it = rho_.find(device);
  return it == rho_.end() ? base_rho_ : it->second;
}

TensorSetCodec* Aggregator::State::CodecFor(const std::string& spec) {
  if (levels_ && spec == levels_->spec()) return levels_tensors_.get();  // holds this round's table
  auto it = codecs_.find(spec);
  if (it != codecs_.end()) return it->second.get();
  Result<std::unique_ptr<Codec>> codec = MakeCodec(spec);
  if (!codec.ok()) return nullptr;
  Result<std::unique_ptr<TensorSetCodec>> tensors = MakeUpdateCodec(std::move(*codec), tensor_sizes_);
  if (!tensors.ok()) return nullptr;
  return (codecs_[spec] = std::move(*tensors)).get();
}

void Aggregator::State::OnOpen(const std::shared_ptr<Connection>& connection) {
  opened_any_ = true;
  std::string address = AddressOf(connection->peer());
  auto from_address = joining_by_address_.find(address);
  const std::size_t waiting = from_address == joining_by_address_.end() ? 0 : from_address->second;
  if (joining_ >= config_.max_unjoined_connections) {
    return RefuseUnjoined(*connection, std::to_string(joining_) +
                                           " connections have not joined yet (max_unjoined_connections)");
  }
  if (waiting >= config_.max_unjoined_per_address) {
    return RefuseUnjoined(*connection, std::to_string(waiting) + " connections from " + address +
                                           " have not joined yet (max_unjoined_per_address)");
  }
  joining_by_address_[address]++;
  Peer& peer = peers_[connection->id()];
  peer.connection = connection;
  peer.address = std::move(address);
  peer.join = std::make_unique<JoinServer>(keys_, crypto_, limits_);
  peer.opened_ms = clock_.NowMs();
  joining_++;
}

// Closed at once, before anything of it is read (the connection is not in
// peers_, so OnClose ignores it). Logged at the 1st, 10th, 100th, ... refusal,
// so a flood of connections cannot flood the log.
void Aggregator::State::RefuseUnjoined(Connection& connection, const std::string& why) {
  refused_unjoined_++;
  counters_.connections_refused++;
  uint64_t power = 1;
  while (power * 10 <= refused_unjoined_) power *= 10;
  if (refused_unjoined_ == power) {
    Log(LogLevel::kWarning, "aggregator: refused %llu connection%s so far (the last from %s): %s",
        static_cast<unsigned long long>(refused_unjoined_), refused_unjoined_ == 1 ? "" : "s",
        connection.peer().c_str(), why.c_str());
  }
  connection.Abort(Status(StatusCode::kResourceExhausted, "too many connections waiting to join: " + why),
                   /*notify_peer=*/true);
}

// Whether a joined connection is alive: something (a frame, a heartbeat)
// arrived on it within the last idle_timeout_ms / 2, as far as the engine
// has seen. Its byte count is looked at on every frame and here, so a
// connection that goes quiet is found stale by a join that comes
// idle_timeout_ms / 2 after the last time it was seen to change. Without an
// idle timeout a connection is alive until it closes.
bool Aggregator::State::StillHeard(Peer& peer) {
  const uint64_t now = clock_.NowMs();
  const uint64_t bytes = peer.connection->stats().bytes_received;
  if (bytes != peer.heard_bytes) {
    peer.heard_bytes = bytes;
    peer.heard_ms = now;
  }
  return config_.idle_timeout_ms == 0 || now - peer.heard_ms < StaleAfterMs();
}

// A connection stops counting against the caps on unjoined connections.
void Aggregator::State::Joined(Peer& peer) {
  joining_--;
  auto it = joining_by_address_.find(peer.address);
  if (it != joining_by_address_.end() && --it->second == 0) joining_by_address_.erase(it);
}

void Aggregator::State::OnClose(Connection& connection, const Status& reason) {
  auto it = peers_.find(connection.id());
  if (it == peers_.end()) return;
  const std::string device = it->second.device_id;
  // The one line a dropped connection gets (the transport logs none for
  // the aggregator's connections): a warning when the aggregator or the
  // connection refused something, information when the device went away.
  if (!reason.ok() && !finished_) {
    const bool went_away = reason.code() == StatusCode::kUnavailable || reason.code() == StatusCode::kCancelled;
    Log(went_away ? LogLevel::kInfo : LogLevel::kWarning, "aggregator: connection %s%s%s closed: %s",
        connection.peer().c_str(), device.empty() ? "" : " of ", device.c_str(), reason.ToString().c_str());
  }
  if (!device.empty()) {
    auto owner = device_connection_.find(device);
    if (owner != device_connection_.end() && owner->second == connection.id()) device_connection_.erase(owner);
  }
  if (!it->second.authenticated) Joined(it->second);
  FreeSlot(it->second.slot);
  peers_.erase(it);
}

// Closes a connection in peers_, telling the device why. OnClose logs it,
// with the reason: one line per dropped connection.
void Aggregator::State::Refuse(Connection& connection, const Status& reason) {
  connection.Abort(reason, /*notify_peer=*/true);
}

void Aggregator::State::OnFrame(Connection& connection, const Frame& frame) {
  auto it = peers_.find(connection.id());
  if (it == peers_.end()) return;
  Peer& peer = it->second;
  if (!peer.authenticated) {
    OnJoinFrame(peer, connection, frame);
    return;
  }
  peer.heard_ms = clock_.NowMs();
  peer.heard_bytes = connection.stats().bytes_received;
  switch (frame.kind()) {
    case MessageKind::kUpdate:
      OnUpdateFrame(peer, connection, frame);
      break;
    case MessageKind::kAck: {
      Result<AckMessage> ack = DecodeAck(frame);
      if (ack.ok() && ack->acked == MessageKind::kRoundInstructions && ack->round_id == round_) {
        synced_[peer.device_id] = static_cast<int64_t>(ack->round_id);
        peer.instructions_acked_ms = clock_.NowMs();
      }
      break;
    }
    case MessageKind::kLeave:
      connection.Close();
      break;
    case MessageKind::kError: {
      Result<ErrorMessage> error = DecodeError(frame);
      Log(LogLevel::kWarning, "aggregator: device %s reports %s", peer.device_id.c_str(),
          error.ok() ? ToStatus(*error).ToString().c_str() : "an unreadable error");
      break;
    }
    default:
      Refuse(connection, Corrupt(std::string("unexpected ") + MessageKindName(frame.kind()) + " message"));
  }
}

void Aggregator::State::OnJoinFrame(Peer& peer, Connection& connection, const Frame& frame) {
  JoinResult result;
  result.current_round = round_;
  result.max_frame_bytes = limits_.max_frame_bytes;
  Result<OutFrame> reply = peer.join->OnFrame(frame, result);
  if (!reply.ok()) return Refuse(connection, reply.status());
  if (!peer.join->done()) {
    (void)connection.Send(*reply);  // the Challenge
    return;
  }
  // Authenticated. One connection per device id: while the established one
  // is alive, a second is refused (two devices configured with one id would
  // otherwise displace each other in a loop); one that has gone quiet (a
  // device whose link died without a close) gives way to the new join.
  const std::string device = peer.join->announcement().device_id;
  if (!Mine(device)) {
    // Served by another rank: complete the join (the Welcome proves this
    // rank holds the device's key, so the device can trust where it is sent),
    // then tell it where to go (transport/README.md, "Star protocol") and close.
    (void)connection.Send(*reply);
    const std::string to = tier_->AddressOf(ShardOfDevice(device, tier_->size()));
    LeaveMessage leave;
    const std::string reason = std::string(kRedirectPrefix) + to;
    leave.reason = reason;
    Result<OutFrame> out = Encode(leave, limits_);
    if (out.ok()) (void)connection.Send(*out);
    Log(LogLevel::kInfo, "aggregator: device %s joined from %s: redirected to its shard at %s", device.c_str(),
        connection.peer().c_str(), to.c_str());
    connection.Close();
    return;
  }
  std::shared_ptr<Connection> replaced;
  auto previous = device_connection_.find(device);
  if (previous != device_connection_.end() && previous->second != connection.id()) {
    auto old = peers_.find(previous->second);
    if (old != peers_.end()) {
      if (StillHeard(old->second)) {
        return Refuse(connection, Status(StatusCode::kUnavailable,
                                         "device " + device + " is already connected from " +
                                             old->second.connection->peer() +
                                             "; another connection is refused while that one is alive"));
      }
      replaced = old->second.connection;
      // Its unfinished update gives its slot back now, whenever the binding
      // reports the close.
      FreeSlot(old->second.slot);
      old->second.receiving = false;
    }
  }
  if (previous == device_connection_.end() && device_connection_.size() >= max_devices_) {
    return Refuse(connection, Status(StatusCode::kResourceExhausted,
                                     std::to_string(device_connection_.size()) +
                                         " devices are connected, as many as the aggregator holds (max devices)"));
  }
  // Full-size frames (updates) from now on.
  connection.LiftInitialFrameLimit();
  (void)connection.Send(*reply);
  peer.authenticated = true;
  Joined(peer);
  peer.device_id = device;
  peer.heard_ms = clock_.NowMs();
  peer.heard_bytes = connection.stats().bytes_received;
  const int64_t model_round = peer.join->announcement().model_round;  // the model round its Join names
  // 0 (a Join that names none) is this aggregator's own limit.
  const uint32_t announced = peer.join->announcement().max_frame_bytes;
  peer.max_frame_bytes = announced == 0 ? limits_.max_frame_bytes
                                        : std::clamp(announced, kMinFrameBytes, limits_.max_frame_bytes);
  if (levels_) ReserveLevels(&peer.levels);
  peer.join.reset();
  if (replaced) {
    replaced->Abort(Status(StatusCode::kCancelled, "replaced by a new join: nothing arrived on it for " +
                                                       std::to_string(StaleAfterMs()) + " ms"));
  }
  device_connection_[peer.device_id] = connection.id();
  // A new connection gets the full model first, unless the device still
  // holds the model of the round it last acknowledged (a reconnect, or the
  // same device after this aggregator restarted from its checkpoint).
  auto synced = synced_.find(peer.device_id);
  if (synced != synced_.end() && synced->second != model_round) synced_.erase(synced);
  counters_.joins++;
  Log(LogLevel::kInfo, "aggregator: device %s joined from %s (%zu connected)", peer.device_id.c_str(),
      connection.peer().c_str(), device_connection_.size());
  // Rejoined during a round it was sampled in and has not answered: resend.
  if (in_round_ && assigned_.count(peer.device_id) != 0 && answered_.count(peer.device_id) == 0) {
    const Status sent = SendInstructions(peer);
    if (!sent.ok()) Refuse(connection, sent);
  }
}

void Aggregator::State::OnUpdateFrame(Peer& peer, Connection& connection, const Frame& frame) {
  const Status decoded = DecodeUpdate(frame, limits_, &update_message_);
  if (!decoded.ok()) return Refuse(connection, decoded);
  const UpdateMessage& m = update_message_;
  if (m.payload.index == 0) {
    auto assignment = assigned_.find(peer.device_id);
    const bool current = in_round_ && m.round_id == round_;
    if (m.round_id > round_ || (current && assignment == assigned_.end())) {
      // No instructions ever asked for it: refused at its first chunk, so the
      // round does not wait for this device.
      if (current) Reject(UpdateRejection::kNotRequested);
      return Refuse(connection, Status(StatusCode::kFailedPrecondition,
                                       "an update for round " + std::to_string(m.round_id) + ", which " +
                                           (current ? "did not sample this device" : "has not started") +
                                           " (round " + std::to_string(round_) + " is " +
                                           (in_round_ ? "open" : "next") + ")"));
    }
    if (!current) {
      // A late update of an earlier round (or of an attempt of this round
      // that applied nothing) is not an attack: drop it quietly.
      Log(LogLevel::kInfo, "aggregator: dropping an update of round %llu from %s (round %" PRIu32 " is %s)",
          static_cast<unsigned long long>(m.round_id), peer.device_id.c_str(), round_,
          in_round_ ? "open" : "next");
      if (peer.receiving) FreeSlot(peer.slot);  // a reserved slot stays (InviteDeferred)
      peer.receiving = false;
      return;
    }
    if (m.codec_spec != assignment->second.spec) {
      Reject(UpdateRejection::kWrongCodec);
      return Refuse(connection, InvalidArgument("codec '" + std::string(m.codec_spec) + "' is not the instructed '" +
                                                assignment->second.spec + "'"));
    }
    Codec* codec = CodecFor(assignment->second.spec);
    if (codec == nullptr || m.payload.total_size > codec->MaxEncodedSize(d_)) {
      Reject(UpdateRejection::kTooLarge);
      return Refuse(connection, Status(StatusCode::kResourceExhausted,
                                       "an update of " + std::to_string(m.payload.total_size) +
                                           " bytes is larger than the codec allows for this model"));
    }
    if (m.num_samples == 0 || m.num_samples > config_.max_update_samples) {
      Reject(UpdateRejection::kBadSamples);
      return Refuse(connection, InvalidArgument("an update claims " + std::to_string(m.num_samples) +
                                                " samples; allowed are 1 to " +
                                                std::to_string(config_.max_update_samples) + " (max update samples)"));
    }
    if (codec == levels_tensors_.get()) {
      const Status levels = CheckLevels(m, assignment->second, &peer.levels);
      if (!levels.ok()) {
        Reject(UpdateRejection::kBadLevels);
        return Refuse(connection, levels);
      }
    }
    // A slot of an update started before and not finished is given back; one
    // reserved when the device was invited again (InviteDeferred) is used.
    if (peer.receiving) FreeSlot(peer.slot);
    if (peer.slot < 0) {
      // The last free slot is kept for the device whose turn in the sum it
      // is, so the sum always moves on. NDQSG has a slot for every update.
      if (free_slots_.empty() || (!nested_ && free_slots_.size() == 1 && !IsNextToSum(peer.device_id))) {
        if (nested_) {
          // Cannot happen: a round samples at most max_updates_ devices, each
          // receiving one update at a time.
          return Refuse(connection, Status(StatusCode::kResourceExhausted, "no room for another update this round"));
        }
        return Defer(peer, connection);
      }
      peer.slot = free_slots_.back();
      free_slots_.pop_back();
    }
    peer.update = ChunkSequence(codec->MaxEncodedSize(d_));
    peer.receiving = true;
    peer.update_round = m.round_id;
    peer.num_samples = m.num_samples;
    peer.loss = m.training_loss;
    peer.compute_ms = m.compute_ms;
  } else if (!peer.receiving || m.round_id != peer.update_round) {
    return;  // rest of a dropped update
  }
  const uint64_t offset = peer.update.received();
  const Status added = peer.update.Accept(m.payload);
  if (!added.ok()) {
    Reject(UpdateRejection::kBadChunks);
    return Refuse(connection, added);
  }
  // Accept bounds total_size by the codec's largest payload, which the slot holds.
  if (m.payload.size != 0) std::memcpy(SlotData(peer.slot) + offset, m.payload.data, m.payload.size);
  if (!peer.update.complete()) return;

  if (received_count_ == received_.size()) {
    // Made once, with room for any device id and (ALQ / AMQ) any statistics,
    // so later rounds assign into it without allocating.
    Received& made = received_.emplace_back();
    made.device_id.reserve(kMaxDeviceIdBytes);
    made.spec.reserve(kMaxCodecSpecSize);
    if (levels_) ReserveLevels(&made.levels);
  }
  Received& received = received_[received_count_];  // committed below, when accepted
  received.device_id = peer.device_id;
  received.sender_id = DeviceSenderId(peer.device_id);
  const Assignment& assignment = assigned_[peer.device_id];
  received.spec = assignment.spec;
  received.role = assignment.role;
  received.rho = assignment.rho;
  received.slot = -1;
  received.in_scratch = false;
  received.decoded = nullptr;
  received.added = true;
  received.download_ms = received.compute_ms = received.upload_ms = 0;
  received.num_samples = peer.num_samples;
  received.loss = peer.loss;
  received.payload = SlotData(peer.slot);
  received.payload_size = static_cast<std::size_t>(peer.update.total_size());
  received.wire_bytes = received.payload_size;
  received.slot = peer.slot;
  peer.slot = -1;
  peer.receiving = false;
  received.arrived_ms = clock_.NowMs();
  if (peer.instructions_acked_ms >= round_started_ms_ && peer.instructions_acked_ms != 0) {
    received.download_ms = peer.instructions_acked_ms - round_started_ms_;
    received.compute_ms = std::min<uint64_t>(peer.compute_ms, received.arrived_ms - peer.instructions_acked_ms);
    received.upload_ms = received.arrived_ms - peer.instructions_acked_ms - received.compute_ms;
  }
  if (answered_.count(received.device_id) != 0) {
    // A round that closed without updates runs again with the same id, so a
    // device can answer both attempts: the first answer counts.
    Log(LogLevel::kInfo, "aggregator: dropping a second update of round %" PRIu32 " from %s", round_,
        received.device_id.c_str());
    FreeSlot(received.slot);
    return;
  }
  const Status checked = CheckUpdate(received);
  if (!checked.ok()) {
    FreeSlot(received.slot);
    Reject(UpdateRejection::kBadValues);
    return Refuse(connection, checked);
  }
  // Copied: both keep their reserved room.
  if (levels_ && received.spec == levels_->spec()) received.levels = peer.levels;
  answered_.Put(received.device_id) = received_count_;
  received_count_++;
  if (!nested_) SumInOrder(false);
  // Summed, or not its turn: scratch_ is reused by the next decode.
  received.in_scratch = false;
  if (!round_ack_.empty()) (void)connection.Send(round_ack_);
}

// ALQ / AMQ: the update must name the table version this round instructed
// (updates of earlier rounds never get here: they are dropped by round, so a
// round needs no older table) and carry statistics that pass
// ValidateLevelStatistics for at most d coordinates.
Status Aggregator::State::CheckLevels(const UpdateMessage& m, const Assignment& assignment, LevelStatistics* levels) const {
  if (m.level_table_version != assignment.level_table_version) {
    const bool stale = m.level_table_version < assignment.level_table_version;
    return Status(StatusCode::kFailedPrecondition,
                  "the update names level table version " + std::to_string(m.level_table_version) +
                      (stale ? " (stale)" : " (unknown)") + ", round " + std::to_string(round_) +
                      " uses version " + std::to_string(assignment.level_table_version));
  }
  const LevelStatisticsMessage& s = m.stats.level_statistics;
  if (!s.present) return InvalidArgument("an " + assignment.spec + " update without level statistics");
  levels->bucket_norms.clear();
  levels->largest_buckets.clear();
  levels->count = s.count;
  levels->sum = s.sum;
  levels->sum_sq = s.sum_sq;
  levels->bucket_norms.assign(s.bucket_norms.begin(), s.bucket_norms.end());
  for (const BucketMomentsMessage& b : s.largest_buckets) {
    levels->largest_buckets.push_back({b.norm, b.count, b.sum, b.sum_sq});
  }
  return ValidateLevelStatistics(*levels, static_cast<double>(d_));
}

// ALQ / AMQ, once a round is applied: the statistics of the round's accepted
// updates join those since the last fit; every refit=N rounds the next table,
// version + 1, is fitted to them (deterministic, and the merge does not depend
// on arrival order). Without statistics the table stays.
void Aggregator::State::RefitLevels() {
  if (!levels_) return;
  if (tier_ != nullptr) {
    pending_levels_.Merge(tier_levels_);  // every rank's, merged by SharePlainRound
  } else {
    // Merged in device order, like the sums: the double sums then do not
    // depend on the order the updates arrived in.
    for (const auto& entry : answered_) pending_levels_.Merge(received_[entry.second].levels);
  }
  // refit=N: every N applied rounds, from the statistics of all N.
  if (++rounds_since_refit_ < levels_->refit_interval()) return;
  rounds_since_refit_ = 0;
  const LevelStatistics& round_levels = pending_levels_;
  if (round_levels.count == 0) return;
  const uint32_t next = levels_->level_table().version + 1;
  // Into a table kept from round to round (the fit and the install allocate nothing).
  const Status fitted = FitLevelTableInto(*levels_, round_levels, next, &fitted_table_);
  // Emptied for the next interval; its vectors keep their memory.
  pending_levels_.count = pending_levels_.sum = pending_levels_.sum_sq = 0;
  pending_levels_.bucket_norms.clear();
  pending_levels_.largest_buckets.clear();
  const Status installed = fitted.ok() ? levels_->SetLevelTable(fitted_table_) : fitted;
  if (!installed.ok()) {
    Log(LogLevel::kWarning, "aggregator: level table %" PRIu32 " not fitted, version %" PRIu32 " stays: %s", next, next - 1,
        installed.ToString().c_str());
  }
}

// Decodes what can be decoded now and checks the result is finite. A nested
// NDQSG payload is decoded against zeros here (which validates every count,
// symbol and scale) and for real when the round closes.
Status Aggregator::State::CheckUpdate(Received& received) {
  Codec* codec = CodecFor(received.spec);
  if (codec == nullptr) return InvalidArgument("unknown codec '" + received.spec + "'");
  const CodecContext context = ContextFor(received.sender_id);
  const bool nested = codec->needs_side_info();
  // A plain update that arrived before its turn is decoded into a free
  // buffer of the decoded pool (none in NDQSG rounds), where it waits.
  const bool keep = !nested_ && !free_decoded_.empty() && !IsNextToSum(received.device_id);
  float* values = keep ? free_decoded_.back() : scratch_;
  FEDRT_RETURN_IF_ERROR(codec->Decode(received.payload, received.payload_size, context, values, d_,
                                      nested ? zeros_ : nullptr));
  // Its real values exist only against the running mean: bounded at the close.
  if (nested || config_.max_update_norm <= 0) FEDRT_RETURN_IF_ERROR(CheckFinite(values, d_));
  if (nested) return Status();
  // A finite norm means finite values, so the update is read once; only one
  // that fails is scanned for NaN and Inf (the reason names the coordinate).
  const Status bounded = CheckUpdateNorm(values, d_, config_.max_update_norm);
  if (!bounded.ok()) {
    FEDRT_RETURN_IF_ERROR(CheckFinite(values, d_));
    return bounded;
  }
  // Every update keeps its payload in its slot. A plain update whose turn it
  // is is summed right away from scratch_ (SumInOrder), and its slot freed;
  // one that arrived before an earlier device's waits in its decoded buffer,
  // or, with none free, is decoded again at its turn; NDQSG anchors are
  // decoded again when the round closes. So a round holds one model-sized
  // sum plus the payloads (and a bounded number of decoded copies) of early
  // arrivals, and its float sum does not depend on the arrival order.
  if (keep) {
    received.decoded = values;
    free_decoded_.pop_back();
  } else {
    received.in_scratch = true;
  }
  return Status();
}

CodecContext Aggregator::State::ContextFor(uint32_t sender_id) const {
  CodecContext context;
  context.session_seed = config_.session_seed;
  context.round = round_;
  context.sender_id = sender_id;
  return context;
}

// Whether `device` is the next one SumInOrder waits for: the first of
// selected_[next_sum_..] this rank serves that has not answered.
bool Aggregator::State::IsNextToSum(const std::string& device) const {
  for (std::size_t k = next_sum_; k < selected_.size(); ++k) {
    if (!Mine(selected_[k]) || answered_.count(selected_[k]) != 0) continue;
    return selected_[k] == device;
  }
  return false;
}

// An update that found the pool full and whose turn it is not: dropped, and
// the device told why; it is invited again (InviteDeferred) when a slot is
// free. Its connection stays open, so the round still waits for it.
void Aggregator::State::Defer(Peer& peer, Connection& connection) {
  peer.receiving = false;  // its further chunks are dropped
  counters_.updates_deferred++;
  for (std::size_t k = 0; k < deferred_count_; ++k) {
    if (deferred_[k] == peer.device_id) return;  // already waiting for a slot
  }
  if (deferred_count_ == deferred_.size()) deferred_.emplace_back();
  deferred_[deferred_count_++] = peer.device_id;  // copy-assigned: reuses the string's capacity
  const uint64_t deferred = counters_.updates_deferred;
  uint64_t power = 1;
  while (power * 10 <= deferred) power *= 10;
  if (deferred == power) {
    Log(LogLevel::kInfo, "aggregator: round %" PRIu32 ": %zu updates wait for their turn (max waiting updates); "
        "deferred %llu so far, the last from %s", round_ + 1, payload_slot_count_ - 1,
        static_cast<unsigned long long>(deferred), peer.device_id.c_str());
  }
  const Status busy(StatusCode::kUnavailable,
                    "round " + std::to_string(round_ + 1) + ": " + std::to_string(payload_slot_count_ - 1) +
                        " updates wait for their turn in the sum (max waiting updates); this one is dropped and "
                        "the round's instructions come again when there is room for it");
  Result<OutFrame> out = EncodeStatus(busy, limits_);
  if (out.ok()) (void)connection.Send(std::move(*out));
}

// Gives free slots to deferred devices and sends them the round's
// instructions again: the one whose turn it is first (it may take the last
// slot), then in the order they were deferred while more than one is free.
// A slot is reserved for the device while it trains again.
void Aggregator::State::InviteDeferred() {
  if (!in_round_ || deferred_count_ == 0 || free_slots_.empty()) return;
  const auto invite = [&](std::size_t k) {
    // Out of the list, in order; the strings keep their memory.
    std::rotate(deferred_.begin() + static_cast<std::ptrdiff_t>(k),
                deferred_.begin() + static_cast<std::ptrdiff_t>(k) + 1,
                deferred_.begin() + static_cast<std::ptrdiff_t>(deferred_count_));
    deferred_count_--;
    const std::string& device = deferred_[deferred_count_];
    Peer* peer = PeerOf(device);
    if (peer == nullptr || answered_.count(device) != 0 || assigned_.count(device) == 0) return;
    if (peer->receiving) FreeSlot(peer->slot);
    peer->receiving = false;
    if (peer->slot < 0) {
      peer->slot = free_slots_.back();
      free_slots_.pop_back();
    }
    const Status sent = SendInstructions(*peer);
    if (!sent.ok()) Refuse(*peer->connection, sent);
  };
  for (std::size_t k = 0; k < deferred_count_; ++k) {
    if (IsNextToSum(deferred_[k])) {
      invite(k);
      break;
    }
  }
  while (deferred_count_ > 0 && free_slots_.size() > 1) invite(0);
}

// Adds the plain updates of selected_[next_sum_..] that have arrived, in that
// order, stopping at the first device that has not answered; `closing`
// skips the devices that never answered.
void Aggregator::State::SumInOrder(bool closing) {
  for (; next_sum_ < selected_.size(); ++next_sum_) {
    auto it = answered_.find(selected_[next_sum_]);
    if (it == answered_.end()) {
      if (closing || !Mine(selected_[next_sum_])) continue;  // another rank sums it
      return;
    }
    Received& r = received_[it->second];
    Status added;
    const float* values = r.decoded != nullptr ? r.decoded : scratch_;
    if (r.decoded == nullptr && !r.in_scratch) {
      counters_.updates_decoded_again++;
      added = CodecFor(r.spec)->Decode(r.payload, r.payload_size, ContextFor(r.sender_id), scratch_, d_, nullptr);
    }
    if (added.ok()) added = Contribute(r, values);
    if (!added.ok()) {
      // Checked on arrival; cannot fail unless memory is corrupt.
      Log(LogLevel::kError, "aggregator: update of %s not added: %s", r.device_id.c_str(), added.ToString().c_str());
      r.added = false;
    }
    FreeSlot(r.slot);
    if (r.decoded != nullptr) free_decoded_.push_back(r.decoded);
    r.decoded = nullptr;
  }
}

// One decoded update into the round, at its turn (the order of selected_):
// clipped (clip_update_norm, or dp.clip with weight 1 in DP rounds), then
// summed (mean) or held for the rule.
Status Aggregator::State::Contribute(const Received& received, const float* decoded) {
  double weight = static_cast<double>(received.num_samples);
  const double clip = dp() ? config_.dp.clip : config_.clip_update_norm;
  // The running sum checks what it adds (AddDecoded); an update that is
  // copied (clipped, or held for a rule) is checked before it is.
  if (clip > 0 || HoldsUpdates(config_.aggregation)) FEDRT_RETURN_IF_ERROR(CheckFinite(decoded, d_));
  if (dp()) weight = 1.0;
  const float* update = decoded;
  if (clip > 0) {
    std::copy(decoded, decoded + d_, contribution_);
    if (ClipToNorm(contribution_, d_, clip) < 1.0) clipped_++;
    update = contribution_;
  }
  if (!HoldsUpdates(config_.aggregation)) return sum_->AddDecoded(update, weight);
  if (!(weight > 0.0) || !std::isfinite(weight)) return InvalidArgument("update weight must be positive");
  if (held_.size() >= held_capacity_) return Status(StatusCode::kResourceExhausted, "no room for another update");
  float* held = held_memory_ + held_.size() * d_;
  std::copy(update, update + d_, held);
  held_.push_back(held);
  held_weights_.push_back(weight);
  held_devices_.push_back(&received.device_id);
  return Status::Ok();
}

// The round's combined update. With a tier, DP rounds and a robust rule's
// plain rounds are combined by rank 0 alone, which sends the others its
// result: the DP noise is drawn once, and only rank 0 holds every update
// (GatherHeld). NDQSG rounds with a robust rule are combined by every rank,
// which decoded and holds the whole round.
Status Aggregator::State::Combine(std::vector<float>* mean, RoundReport& report) {
  const bool rank0_combines = tier_ != nullptr && (dp() || (HoldsUpdates(config_.aggregation) && !nested_));
  Status combined;
  if (!rank0_combines || tier_->rank() == 0) combined = CombineHere(mean, report);
  return rank0_combines ? ShareRank0Combination(combined, mean, report) : combined;
}

// The running mean, a robust rule over the held updates, or the DP-FedAvg
// estimate (noised sum / devices sampled).
Status Aggregator::State::CombineHere(std::vector<float>* mean, RoundReport& report) {
  if (dp()) {
    std::copy(sum_->sum(), sum_->sum() + d_, noised_);
    AddGaussianNoise(dp_noise_seed_, round_, config_.dp.noise_multiplier * config_.dp.clip, noised_, d_);
    const double denominator = static_cast<double>(std::max<std::size_t>(1, selected_.size()));
    for (std::size_t i = 0; i < d_; ++i) (*mean)[i] = static_cast<float>(noised_[i] / denominator);
    return Status::Ok();
  }
  if (!HoldsUpdates(config_.aggregation)) {
    sum_->MeanInto(mean->data());
    return Status::Ok();
  }
  AggregationDetail& detail = aggregation_detail_;
  FEDRT_RETURN_IF_ERROR(
      Aggregate(config_.aggregation, held_, held_weights_, d_, mean->data(), &detail, &aggregation_scratch_));
  for (std::size_t k : detail.selected) AppendId(&report.selected, &spare_ids_, *held_devices_[k]);
  return Status::Ok();
}

// DP with a budget: whether the next round, sampled as StartRound will
// sample it, keeps epsilon within the budget.
// `connected`: every rank's devices with a tier (TickView), so every rank
// decides the same.
bool Aggregator::State::BudgetAllowsRound(std::size_t connected) {
  if (!dp() || config_.dp.epsilon_budget <= 0) return true;
  std::vector<uint32_t> indices(connected);
  for (uint32_t i = 0; i < indices.size(); ++i) indices[i] = i;
  const std::size_t sampled = SampleDevices(indices, config_.sampling, config_.session_seed, round_).size();
  const double q = connected > 0 ? static_cast<double>(sampled) / static_cast<double>(connected) : 1.0;
  const double next = accountant_.EpsilonAfter(q, config_.dp.noise_multiplier, config_.dp.delta);
  if (next <= config_.dp.epsilon_budget) return true;
  Log(LogLevel::kWarning,
      "aggregator: DP budget: round %" PRIu32 " would spend epsilon %.4g > budget %.4g at delta %g (spent %.4g); stopping",
      round_ + 1, next, config_.dp.epsilon_budget, config_.dp.delta, accountant_.Epsilon(config_.dp.delta));
  return false;
}

Peer* Aggregator::State::PeerOf(const std::string& device_id) {
  auto it = device_connection_.find(device_id);
  if (it == device_connection_.end()) return nullptr;
  auto peer = peers_.find(it->second);
  return peer == peers_.end() ? nullptr : &peer->second;
}

Status Aggregator::State::SendInstructions(Peer& peer) {
  const Assignment& assignment = assigned_[peer.device_id];
  // A compressed delta only fits a device holding the previous round's device
  // model; every other device gets the full model, compressed when this
  // round's broadcast is the whole model (from zeros).
  ModelEncoding encoding = ModelEncoding::kFullModelFp32;
  if (downlink_) {
    // A straggler whose acknowledgement of the previous round is still on
    // its way (a round closed at its quorum or deadline) gets the delta too,
    // not the full model its slow link would take longest to carry.
    auto synced = synced_.find(peer.device_id);
    const int64_t previous = static_cast<int64_t>(round_) - 1;
    if (previous >= 0 && ((synced != synced_.end() && synced->second == previous) || peer.instructions_round == previous)) {
      encoding = ModelEncoding::kCompressedDelta;
    } else if (broadcast_from_zeros_) {
      encoding = ModelEncoding::kCompressedModel;
    } else {
      full_models_down_++;
    }
  }
  InstructionFrames* entry = nullptr;
  for (std::size_t k = 0; k < instruction_frames_used_ && entry == nullptr; ++k) {
    InstructionFrames& e = instruction_frames_[k];
    if (e.spec == assignment.spec && e.role == assignment.role && e.encoding == encoding &&
        e.level_table_version == assignment.level_table_version && e.max_frame_bytes == peer.max_frame_bytes) {
      entry = &e;
    }
  }
  if (entry == nullptr) {
    if (instruction_frames_used_ == instruction_frames_.size()) {
      instruction_frames_.emplace_back().spec.reserve(kMaxCodecSpecSize);
    }
    InstructionFrames& e = instruction_frames_[instruction_frames_used_];
    e.spec = assignment.spec;  // copy-assigned: reuses the string's capacity
    e.role = assignment.role;
    e.encoding = encoding;
    e.level_table_version = assignment.level_table_version;
    e.max_frame_bytes = peer.max_frame_bytes;
    e.frames.clear();
    FEDRT_RETURN_IF_ERROR(EncodeInstructions(assignment, encoding, peer.max_frame_bytes, &e.frames));
    instruction_frames_used_++;
    entry = &e;
  }
  const std::vector<OutFrame>& frames = entry->frames;
  if (hooks_.on_instructions) {  // before sending: a test may read it as soon as the frames arrive
    std::vector<uint8_t> bytes;
    for (const OutFrame& frame : frames) frame.AppendWireBytes(&bytes);
    hooks_.on_instructions(round_, peer.device_id, bytes);
  }
  for (const OutFrame& frame : frames) FEDRT_RETURN_IF_ERROR(peer.connection->Send(frame));
  peer.instructions_round = static_cast<int64_t>(round_);
  bytes_down_ += encoding == ModelEncoding::kFullModelFp32 ? d_ * sizeof(float) : broadcast_size_;
  return Status();
}

Status Aggregator::State::EncodeInstructions(const Assignment& assignment, ModelEncoding encoding, uint32_t max_frame_bytes,
                                             std::vector<OutFrame>* frames) {
  const uint8_t* model = reinterpret_cast<const uint8_t*>(model_->parameters());
  std::size_t model_size = d_ * sizeof(float);
  if (encoding != ModelEncoding::kFullModelFp32) {
    model = broadcast_;
    model_size = broadcast_size_;
  } else if (downlink_) {
    model = reinterpret_cast<const uint8_t*>(device_model_.data());
  }
  RoundInstructionsMessage m;
  m.round_id = round_;
  m.model_encoding = encoding;
  m.model_parameters = d_;
  m.codec_spec = assignment.spec;
  m.session_seed = config_.session_seed;
  m.local_epochs = config_.local_epochs;
  m.local_steps = config_.local_steps;
  m.learning_rate = config_.learning_rate;
  m.anchor_role = assignment.role;
  if (levels_ && assignment.spec == levels_->spec()) {
    m.level_table_version = assignment.level_table_version;
    m.level_table = levels_->level_table().levels.data();
    m.level_table_size = levels_->level_table().levels.size();
  }
  m.deadline_ms = config_.round_deadline_ms;
  FrameLimits limits = limits_;
  limits.max_frame_bytes = max_frame_bytes;
  // Each frame in a slot no connection holds a frame of (the model is
  // copied in: it changes when the round closes, while a slow connection may
  // still be sending); a new slot only when every one is busy.
  return ForEachChunk(m, model, model_size, limits, [&](uint32_t, uint32_t, const RoundInstructionsMessage& chunk) {
    FrameSlot* slot = nullptr;
    for (const auto& candidate : instruction_slots_) {
      if (!candidate->busy()) {
        slot = candidate.get();
        break;
      }
    }
    if (slot == nullptr) {
      instruction_slots_.push_back(std::make_unique<FrameSlot>());
      slot = instruction_slots_.back().get();
    }
    Result<OutFrame> frame = Encode(chunk, limits, *slot, PayloadMode::kCopy);
    if (!frame.ok()) return frame.status();
    frames->push_back(std::move(*frame));
    return Status::Ok();
  });
}

// Each kind of instructions a round can send (Init) gets its entry (spec
// string and frame list at full size) and its frames' slots, building in the
// block, so a device moved to a new rho mid-run finds them ready. A device
// whose connection takes smaller frames than the aggregator's still makes
// its own entry the first time, and a slot still busy on a slow connection
// is replaced by one on the heap.
void Aggregator::State::ReserveInstructions(unsigned char* storage) {
  const std::size_t slots = instruction_entries_ * instruction_frames_per_entry_;
  // Room for one more entry's slots: frames still queued from the last round.
  instruction_slots_.reserve(slots + instruction_frames_per_entry_);
  for (std::size_t i = 0; i < slots; ++i) {
    instruction_slots_.push_back(
        std::make_unique<FrameSlot>(storage + i * instruction_slot_bytes_, instruction_slot_bytes_));
  }
  instruction_frames_.reserve(instruction_entries_);
  while (instruction_frames_.size() < instruction_entries_) {
    InstructionFrames& e = instruction_frames_.emplace_back();
    e.spec.reserve(kMaxCodecSpecSize);
    e.frames.reserve(instruction_frames_per_entry_);
  }
}

void Aggregator::State::StartRound() {
  connected_.clear();
  if (tier_ == nullptr) {
    for (const auto& entry : device_connection_) connected_.push_back(&entry.first);  // sorted (map order)
  } else {
    const Status gathered = GatherDevices();
    if (!gathered.ok()) return TierFailed(gathered);
    for (const std::string& device : tier_devices_) connected_.push_back(&device);
    tier_round_.received.clear();
  }
  SampleDeviceIndices(connected_.size(), config_.sampling, config_.session_seed, round_, &chosen_, &sample_words_);
  if (HoldsUpdates(config_.aggregation) && chosen_.size() > held_capacity_) {
    // The rule needs every decoded update at once and the block has room
    // for held_capacity_: refused before any device is asked.
    stopped_ = Status(StatusCode::kResourceExhausted,
                      "round " + std::to_string(round_ + 1) + " would sample " + std::to_string(chosen_.size()) +
                          " of " + std::to_string(connected_.size()) + " connected devices; aggregation " +
                          AggregationRuleName(config_.aggregation) + " holds every decoded update of a round and " +
                          "the aggregator has room for " + std::to_string(held_capacity_) +
                          " (max held updates): raise it or sample fewer");
    Log(LogLevel::kError, "aggregator: %s", stopped_.message().c_str());
    FinishAll(stopped_.message());
    return;
  }
  assigned_.Recycle();
  received_count_ = 0;
  sum_->Reset();
  // Every slot is free again: updates still arriving for the last round are
  // dropped at their next chunk (their round id).
  free_slots_.clear();
  for (std::size_t i = payload_slot_count_; i-- > 0;) free_slots_.push_back(static_cast<int>(i));
  free_decoded_.clear();
  for (std::size_t i = decoded_capacity_; i-- > 0;) free_decoded_.push_back(decoded_memory_ + i * d_);
  deferred_count_ = 0;
  for (auto& entry : peers_) {
    entry.second.slot = -1;
    entry.second.receiving = false;
  }
  held_.clear();
  held_weights_.clear();
  held_devices_.clear();
  clipped_ = 0;
  population_ = connected_.size();
  answered_.Recycle();
  AckMessage ack;
  ack.round_id = round_;
  ack.acked = MessageKind::kUpdate;
  round_ack_ = OutFrame();  // lets go of the slot, unless a connection still holds last round's Ack
  Result<OutFrame> ack_frame = ack_slot_.busy() ? Encode(ack, limits_) : Encode(ack, limits_, ack_slot_);
  round_ack_ = ack_frame.ok() ? std::move(*ack_frame) : OutFrame();
  next_sum_ = 0;
  // Last round's frames let go of their slots (unless still queued).
  for (std::size_t k = 0; k < instruction_frames_used_; ++k) instruction_frames_[k].frames.clear();
  instruction_frames_used_ = 0;
  rejected_ = 0;
  bytes_down_ = 0;
  full_models_down_ = 0;
  const Status prepared = PrepareBroadcast();
  if (!prepared.ok()) {
    // Cannot happen with a finite model; fall back to full models this round.
    Log(LogLevel::kError, "aggregator: downlink: %s", prepared.ToString().c_str());
    device_model_.assign(model_->parameters(), model_->parameters() + d_);
    device_model_round_ = round_;
    device_model_zero_ = broadcast_from_zeros_ = false;
    synced_.clear();
  }
  // Assigned over the last round's strings (a shrink and regrow loses some).
  while (selected_.size() < chosen_.size()) selected_.emplace_back().reserve(kMaxDeviceIdBytes);
  selected_.resize(chosen_.size());
  for (std::size_t k = 0; k < chosen_.size(); ++k) selected_[k] = *connected_[chosen_[k]];
  wanted_ = SampleTarget(connected_.size(), config_.sampling);

  anchors_.clear();
  if (nested_) {
    for (const std::string& device : selected_) anchors_.push_back(DeviceSenderId(device));
    const std::size_t count = NdqsgAnchorCount(anchors_.size(), config_.anchor_fraction);
    // Moved in and out: the vector keeps its memory.
    anchors_ = ChooseNdqsgAnchors(config_.session_seed, round_, std::move(anchors_), count);
  }
  for (const std::string& device : selected_) {
    // Every field assigned in place: the spec reuses the entry's string.
    Assignment& assignment = assigned_.Put(device);
    assignment.spec = config_.codec;
    assignment.role = AnchorRole::kNone;
    assignment.rho = 0;
    assignment.level_table_version = levels_ ? levels_->level_table().version : 0;
    if (nested_) {
      const bool anchor = std::binary_search(anchors_.begin(), anchors_.end(), DeviceSenderId(device)) ||
                          forced_anchors_.count(device) != 0;
      assignment.rho = anchor ? 0 : RhoOf(device);
      assignment.spec = anchor ? anchor_spec_ : NestedSpec(assignment.rho);
      assignment.role = anchor ? AnchorRole::kAnchor : AnchorRole::kNested;
    }
  }
  in_round_ = true;
  round_started_ms_ = clock_.NowMs();
  round_deadline_ms_ = round_started_ms_ + config_.round_deadline_ms;
  for (const std::string& device : selected_) {
    Peer* peer = PeerOf(device);
    if (peer == nullptr) continue;
    const Status sent = SendInstructions(*peer);
    if (!sent.ok()) Refuse(*peer->connection, sent);
  }
}

// Wrap-driven adaptation of one device's nesting ratio after its nested
// update was decoded with `rho`. Returns the rho of its next nested update,
// 0 when it is switched to plain DQSG (an anchor) for the next round.
int Aggregator::State::Adapt(const std::string& device, int rho, std::size_t near_wraps, RoundReport& report) {
  const double limit = config_.wrap_threshold * static_cast<double>(d_);
  const double count = static_cast<double>(near_wraps);
  int next = rho;
  if (count > limit) {
    if (NdqsgNextRho(rho) <= config_.max_rho) {
      next = NdqsgNextRho(rho);
      report.rho_raised++;
      Log(LogLevel::kInfo, "aggregator: %s came near the wrap boundary on %zu coordinates: rho %d -> %d",
          device.c_str(), near_wraps, rho, next);
    } else {
      forced_anchors_.Put(device) = true;
      report.switched_to_dqsg++;
      Log(LogLevel::kInfo, "aggregator: %s came near the wrap boundary on %zu coordinates at rho %d: dqsg next round",
          device.c_str(), near_wraps, rho);
    }
  } else if (count * 4 < limit && rho > base_rho_) {
    next = std::max(base_rho_, NdqsgPreviousRho(rho));
    report.rho_lowered++;
  }
  if (next == base_rho_) {
    rho_.Erase(device);
  } else {
    rho_.Put(device) = next;
  }
  return forced_anchors_.count(device) != 0 ? 0 : next;
}

void Aggregator::State::CloseRound() {
  in_round_ = false;
  UpdateAccumulator& accumulator = *sum_;  // plain rounds: filled as the updates arrived
  // The last round's report, emptied: its vectors keep their memory.
  RoundReport& report = report_;
  {
    std::vector<DeviceRoundReport> devices = std::move(report.devices);
    std::vector<float> level_table = std::move(report.level_table);
    std::vector<std::string> selected = std::move(report.selected);
    std::string failure = std::move(report.failure);
    report = RoundReport();
    // The entries' strings go to the spares the next ones are made from.
    for (DeviceRoundReport& device : devices) spare_devices_.push_back(std::move(device));
    for (std::string& id : selected) spare_ids_.push_back(std::move(id));
    devices.clear();
    level_table.clear();
    selected.clear();
    failure.clear();
    report.devices = std::move(devices);
    report.level_table = std::move(level_table);
    report.selected = std::move(selected);
    report.failure = std::move(failure);
  }
  report.round = round_ + 1;
  report.sampled = selected_.size();
  double loss_sum = 0;
  double sample_sum = 0;
  forced_anchors_.Recycle();
  const auto count = [&](const Received& r) {
    report.updates++;
    loss_sum += static_cast<double>(r.loss) * static_cast<double>(r.num_samples);
    sample_sum += static_cast<double>(r.num_samples);
  };
  const auto add = [&](const Received& r, const float* decoded) {
    const Status added = Contribute(r, decoded);
    if (!added.ok()) {
      Log(LogLevel::kWarning, "aggregator: update of %s not added: %s", r.device_id.c_str(), added.ToString().c_str());
      report.rejected++;
      counters_.updates_rejected[static_cast<int>(UpdateRejection::kNotCombined)]++;
      return;
    }
    count(r);
  };
  // Everything below goes in the order of selected_ (sorted device ids), not
  // of arrival: float sums, the NDQSG running mean (and so the nested
  // decodes and their wraps) are the same whatever the timing.
  if (!nested_) SumInOrder(true);
  // With a tier every rank decodes the whole NDQSG round: the other ranks'
  // updates join received_ here.
  if (nested_ && tier_ != nullptr) {
    const Status shared = ShareNestedUpdates();
    if (!shared.ok()) return TierFailed(shared);
  }
  std::vector<const Received*>& ordered = ordered_;
  ordered.clear();
  for (const std::string& device : selected_) {
    auto it = answered_.find(device);
    if (it != answered_.end()) ordered.push_back(&received_[it->second]);
  }
  if (nested_) {
    NdqsgRunningMean& mean = *ndqsg_mean_;
    mean.Reset();
    for (const Received* anchor : ordered) {
      const Received& r = *anchor;
      if (r.role == AnchorRole::kNested) continue;
      // Decoded and checked on arrival; decoded again here, from its slot.
      const Status decoded = CodecFor(r.spec)->Decode(r.payload, r.payload_size, ContextFor(r.sender_id), scratch_,
                                                      d_, nullptr);
      if (!decoded.ok()) {
        Log(LogLevel::kError, "aggregator: anchor update of %s not added: %s", r.device_id.c_str(),
            decoded.ToString().c_str());
        report.rejected++;
        counters_.updates_rejected[static_cast<int>(UpdateRejection::kNotCombined)]++;
        continue;
      }
      mean.Add(scratch_);
      report.anchors++;
      report.anchor_bytes_up += r.wire_bytes;
      DeviceRoundReport& device = NextDeviceReport(&report);
      device.device_id = r.device_id;
      device.anchor = true;
      device.next_rho = RhoOf(r.device_id);
      device.bytes = r.wire_bytes;
      add(r, scratch_);
    }
    for (const Received* nested : ordered) {
      const Received& r = *nested;
      if (r.role != AnchorRole::kNested) continue;
      if (mean.count() == 0) {
        Log(LogLevel::kWarning, "aggregator: round %" PRIu32 ": no anchor arrived, the nested update of %s cannot be decoded",
            round_, r.device_id.c_str());
        report.rejected++;
        counters_.updates_rejected[static_cast<int>(UpdateRejection::kNotCombined)]++;
        forced_anchors_.Put(r.device_id) = true;
        continue;
      }
      NdqsgWrapReport wraps;
      Status status = mean.AddNested(*CodecFor(r.spec), r.payload, r.payload_size, ContextFor(r.sender_id), scratch_,
                                     config_.wrap_margin, &wraps);
      if (status.ok()) status = CheckUpdateNorm(scratch_, d_, config_.max_update_norm);
      if (!status.ok()) {
        Log(LogLevel::kWarning, "aggregator: nested update of %s: %s", r.device_id.c_str(), status.ToString().c_str());
        report.rejected++;
        counters_.updates_rejected[static_cast<int>(UpdateRejection::kBadValues)]++;
        continue;
      }
      report.near_wraps += wraps.near_wrap;
      DeviceRoundReport& device = NextDeviceReport(&report);
      device.device_id = r.device_id;
      device.rho = r.rho;
      device.near_wraps = wraps.near_wrap;
      device.bytes = r.wire_bytes;
      device.next_rho = Adapt(r.device_id, r.rho, wraps.near_wrap, report);
      add(r, scratch_);
    }
  } else {
    for (const Received* r : ordered) {
      if (r->added) {
        count(*r);
      } else {
        report.rejected++;
        counters_.updates_rejected[static_cast<int>(UpdateRejection::kNotCombined)]++;
      }
    }
  }
  // Payload sizes of the decoded-on-arrival updates.
  report.bytes_up = 0;
  const Received* last = nullptr;  // the critical path: the update that arrived last
  for (std::size_t k = 0; k < received_count_; ++k) {
    const Received& r = received_[k];
    report.bytes_up += r.wire_bytes;
    if (last == nullptr || r.arrived_ms > last->arrived_ms) last = &r;
  }
  if (last != nullptr) {
    report.download_seconds = static_cast<double>(last->download_ms) / 1000.0;
    report.compute_seconds = static_cast<double>(last->compute_ms) / 1000.0;
    report.upload_seconds = static_cast<double>(last->upload_ms) / 1000.0;
  }
  report.rejected += rejected_;
  report.bytes_down = bytes_down_;
  report.full_models_down = full_models_down_;
  if (!nested_ && tier_ != nullptr) {
    const Status shared = SharePlainRound(report, &loss_sum, &sample_sum);
    if (!shared.ok()) return TierFailed(shared);
  }
  report.fp32_bytes_up = static_cast<uint64_t>(report.updates) * d_ * sizeof(float);
  counters_.updates_accepted += report.updates;
  counters_.bytes_up += report.bytes_up;
  counters_.bytes_down += report.bytes_down;
  // A round that applied nothing is reported as such and runs again: it
  // never advances the round count or reaches the checkpoint as a success.
  // After max_failed_rounds of them in a row the training cannot be making
  // progress (every device sends what the bounds refuse, a diverged model
  // whose mean the optimizer refuses, devices that never answer in time):
  // it stops, the devices are told why, and status() says so.
  const auto fail = [&](std::string failure) {
    report.applied = false;
    report.failure = std::move(failure);
    report.failed_in_a_row = ++failed_in_a_row_;
    report.stopped = failed_in_a_row_ >= config_.max_failed_rounds;
    Log(LogLevel::kWarning, "aggregator: round %" PRIu32 " not applied: %s; %s (%" PRIu32 " of %" PRIu32 " in a row)",
        round_ + 1, report.failure.c_str(), report.stopped ? "stopping" : "running it again", failed_in_a_row_,
        config_.max_failed_rounds);
    TimeRound(report);
    counters_.rounds_not_applied++;
    counters_.failed_in_a_row = failed_in_a_row_;
    counters_.last_failure = report.failure;
    if (hooks_.on_round) hooks_.on_round(report);
    if (report.stopped) {
      stopped_ = Status(StatusCode::kFailedPrecondition,
                        "training stopped at round " + std::to_string(round_ + 1) + ": " +
                            std::to_string(failed_in_a_row_) + " rounds in a row applied nothing (max failed rounds " +
                            std::to_string(config_.max_failed_rounds) + "); the last: " + report.failure);
      Log(LogLevel::kError, "aggregator: %s", stopped_.message().c_str());
      FinishAll(stopped_.message());
    }
  };
  report.clipped = clipped_;
  // With a tier, a robust rule's plain round counts every rank's held
  // updates (SharePlainRound): only rank 0 holds them all.
  const std::size_t held = tier_ != nullptr && !nested_ ? tier_held_ : held_.size();
  const std::size_t contributed = HoldsUpdates(config_.aggregation) ? held : accumulator.count();
  if (contributed == 0) {
    return fail(report.rejected == 0 ? "no update arrived"
                                     : "every update was rejected (" + std::to_string(report.rejected) + ")");
  }
  const Status combined = Combine(&mean_, report);
  if (!combined.ok()) return fail(combined.message());
  if (hooks_.on_aggregate) hooks_.on_aggregate(round_, mean_);
  // Apply checks the mean before it changes anything: a refusal leaves the
  // model and the optimizer state as they were.
  const Status applied = optimizer_->Apply(mean_.data(), model_->parameters());
  if (!applied.ok()) return fail("the server optimizer refused the mean: " + applied.ToString());
  failed_in_a_row_ = 0;
  counters_.failed_in_a_row = 0;
  report.train_loss = sample_sum > 0 ? loss_sum / sample_sum : 0;
  if (dp()) {
    report.dp_sampling_rate = population_ > 0 ? static_cast<double>(selected_.size()) / static_cast<double>(population_) : 1.0;
    accountant_.Compose(report.dp_sampling_rate, config_.dp.noise_multiplier);
    report.dp_epsilon = accountant_.Epsilon(config_.dp.delta);
    Log(LogLevel::kInfo, "aggregator: round %" PRIu32 ": DP epsilon %.4g at delta %g (q %.3g, z %g)", round_ + 1,
        report.dp_epsilon, config_.dp.delta, report.dp_sampling_rate, config_.dp.noise_multiplier);
  }
  round_++;
  RefitLevels();
  if (levels_) {
    report.level_table_version = levels_->level_table().version;
    report.level_table = levels_->level_table().levels;
  }
  counters_.rounds_completed = round_;
  if (report.dp_epsilon >= 0) counters_.dp_epsilon = report.dp_epsilon;
  if (tier_ != nullptr && downlink_) {
    const Status shared = ShareSynced();
    if (!shared.ok()) return TierFailed(shared);
  }
  if (hooks_.on_checkpoint) FillCheckpoint(&checkpoint_);
  // The evaluation and the checkpoint take most of a close. A host that can
  // run them on another thread gets them as a job: until CloseJobDone() no
  // round starts and nothing writes the model or checkpoint_, the job's input.
  if (hooks_.on_close_job && (evaluate_ || hooks_.on_checkpoint)) {
    closing_ = true;
    hooks_.on_close_job([this] { RunCloseJob(); });
    return;
  }
  RunCloseJob();
  FinishClose();
}

void Aggregator::State::RunCloseJob() {
  if (evaluate_) evaluated_ = EvaluateModel(*model_, test_, 256, &evaluation_, &evaluation_scratch_);
  if (hooks_.on_checkpoint) hooks_.on_checkpoint(checkpoint_);
}

void Aggregator::State::FinishClose() {
  closing_ = false;
  RoundReport& report = report_;
  if (evaluate_ && evaluated_.ok()) {
    report.test_accuracy = evaluation_.accuracy;
    report.test_loss = evaluation_.loss;
    if (config_.target_accuracy > 0 && evaluation_.accuracy >= config_.target_accuracy) reached_target_ = true;
    counters_.last_test_accuracy = report.test_accuracy;
    counters_.best_test_accuracy = std::max(counters_.best_test_accuracy, report.test_accuracy);
  }
  TimeRound(report);
  if (hooks_.on_round) hooks_.on_round(report);
}

void Aggregator::State::TimeRound(RoundReport& report) {
  report.seconds = static_cast<double>(clock_.NowMs() - round_started_ms_) / 1000.0;
  counters_.rounds_timed++;
  counters_.round_seconds_total += report.seconds;
  counters_.last_round_seconds = report.seconds;
}

// One AllGather of this rank's counts; every rank sums them, and takes the
// clock and the target from rank 0.
Status Aggregator::State::AgreeTick(TickView* view) {
  persist::Writer mine;
  mine.U64(view->connected);
  mine.U64(view->received);
  mine.U64(view->waiting);
  mine.U64(view->open);
  mine.U8(view->deadline_passed ? 1 : 0);
  mine.U8(view->target_reached ? 1 : 0);
  mine.U8(view->closing ? 1 : 0);
  std::vector<std::vector<uint8_t>> all;
  FEDRT_RETURN_IF_ERROR(tier_->AllGather(std::move(mine).Take(), &all));
  *view = TickView();
  for (std::size_t rank = 0; rank < all.size(); ++rank) {
    persist::Reader r(all[rank].data(), all[rank].size());
    view->connected += r.U64();
    view->received += r.U64();
    view->waiting += r.U64();
    view->open += r.U64();
    const bool deadline_passed = r.U8() != 0;
    const bool target_reached = r.U8() != 0;
    const bool closing = r.U8() != 0;
    if (!r.AtEnd()) return Corrupt("tick counts of rank " + std::to_string(rank));
    view->closing = view->closing || closing;
    if (rank == 0) {
      view->deadline_passed = deadline_passed;
      view->target_reached = target_reached;
    }
  }
  return Status::Ok();
}

// With a tier, at the start of a round: every rank's connected devices,
// sorted into tier_devices_, so every rank samples the same ones.
Status Aggregator::State::GatherDevices() {
  persist::Writer mine;
  mine.U32(static_cast<uint32_t>(device_connection_.size()));
  for (const auto& entry : device_connection_) mine.String(entry.first);
  std::vector<std::vector<uint8_t>> all;
  FEDRT_RETURN_IF_ERROR(tier_->AllGather(std::move(mine).Take(), &all));
  tier_devices_.clear();
  for (std::size_t rank = 0; rank < all.size(); ++rank) {
    persist::Reader r(all[rank].data(), all[rank].size());
    const uint32_t n = r.U32();
    for (uint32_t i = 0; r.ok() && i < n; ++i) tier_devices_.push_back(r.String(kMaxDeviceIdBytes));
    if (!r.AtEnd()) return Corrupt("device list of rank " + std::to_string(rank));
  }
  std::sort(tier_devices_.begin(), tier_devices_.end());
  return Status::Ok();
}

// NDQSG rounds with a tier: every rank's received payloads, so that every
// rank decodes the round (anchors, then the nested updates against the
// running mean) in the order of selected_, as one aggregator would. The
// other ranks' updates join received_ with their payloads in tier_round_.
Status Aggregator::State::ShareNestedUpdates() {
  RoundPartial mine;
  mine.received.resize(received_count_);
  for (std::size_t k = 0; k < received_count_; ++k) {
    const Received& r = received_[k];
    ShardUpdate& u = mine.received[k];
    u.device_id = r.device_id;
    u.sender_id = r.sender_id;
    u.spec = r.spec;
    u.role = static_cast<uint8_t>(r.role);
    u.rho = r.rho;
    u.num_samples = r.num_samples;
    u.loss = r.loss;
    u.wire_bytes = r.wire_bytes;
    u.payload.assign(r.payload, r.payload + r.payload_size);
  }
  mine.rejected = rejected_;
  mine.bytes_down = bytes_down_;
  mine.full_models_down = full_models_down_;
  Result<RoundPartial> all = CombineRoundPartials(*tier_, mine);
  if (!all.ok()) return all.status();
  tier_round_ = std::move(*all);
  for (const ShardUpdate& u : tier_round_.received) {
    if (answered_.count(u.device_id) != 0) continue;  // this rank's own
    // Checked by the rank that received it against the same assignment.
    auto assignment = assigned_.find(u.device_id);
    TensorSetCodec* codec = CodecFor(u.spec);
    if (assignment == assigned_.end() || u.spec != assignment->second.spec ||
        u.role != static_cast<uint8_t>(assignment->second.role) || codec == nullptr ||
        u.payload.size() > codec->MaxEncodedSize(d_)) {
      return Corrupt("update of " + u.device_id + " from another rank does not fit this round");
    }
    if (received_count_ == received_.size()) received_.emplace_back();
    Received& r = received_[received_count_];
    r.device_id = u.device_id;
    r.sender_id = u.sender_id;
    r.spec = u.spec;
    r.role = assignment->second.role;
    r.rho = assignment->second.rho;
    r.num_samples = u.num_samples;
    r.loss = u.loss;
    r.payload = u.payload.data();
    r.payload_size = u.payload.size();
    r.slot = -1;
    r.in_scratch = false;
    r.decoded = nullptr;
    r.wire_bytes = u.wire_bytes;
    r.added = true;
    r.download_ms = r.compute_ms = r.upload_ms = r.arrived_ms = 0;
    answered_.Put(r.device_id) = received_count_;
    received_count_++;
  }
  rejected_ = static_cast<std::size_t>(tier_round_.rejected);
  bytes_down_ = tier_round_.bytes_down;
  full_models_down_ = static_cast<std::size_t>(tier_round_.full_models_down);
  return Status::Ok();
}

// Plain rounds with a tier: the ranks' double sums, weights, counts and
// ALQ / AMQ statistics (each rank's merged in device order), added in rank
// order; the report then speaks for every rank.
Status Aggregator::State::SharePlainRound(RoundReport& report, double* loss_sum, double* sample_sum) {
  const bool holds = HoldsUpdates(config_.aggregation);
  RoundPartial mine;
  if (!holds) {
    mine.sum.assign(sum_->sum(), sum_->sum() + d_);
    mine.weight = sum_->total_weight();
  }
  mine.count = holds ? held_.size() : sum_->count();
  mine.updates = report.updates;
  mine.rejected = report.rejected;
  mine.clipped = clipped_;
  mine.loss_sum = *loss_sum;
  mine.sample_sum = *sample_sum;
  mine.bytes_up = report.bytes_up;
  mine.bytes_down = report.bytes_down;
  mine.full_models_down = report.full_models_down;
  if (levels_) {
    for (const auto& entry : answered_) mine.levels.Merge(received_[entry.second].levels);
  }
  Result<RoundPartial> all = CombineRoundPartials(*tier_, mine);
  if (!all.ok()) return all.status();
  if (holds) {
    tier_held_ = static_cast<std::size_t>(all->count);
    FEDRT_RETURN_IF_ERROR(GatherHeld());
  } else {
    if (all->sum.size() != d_) return Corrupt("round sums of " + std::to_string(all->sum.size()) + " values");
    sum_->Reset();
    FEDRT_RETURN_IF_ERROR(sum_->AddPartial(all->sum.data(), all->sum.size(), all->weight,
                                           static_cast<std::size_t>(all->count)));
  }
  report.updates = static_cast<std::size_t>(all->updates);
  report.rejected = static_cast<std::size_t>(all->rejected);
  clipped_ = static_cast<std::size_t>(all->clipped);
  *loss_sum = all->loss_sum;
  *sample_sum = all->sample_sum;
  report.bytes_up = all->bytes_up;
  report.bytes_down = all->bytes_down;
  report.full_models_down = static_cast<std::size_t>(all->full_models_down);
  tier_levels_ = std::move(all->levels);
  return Status::Ok();
}

// Robust rules in plain rounds with a tier: every rank's held updates
// (decoded, clipped, in the order of selected_) go to rank 0, which merges
// them into its held_ in the order of selected_, the order one aggregator
// holds them in, so the rule sees the same list and gives the same bits.
// Rank 0 needs the room one aggregator needs (held_capacity_, checked when
// the round started), plus the gathered bytes while they are copied in.
Status Aggregator::State::GatherHeld() {
  persist::Writer mine;
  if (tier_->rank() != 0) {  // rank 0's own are in its held_ already
    mine.U32(static_cast<uint32_t>(held_.size()));
    for (std::size_t k = 0; k < held_.size(); ++k) {
      mine.String(*held_devices_[k]);
      mine.F64(held_weights_[k]);
      mine.F32s(held_[k], d_);
    }
  }
  std::vector<std::vector<uint8_t>> all;
  FEDRT_RETURN_IF_ERROR(tier_->GatherToRank0(std::move(mine).Take(), &all));
  if (tier_->rank() != 0) return Status::Ok();
  if (all.size() != static_cast<std::size_t>(tier_->size())) {
    return Corrupt("held updates of " + std::to_string(all.size()) + " ranks");
  }
  // Each rank's list is in the order of selected_: merged by walking it.
  struct Held {
    const float* values;  // rank 0's
    const uint8_t* bytes;  // another rank's, d little-endian floats
    double weight;
  };
  std::vector<std::vector<std::pair<std::string, Held>>> lists(all.size());
  for (std::size_t k = 0; k < held_.size(); ++k) {
    lists[0].push_back({*held_devices_[k], Held{held_[k], nullptr, held_weights_[k]}});
  }
  for (std::size_t rank = 1; rank < all.size(); ++rank) {
    persist::Reader r(all[rank].data(), all[rank].size());
    const uint32_t n = r.U32();
    for (uint32_t i = 0; r.ok() && i < n; ++i) {
      std::string device = r.String(kMaxDeviceIdBytes);
      const double weight = r.F64();
      const uint8_t* bytes = d_ <= r.left() / 4 ? r.Bytes(d_ * 4) : nullptr;
      if (bytes == nullptr) r.Fail();
      lists[rank].push_back({std::move(device), Held{nullptr, bytes, weight}});
    }
    if (!r.AtEnd()) return Corrupt("held updates of rank " + std::to_string(rank));
  }
  std::vector<const float*> values;
  std::vector<double> weights;
  std::vector<const std::string*> devices;
  std::vector<std::size_t> next(all.size(), 0);
  std::size_t spare = held_.size();  // held_memory_'s first free update
  for (const std::string& device : selected_) {
    for (std::size_t rank = 0; rank < lists.size(); ++rank) {
      if (next[rank] == lists[rank].size() || lists[rank][next[rank]].first != device) continue;
      const Held& h = lists[rank][next[rank]++].second;
      const float* update = h.values;
      if (update == nullptr) {
        if (spare == held_capacity_) return Status(StatusCode::kResourceExhausted, "no room for another rank's update");
        float* into = held_memory_ + spare++ * d_;
        LoadFloatsLe(h.bytes, d_, into);
        update = into;
      }
      values.push_back(update);
      weights.push_back(h.weight);
      devices.push_back(&device);
      break;
    }
  }
  if (values.size() != tier_held_) {
    return Corrupt(std::to_string(tier_held_ - values.size()) + " held updates of other ranks are not of this round");
  }
  held_ = values;
  held_weights_ = weights;
  held_devices_ = devices;
  return Status::Ok();
}

// With a tier: rank 0's combined update (`combined` its outcome, the mean,
// the rule's choice) on every rank, so every rank applies the same step or
// fails the round with the same reason.
Status Aggregator::State::ShareRank0Combination(const Status& combined, std::vector<float>* mean, RoundReport& report) {
  std::vector<uint8_t> bytes;
  if (tier_->rank() == 0) {
    persist::Writer w;
    w.U8(static_cast<uint8_t>(combined.code()));
    if (combined.ok()) {
      w.F32s(*mean);
      w.U32(static_cast<uint32_t>(report.selected.size()));
      for (const std::string& device : report.selected) w.String(device);
    } else {
      w.String(combined.message().substr(0, kMaxReasonBytes));
    }
    bytes = std::move(w).Take();
  }
  FEDRT_RETURN_IF_ERROR(tier_->BroadcastFromRank0(&bytes));
  if (tier_->rank() == 0) return combined;
  persist::Reader r(bytes.data(), bytes.size());
  const auto code = static_cast<StatusCode>(r.U8());
  Status outcome;
  if (code == StatusCode::kOk) {
    r.F32s(d_, mean);
    const uint32_t selected = r.U32();
    for (uint32_t i = 0; r.ok() && i < selected; ++i) {
      AppendId(&report.selected, &spare_ids_, r.String(kMaxDeviceIdBytes));
    }
  } else {
    outcome = Status(code, r.String(kMaxReasonBytes));
  }
  if (!r.AtEnd()) return Corrupt("rank 0's combined update has " + std::to_string(bytes.size()) + " bytes");
  return outcome;
}

// With a tier and a downlink codec, once a round is applied: every rank's
// per-device download state (its own devices') to rank 0, whose checkpoint
// then lets every shard's devices resume deltas after a restart.
Status Aggregator::State::ShareSynced() {
  persist::Writer mine;
  uint32_t count = 0;
  for (const auto& entry : synced_) count += Mine(entry.first) ? 1 : 0;
  mine.U32(count);
  for (const auto& [device, round] : synced_) {
    if (!Mine(device)) continue;
    mine.String(device);
    mine.U64(static_cast<uint64_t>(round));
  }
  std::vector<std::vector<uint8_t>> all;
  FEDRT_RETURN_IF_ERROR(tier_->AllGather(std::move(mine).Take(), &all));
  tier_synced_.clear();
  if (tier_->rank() != 0) return Status::Ok();
  for (std::size_t rank = 0; rank < all.size(); ++rank) {
    persist::Reader r(all[rank].data(), all[rank].size());
    const uint32_t n = r.U32();
    for (uint32_t i = 0; r.ok() && i < n; ++i) {
      std::string device = r.String(kMaxDeviceIdBytes);
      tier_synced_[std::move(device)] = static_cast<int64_t>(r.U64());
    }
    if (!r.AtEnd()) return Corrupt("download state of rank " + std::to_string(rank));
  }
  return Status::Ok();
}

uint32_t Aggregator::State::Tick() {
  const uint64_t now = clock_.NowMs();
  std::vector<std::shared_ptr<Connection>> late;
  uint64_t next = std::numeric_limits<uint32_t>::max();
  // Joined devices are not scanned every tick, only while someone is joining.
  for (auto it = peers_.begin(); joining_ > 0 && it != peers_.end(); ++it) {
    if (it->second.authenticated) continue;
    const uint64_t deadline = it->second.opened_ms + config_.join_timeout_ms;
    if (now > deadline) {
      late.push_back(it->second.connection);
    } else {
      next = std::min<uint64_t>(next, deadline - now + 1);
    }
  }
  for (const auto& connection : late) {
    Refuse(*connection, Status(StatusCode::kDeadlineExceeded, "no join within " +
                                                                  std::to_string(config_.join_timeout_ms) + " ms"));
  }
  if (finished_) return static_cast<uint32_t>(next);
  // What the decisions below see: this engine's counts, or with a tier every
  // rank's, with rank 0's clock and target (the same on every rank).
  TickView view;
  view.connected = device_connection_.size();
  view.received = received_count_;
  for (std::size_t k = 0; in_round_ && k < selected_.size(); ++k) {
    if (answered_.count(selected_[k]) == 0 && device_connection_.count(selected_[k]) != 0) view.waiting++;
  }
  view.open = peers_.size();
  view.deadline_passed = in_round_ && now >= round_deadline_ms_;
  view.target_reached = reached_target_;
  view.closing = closing_;
  if (tier_ != nullptr) {
    const Status agreed = AgreeTick(&view);
    if (!agreed.ok()) {
      TierFailed(agreed);
      return static_cast<uint32_t>(next);
    }
  }
  last_view_ = view;
  InviteDeferred();
  // While a close job is out (on any rank) the round it closes is not done:
  // no round starts and the training does not finish (its target is not
  // known yet). Joins and their deadlines go on.
  if (view.closing) return static_cast<uint32_t>(next);
  if (!in_round_) {
    if (round_ >= config_.rounds || view.target_reached) {
      FinishAll();
      return static_cast<uint32_t>(next);
    }
    // The minimum gates the first round; later rounds go on with whoever is
    // connected, so a lost device never stops the training.
    const std::size_t needed = started_any_ ? 1 : std::max<std::size_t>(1, config_.min_devices);
    if (view.connected < needed) return static_cast<uint32_t>(next);
    if (!BudgetAllowsRound(static_cast<std::size_t>(view.connected))) {
      FinishAll();
      return static_cast<uint32_t>(next);
    }
    started_any_ = true;
    StartRound();
    return static_cast<uint32_t>(std::min<uint64_t>(next, config_.round_deadline_ms));
  }
  // view.waiting: sampled devices still able to answer (connected, not answered yet).
  if (view.received >= Quorum() || view.deadline_passed || (view.waiting == 0 && view.received > 0)) {
    CloseRound();
    // The next round can start at once, or once the close job is done.
    return closing_ ? static_cast<uint32_t>(next) : 0;
  }
  return static_cast<uint32_t>(std::min<uint64_t>(next, round_deadline_ms_ - now));
}

void Aggregator::State::FinishAll(const std::string& reason) {
  if (finished_) return;
  finished_ = true;
  LeaveMessage leave;
  leave.reason = std::string_view(reason).substr(0, kMaxReasonBytes);
  Result<OutFrame> out = Encode(leave, limits_);
  std::vector<std::pair<std::shared_ptr<Connection>, bool>> open;
  for (auto& entry : peers_) open.emplace_back(entry.second.connection, entry.second.authenticated);
  for (auto& [connection, authenticated] : open) {
    if (out.ok() && authenticated) (void)connection->Send(*out);
    connection->Close();
  }
  Log(LogLevel::kInfo, "aggregator: %" PRIu32 " rounds done", round_);
}

void Aggregator::State::AbortAll(const Status& reason) {
  // The map is let go of first: a binding may report the closes later (or,
  // when its loop is gone, never), and the connections must not keep the
  // aggregator alive through it.
  std::map<uint64_t, Peer> peers;
  peers.swap(peers_);
  device_connection_.clear();
  joining_ = 0;
  joining_by_address_.clear();
  for (auto& entry : peers) entry.second.connection->Abort(reason);
}

// ---- The memory block -------------------------------------------------------------

namespace {

// The block's layout: the aggregator object (CreateIn only), the state, then
// the pieces. The same function measures (null base) and places.
struct BlockLayout {
  Aggregator* aggregator = nullptr;
  Aggregator::State* state = nullptr;
  double* sum = nullptr;
  float* scratch = nullptr;
  float* zeros = nullptr;
  float* contribution = nullptr;
  float* delta = nullptr;
  double* noised = nullptr;
  uint8_t* slots = nullptr;
  float* held = nullptr;
  float* decoded = nullptr;
  unsigned char* codecs = nullptr;
  uint8_t* broadcast = nullptr;
  unsigned char* instructions = nullptr;
  std::size_t used = 0;
};

BlockLayout CarveBlock(unsigned char* base, const BlockSizes& z, bool with_aggregator) {
  Carver carve(base);
  BlockLayout l;
  if (with_aggregator) l.aggregator = carve.Take<Aggregator>(1);
  l.state = carve.Take<Aggregator::State>(1);
  l.sum = carve.Take<double>(z.d, kBlockAlignment);
  l.scratch = carve.Take<float>(z.d, kBlockAlignment);
  l.zeros = carve.Take<float>(z.d, kBlockAlignment);
  l.contribution = carve.Take<float>(z.d, kBlockAlignment);
  if (z.downlink) l.delta = carve.Take<float>(z.d, kBlockAlignment);
  if (z.dp) l.noised = carve.Take<double>(z.d, kBlockAlignment);
  l.slots = carve.Take<uint8_t>(z.slots * z.slot_bytes, kBlockAlignment);
  if (z.held != 0) l.held = carve.Take<float>(z.held * z.d, kBlockAlignment);
  if (z.decoded != 0) l.decoded = carve.Take<float>(z.decoded * z.d, kBlockAlignment);
  l.codecs = carve.Take<unsigned char>(z.codec_bytes, std::max(z.codec_alignment, kBlockAlignment));
  if (z.downlink) l.broadcast = carve.Take<uint8_t>(z.broadcast_bytes, kBlockAlignment);
  l.instructions = carve.Take<unsigned char>(z.instruction_slots * z.instruction_slot_bytes, kBlockAlignment);
  l.used = carve.used() + kBlockAlignment - 1;  // at any alignment of the memory
  return l;
}

}  // namespace

// Measures the block: a State initialised on the heap (codecs and model
// built once more by the real one).
static Result<BlockSizes> MeasureBlock(const AggregatorConfig& config, const KeyStore& keys, Crypto& crypto,
                                       const Clock& clock, const DataView* test_set) {
  Aggregator::State probe(config, keys, crypto, clock, AggregatorHooks());
  FEDRT_RETURN_IF_ERROR(probe.Init(test_set));
  BlockSizes z = probe.Sizes();
  Result<std::size_t> codec_bytes = probe.PlaceCodecs(nullptr);
  if (!codec_bytes.ok()) return codec_bytes.status();
  z.codec_bytes = *codec_bytes;
  return z;
}

Result<std::size_t> Aggregator::State::PlaceCodecs(unsigned char* storage) {
  Carver carve(storage);
  // Carves `spec`'s storage and, when placing, builds the codec there (null
  // when measuring).
  const auto place = [&](const std::string& spec) -> Result<Codec*> {
    Result<CodecFootprint> footprint = CodecFootprintFor(spec, d_);
    if (!footprint.ok()) return footprint.status();
    unsigned char* at = carve.Take<unsigned char>(footprint->size, footprint->alignment);
    if (storage == nullptr) return static_cast<Codec*>(nullptr);
    Result<Codec*> codec = ConstructCodec(spec, d_, at, footprint->size);
    if (codec.ok()) placed_codecs_.push_back(*codec);
    return codec;
  };
  // `*wrapper` borrows the placed codec over the tensor table (its heap codec goes).
  const auto borrow = [&](Codec& codec, std::unique_ptr<TensorSetCodec>* wrapper) -> Status {
    Result<std::unique_ptr<TensorSetCodec>> tensors = BorrowUpdateCodec(codec, tensor_sizes_);
    if (!tensors.ok()) return tensors.status();
    *wrapper = std::move(*tensors);
    return Status::Ok();
  };
  for (auto& entry : codecs_) {
    Result<Codec*> codec = place(entry.first);
    if (!codec.ok()) return codec.status();
    if (*codec != nullptr) FEDRT_RETURN_IF_ERROR(borrow(**codec, &entry.second));
  }
  // ALQ / AMQ: the codec holding the round's table, placed with its initial
  // table (Restore, after placement, installs a saved one).
  if (levels_owned_ != nullptr) {
    const std::string spec(levels_->spec().view());
    Result<Codec*> codec = place(spec);
    if (!codec.ok()) return codec.status();
    if (*codec != nullptr) {
      AdaptiveCodec* placed = AsAdaptiveCodec(*codec);
      if (placed == nullptr) return Status(StatusCode::kInternal, "codec '" + spec + "' is not adaptive");
      levels_ = placed;
      levels_tensors_->Rebind(*placed);
      levels_owned_.reset();
    }
  }
  // The downlink codec: the broadcast's encode and decode stage in its
  // working space, not in scratch of their own.
  if (downlink_ != nullptr) {
    Result<Codec*> codec = place(std::string(downlink_->spec().view()));
    if (!codec.ok()) return codec.status();
    if (*codec != nullptr) FEDRT_RETURN_IF_ERROR(borrow(**codec, &downlink_));
  }
  return carve.used();
}

BlockSizes Aggregator::State::Sizes() const {
  BlockSizes z;
  z.d = d_;
  z.updates = max_updates_;
  z.slots = payload_slot_count_;
  z.slot_bytes = payload_slot_bytes_;
  z.held = HoldsUpdates(config_.aggregation) ? held_capacity_ : 0;
  z.decoded = decoded_capacity_;
  z.dp = dp();
  z.downlink = downlink_ != nullptr;
  std::vector<std::string> specs;
  for (const auto& entry : codecs_) specs.push_back(entry.first);
  if (levels_ != nullptr) specs.emplace_back(levels_->spec().view());
  if (downlink_ != nullptr) specs.emplace_back(downlink_->spec().view());
  for (const std::string& spec : specs) {
    Result<CodecFootprint> footprint = CodecFootprintFor(spec, d_);
    if (footprint.ok()) z.codec_alignment = std::max(z.codec_alignment, footprint->alignment);
  }
  // The placed downlink codec stages in its working space: its MaxEncodedSize is this bound.
  if (downlink_ != nullptr) z.broadcast_bytes = downlink_->MaxPayloadSize(d_);
  z.instruction_slots = instruction_entries_ * instruction_frames_per_entry_;
  z.instruction_slot_bytes = instruction_slot_bytes_;
  return z;
}

// Builds the state in a carved block.
static Result<Aggregator::State*> PlaceState(const BlockLayout& l, const BlockSizes& z, const AggregatorConfig& config,
                                             const KeyStore& keys, Crypto& crypto, const Clock& clock,
                                             const DataView* test_set, AggregatorHooks hooks) {
  auto* s = new (l.state) Aggregator::State(config, keys, crypto, clock, std::move(hooks));
  const Status initialised = s->Init(test_set);
  if (initialised.ok() && (s->d_ != z.d || s->max_updates_ != z.updates || s->payload_slot_count_ != z.slots ||
                             s->payload_slot_bytes_ != z.slot_bytes || s->decoded_capacity_ != z.decoded ||
                             s->instruction_entries_ * s->instruction_frames_per_entry_ != z.instruction_slots ||
                             s->instruction_slot_bytes_ != z.instruction_slot_bytes)) {
    s->~State();
    return Status(StatusCode::kInternal, "the aggregator's block was measured for another config");
  }
  if (!initialised.ok()) {
    s->~State();
    return initialised;
  }
  const Result<std::size_t> placed = s->PlaceCodecs(l.codecs);
  if (!placed.ok() || *placed != z.codec_bytes) {
    s->~State();
    return placed.ok() ? Status(StatusCode::kInternal, "the aggregator's codecs were measured for another config")
                       : placed.status();
  }
  if (s->downlink_ != nullptr && s->downlink_->MaxEncodedSize(z.d) > z.broadcast_bytes) {
    s->~State();
    return Status(StatusCode::kInternal, "the aggregator's downlink codec stages outside its working space");
  }
  s->sum_ = std::make_unique<UpdateAccumulator>(l.sum, z.d);
  s->scratch_ = l.scratch;
  s->zeros_ = l.zeros;
  s->contribution_ = l.contribution;
  std::fill(s->zeros_, s->zeros_ + z.d, 0.0f);
  s->delta_ = l.delta;
  s->broadcast_ = l.broadcast;
  s->broadcast_capacity_ = z.broadcast_bytes;
  s->noised_ = l.noised;
  s->payload_slots_ = l.slots;
  s->held_memory_ = l.held;
  s->decoded_memory_ = l.decoded;
  s->free_slots_.reserve(z.slots);
  s->free_decoded_.reserve(z.decoded);
  s->deferred_.reserve(z.updates);
  s->received_.reserve(z.updates);
  s->ordered_.reserve(z.updates);
  s->selected_.reserve(z.updates);
  s->chosen_.reserve(s->max_devices_);
  s->sample_words_.reserve(z.updates);
  s->connected_.reserve(s->max_devices_);
  s->assigned_.ReserveSpares(z.updates);
  s->answered_.ReserveSpares(z.updates);
  if (s->nested_) {
    // NDQSG's per-device state: a forced anchor per sampled device, a rho
    // per device that can join.
    s->forced_anchors_.MakeSpares(z.updates);
    s->rho_.MakeSpares(s->max_devices_);
  }
  s->held_.reserve(z.held);
  s->held_weights_.reserve(z.held);
  s->held_devices_.reserve(z.held);
  s->aggregation_scratch_.Reserve(z.held);
  s->aggregation_detail_.selected.reserve(z.held);
  s->aggregation_detail_.scores.reserve(z.held);
  s->report_.devices.reserve(z.updates);
  s->report_.selected.reserve(z.updates);
  s->spare_devices_.reserve(z.updates);
  s->spare_ids_.reserve(z.updates);
  if (s->hooks_.on_checkpoint) {
    if (s->nested_) {
      MakeNodes<std::map<std::string, int32_t>>(s->max_devices_, &s->checkpoint_rho_nodes_);
      MakeNodes<std::set<std::string>>(z.updates, &s->checkpoint_anchor_nodes_);
    }
    if (z.downlink) MakeNodes<std::map<std::string, int64_t>>(s->max_devices_, &s->checkpoint_synced_nodes_);
  }
  s->ReserveInstructions(l.instructions);
  return s;
}

// ---- Aggregator -------------------------------------------------------------------

Aggregator::Aggregator(State* state, std::unique_ptr<unsigned char[]> block)
    : state_(state), block_(std::move(block)) {}

Aggregator::~Aggregator() {
  state_->AbortAll(Status(StatusCode::kCancelled, "aggregator destroyed"));
  state_->~State();
}

Result<std::size_t> Aggregator::RequiredBytes(const AggregatorConfig& config, const KeyStore& keys) {
  MeasuringCrypto crypto;
  const ManualClock clock;  // NOLINT: measuring reads no time
  Result<BlockSizes> sizes = MeasureBlock(config, keys, crypto, clock, nullptr);
  if (!sizes.ok()) return sizes.status();
  return CarveBlock(nullptr, *sizes, true).used;
}

Result<Aggregator*> Aggregator::CreateIn(void* memory, std::size_t size, const AggregatorConfig& config,
                                         const KeyStore& keys, Crypto& crypto, const Clock& clock,
                                         const DataView* test_set, AggregatorHooks hooks) {
  Result<BlockSizes> sizes = MeasureBlock(config, keys, crypto, clock, test_set);
  if (!sizes.ok()) return sizes.status();
  const std::size_t needed = CarveBlock(nullptr, *sizes, true).used;
  if (memory == nullptr || size < needed) {
    return OutOfRange("the aggregator needs " + std::to_string(needed) + " bytes of memory, it was given " +
                      std::to_string(memory == nullptr ? 0 : size));
  }
  const BlockLayout l = CarveBlock(AlignedBlock(memory), *sizes, true);
  Result<State*> state = PlaceState(l, *sizes, config, keys, crypto, clock, test_set, std::move(hooks));
  if (!state.ok()) return state.status();
  return new (l.aggregator) Aggregator(*state, nullptr);
}

void Aggregator::Destroy(Aggregator* aggregator) {
  if (aggregator != nullptr) aggregator->~Aggregator();
}

Result<std::shared_ptr<Aggregator>> Aggregator::Create(const AggregatorConfig& config, const KeyStore& keys,
                                                       Crypto& crypto, const Clock& clock, const DataView* test_set,
                                                       AggregatorHooks hooks) {
  Result<BlockSizes> sizes = MeasureBlock(config, keys, crypto, clock, test_set);
  if (!sizes.ok()) return sizes.status();
  const std::size_t needed = CarveBlock(nullptr, *sizes, false).used;
  std::unique_ptr<unsigned char[]> block(new (std::nothrow) unsigned char[needed]);
  if (block == nullptr) {
    return Status(StatusCode::kResourceExhausted, "cannot allocate the aggregator's " + std::to_string(needed) + " bytes");
  }
  const BlockLayout l = CarveBlock(AlignedBlock(block.get()), *sizes, false);
  Result<State*> state = PlaceState(l, *sizes, config, keys, crypto, clock, test_set, std::move(hooks));
  if (!state.ok()) return state.status();
  return std::shared_ptr<Aggregator>(new Aggregator(*state, std::move(block)));
}

Status Aggregator::Restore(AggregatorCheckpoint checkpoint) { return state_->Restore(checkpoint); }
uint32_t Aggregator::Tick() { return state_->Tick(); }
void Aggregator::CloseJobDone() {
  if (state_->closing_) state_->FinishClose();
}
bool Aggregator::closing() const { return state_->closing_; }
void Aggregator::Finish() { state_->FinishAll(); }
void Aggregator::Abort(const Status& reason) { state_->AbortAll(reason); }
bool Aggregator::finished() const { return state_->finished_; }
Status Aggregator::status() const { return state_->stopped_; }
uint32_t Aggregator::round() const { return state_->round_; }
std::size_t Aggregator::connected_devices() const { return state_->device_connection_.size(); }
std::size_t Aggregator::open_connections() const { return state_->peers_.size(); }
std::size_t Aggregator::all_connected_devices() const {
  return state_->tier_ != nullptr ? static_cast<std::size_t>(state_->last_view_.connected) : connected_devices();
}
std::size_t Aggregator::all_open_connections() const {
  return state_->tier_ != nullptr ? static_cast<std::size_t>(state_->last_view_.open) : open_connections();
}
const Model& Aggregator::model() const { return *state_->model_; }
const std::string& Aggregator::codec() const { return state_->config_.codec; }
const AggregatorConfig& Aggregator::config() const { return state_->config_; }
const AggregatorCounters& Aggregator::counters() const { return state_->counters_; }

RoundProgress Aggregator::round_progress() const {
  const State& s = *state_;
  RoundProgress progress;
  if (!s.in_round_) return progress;
  const uint64_t now = s.clock_.NowMs();
  progress.open = true;
  progress.round = s.round_ + 1;
  progress.sampled = s.selected_.size();
  progress.received = s.received_count_;
  progress.quorum = s.Quorum();
  progress.elapsed_ms = now - s.round_started_ms_;
  progress.deadline_in_ms = s.round_deadline_ms_ > now ? s.round_deadline_ms_ - now : 0;
  return progress;
}

const char* UpdateRejectionName(UpdateRejection reason) {
  switch (reason) {
    case UpdateRejection::kNotRequested: return "not_requested";
    case UpdateRejection::kWrongCodec: return "wrong_codec";
    case UpdateRejection::kTooLarge: return "too_large";
    case UpdateRejection::kBadSamples: return "bad_samples";
    case UpdateRejection::kBadLevels: return "bad_levels";
    case UpdateRejection::kBadChunks: return "bad_chunks";
    case UpdateRejection::kBadValues: return "bad_values";
    case UpdateRejection::kNotCombined: return "not_combined";
  }
  return "unknown";
}

ConnectionOptions Aggregator::connection_options() const {
  ConnectionOptions options;
  options.limits = state_->limits_;
  options.idle_timeout_ms = state_->config_.idle_timeout_ms;
  options.io_timeout_ms = state_->config_.io_timeout_ms;
  options.heartbeat_interval_ms = std::max<uint32_t>(100, state_->config_.idle_timeout_ms / 4);
  options.initial_max_frame_bytes = kMaxJoinFrameBytes;  // lifted once the device has joined
  options.log_errors = false;  // OnClose logs each close with its reason
  return options;
}

void Aggregator::OnOpen(const std::shared_ptr<Connection>& connection) { state_->OnOpen(connection); }
void Aggregator::OnFrame(Connection& connection, Frame frame) { state_->OnFrame(connection, frame); }
void Aggregator::OnClose(Connection& connection, const Status& reason) { state_->OnClose(connection, reason); }

}  // namespace fedrt
