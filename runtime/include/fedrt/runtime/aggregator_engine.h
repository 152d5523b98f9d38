// The star aggregator as an engine: the server side of the star protocol
// (joins, round instructions, update intake, aggregation, the server
// optimizer, NDQSG / ALQ / AMQ / downlink codec state) on what the
// application gives it. It opens no file, listens on nothing, starts no
// thread and reads the time only from the Clock it is given; the application
// (`fedrt serve` through RunAggregator, a host service, a test) accepts
// connections, moves bytes and keeps files. What the protocol does is
// described in aggregator.h and transport/README.md ("Star protocol").
//
// Driving it, on one thread:
//
//   auto aggregator = Aggregator::Create(config, keys, crypto, clock, &test_set, hooks);
//   (*aggregator)->Restore(std::move(saved));   // optional, before any connection
//   // It is the ConnectionHandler of every device connection: give it to a
//   // TcpListener, to StreamConnection::Create, or as one side of a MemoryPipe
//   // (with connection_options()). It joins, instructs and aggregates from
//   // OnOpen / OnFrame / OnClose.
//   // After delivering frames or closes, and at the latest when the delay it
//   // returned has passed:
//   uint32_t wait_ms = (*aggregator)->Tick();
//   // until finished(): every round is done and the devices were told to leave.
//
// Tick() is where time passes: it closes connections that did not join within
// join_timeout_ms, starts a round once enough devices have joined, and closes
// the round at its quorum, at its deadline, or when every sampled device has
// answered or gone. Frames are handled as they arrive, but rounds start and
// close only in Tick(), so a host that calls it on a timer sees the same
// rounds whatever the I/O timing.
//
// Persistence: the aggregator restores from an AggregatorCheckpoint and hands
// the same state to AggregatorHooks::on_checkpoint after every applied round
// (before on_round); the host decides where it goes (RunAggregator writes it
// atomically to a file).
//
// The close job: evaluating the model on the test set and on_checkpoint are
// most of an applied round's close (LeNet-300-100 on 10,000 examples, then
// an fsync'ed file), and a host whose one thread also serves every device
// can run them elsewhere. With AggregatorHooks::on_close_job set, Tick()
// hands them over instead of running them:
//
//   hooks.on_close_job = [&](std::function<void()> job) {
//     worker.Run(std::move(job), [&] { loop.Post([&] { aggregator->CloseJobDone(); aggregator->Tick(); }); });
//   };
//
// The job may run on any thread, once; then the host calls CloseJobDone()
// on the driving thread, which reports the round (on_round, with the test
// accuracy) and lets the next one start. Meanwhile closing() is true and
// frames, joins and join deadlines are served as ever, but no round starts,
// the training does not finish, and nothing writes what the job reads (the
// model, the checkpoint handed to on_checkpoint): on_checkpoint then runs on
// the job's thread. Without the hook the job runs inside Tick(), as one
// call. Either way the rounds, reports and checkpoints are the same. A host
// lets the job finish and calls CloseJobDone() before Abort() and before it
// lets go of the aggregator.
//
// Ownership: `keys`, `crypto`, `clock` and the test set's memory must outlive
// the aggregator. Connections hold the aggregator (their handler) until they
// close, and the aggregator holds its open connections: Finish() or Abort()
// closes them, which a host must do before it lets go of the aggregator.
// Memory: sized by a query first, like the device client (zstd, TFLM):
// RequiredBytes(config, keys) measures one block and CreateIn places the
// aggregator in the caller's memory (Create does the same on one heap
// block). The block holds what is model-sized or per round: the round sum
// (an UpdateAccumulator over d doubles: the weighted sum in device order,
// the count, the total weight), four d-float buffers (decoding scratch,
// zeros, clipping, with a downlink codec the delta), under DP a noised copy
// of the sum, the update codecs and the downlink codec with their working
// space (ConstructCodec) and the downlink's compressed broadcast, the frame
// slots of the round's instructions (an entry per kind of instructions a
// round can send: each spec a device can be told to use, NDQSG's anchor
// DQSG and each rho of the ladder, in each model encoding, at most one per
// sampled device; a slot per chunk of the fp32 model, or of the downlink
// codec's largest payload, each: LeNet-300-100 NDQSG rho 3 to 9 holds five,
// 5.5 MB), and the round's bounded update storage: a pool of
// payload slots of the largest payload the codecs may send (an update is
// reassembled straight into its slot and decoded into the sum, or held
// decoded by a rule other than mean, at its turn, which frees the slot):
// max_waiting_updates + 1 of them, so 10,000 devices of LeNet-300-100 fp32
// take 76 MB, not a slot per device (10.7 GB); NDQSG decodes at the close and
// takes max_updates_per_round slots. Beside them, max_decoded_waiting
// buffers of d floats (default 16, LeNet-300-100: 17 MB) in which an update
// that arrived before its turn waits decoded, so it is decoded once. With a
// rule other than mean, also
// the decoded updates of a round, d floats each (a robust rule looks at
// every update of the round at once): as many as a round can sample, at
// most max_held_updates (default 64), so 10,000 keys of LeNet-300-100 with
// median take 161 MB (17 MB of it the decoded waiting buffers), not
// 10.7 GB. Per connection, outside the block: a
// 208-byte entry in a map (no buffer) and one in the device map once
// joined, so about 350 bytes of the engine's per idle joined device (its
// connection's buffers are the binding's); a JoinServer (280 bytes) until
// it joins.
// Allocation: Create / CreateIn make the global model, the server
// optimizer's moments, the mean handed to the optimizer (d floats), the
// NDQSG running mean and its per-device nodes (a rho per device that can
// join, a forced anchor per sampled device, made with room for any device
// id), with a downlink codec the device model (d floats), the codecs'
// tensor-table wrappers, and the instruction entries' small parts (spec
// string, frame list, each slot's object: a few hundred bytes per kind;
// their frames build in the block); the update codecs, ALQ / AMQ's
// included, and the downlink codec are in the block (ConstructCodec:
// encoding and decoding allocate nothing). A frame still queued on a
// connection reads the block: Abort or Finish, and let the connections
// close, before the memory is reused. A join allocates its connection's entries.
// The round path allocates nothing for fp32, dqsg, ndqsg and alq with any
// rule, and with a downlink codec (runtime_aggregator_arena_test counts
// rounds 2-3 of each, with mean and median, with 5- and 40-character device
// ids, and of dqsg and ndqsg with a dqsg:s=4 downlink: 0): the
// round's bookkeeping (sampled devices, assignments, answers, sampling
// buffers, the reports' entries) reuses strings made with room for any
// device id (transport::kMaxDeviceIdBytes), the update frames decode into
// one kept UpdateMessage, NDQSG's wrap count reuses its scratch, ALQ / AMQ
// keep room for the largest statistics and fit the next table on the stack
// (FitLevelTableInto); the instruction frames (encoded into reusable frame
// slots), the round's Ack, the test evaluation and its buffers are reused.
// What still allocates on a round: a slot that a slow connection still
// holds when a round starts is not reused (a new one is made); a device
// whose connection takes smaller frames than the aggregator's gets its own
// instruction entry (made the first time); log lines
// and refusals (an Error's text); ALQ / AMQ with model=norm (the mixture
// fit's vectors); with a downlink codec a device's first acknowledgement
// (its entry in the synced map). The checkpoint handed to
// on_checkpoint reuses its vectors and refills its maps of rho, forced
// anchors and synced devices from nodes made at Create when the hook is set
// (a rho and a synced entry per device that can join, a forced anchor per
// sampled device): nothing (the arena test's run with the hook). With an
// aggregator tier (AggregatorHooks::tier) every exchange allocates its
// messages: each Tick's counts, the devices of every rank at a round's
// start (kept sorted in a
// list the sampling points into), and at the close a plain round's partial
// sum (d doubles, added slice by slice: about 2 d doubles sent and received
// a rank) or an NDQSG round's
// payloads (every rank's, held until the next round starts, plus received
// entries beyond max_updates_per_round for the other ranks' devices); with
// a robust rule every rank's held updates gathered on rank 0 (their bytes,
// copied into rank 0's held updates in the block); a DP or robust round's
// combined update sent by rank 0 (d floats); with a downlink codec the
// ranks' download states gathered on rank 0 (a map entry per device there).
//
// Thread-safety: none. Every call, and every connection callback, runs on one
// thread (an EventLoop's, or the application's); only a close job handed to
// on_close_job may run on another, while closing() (see "The close job").
#ifndef FEDRT_RUNTIME_AGGREGATOR_ENGINE_H_
#define FEDRT_RUNTIME_AGGREGATOR_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fedrt/codecs/levels.h"
#include "fedrt/platform/clock.h"
#include "fedrt/platform/status.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/privacy.h"
#include "fedrt/runtime/robust_aggregation.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/crypto.h"

namespace fedrt {

class AggregatorTier;  // aggregator_tier.h

// The protocol and training decisions of an aggregator.
struct AggregatorConfig {
  std::string model = "mlp:784-300-100-10";
  uint64_t model_seed = 1;             // initial global model
  std::string codec = "fp32";          // what devices send; "ndqsg:..." runs anchors + nested
  uint32_t rounds = 10;                // stop after this many rounds (counting resumed ones)
  std::size_t min_devices = 1;         // joined devices before the first round starts
  SamplingOptions sampling;            // devices per round
  // Fraction of the devices a round wants (SampleTarget: sampled before
  // over-selection) whose updates close it before the deadline; with
  // over-selection the first of the sampled to answer close it.
  double quorum = 1.0;
  uint32_t round_deadline_ms = 120000; // a round closes at the deadline with what has arrived
  // Rounds in a row that may apply nothing (RoundReport::applied false: no
  // update arrived, every update was refused, the rule could not combine
  // them or the server optimizer refused the mean) before the training
  // stops: the devices are told why (a Leave with the reason), finished()
  // becomes true and status() names the reason; RunAggregator returns it
  // (`fedrt serve` exits 1). An applied round resets the count. At least 1.
  uint32_t max_failed_rounds = 5;
  uint32_t local_epochs = 1;
  uint32_t local_steps = 0;            // 0: whole epochs
  float learning_rate = 0.05f;         // devices' local SGD
  ServerOptimizerOptions server_optimizer;
  uint64_t session_seed = 1;           // codec randomness and sampling
  double anchor_fraction = 0.25;       // NDQSG: share of the senders that are anchors
  double wrap_threshold = 0.01;        // NDQSG: near-wraps / coordinates that raise a device's rho
  float wrap_margin = 0.05f;           // NDQSG: CountNearWrap margin
  int max_rho = 9;                     // NDQSG: largest rho adaptation raises a device to; then DQSG
  int anchor_levels = 0;               // NDQSG: anchors' DQSG levels s (0: s1 of the codec)
  // Downlink: empty or "fp32" sends the full model; a codec spec (e.g. "fp16",
  // "dqsg:s=7") sends the delta between the global model and the model the
  // devices hold, compressed. The aggregator keeps that device model (what the
  // devices reconstruct) and sends the full fp32 device model to a device
  // that missed the previous round's broadcast (a new join, not sampled).
  std::string downlink_codec;
  // What one device can do to a round, checked on every update as it
  // arrives (a failing update is refused: its connection is closed with the
  // reason and it counts in RoundReport::rejected; the round goes on without
  // it). Fixed numbers, derived from nothing a device sends.
  //   max_update_norm: the largest L2 norm of a decoded update (0: no
  //     bound). An honest delta is some SGD steps of a model on normalised
  //     data (LeNet-300-100, a quarter of Fashion-MNIST, one epoch at lr
  //     0.05: norm 3.4 in the first round, less later); a coordinate of
  //     1e30 is not, and bounding the norm bounds every coordinate. The sum is kept in double (aggregation.h), so even an
  //     unbounded update can no longer overflow it.
  //   max_update_samples: the largest sample count an update may claim. The
  //     count is the update's FedAvg weight; a device claiming 2^32 samples
  //     would outweigh any fleet. 1 to 2^32.
  double max_update_norm = 1e4;
  uint64_t max_update_samples = uint64_t{1} << 20;
  // Connections that have not joined yet prove nothing and cost memory: at
  // most this many at once, in total and from one address (the text of
  // Connection::peer() before its last ':', "127.0.0.1" for TCP). A
  // connection beyond either is closed at once (an Error says why), before
  // anything of it is read. Until it joins, a connection may send no frame
  // larger than transport::kMaxJoinFrameBytes (connection_options()), so
  // unjoined connections hold at most 8 KiB of frame buffer each.
  // How a round's decoded updates are combined (robust_aggregation.h).
  // mean keeps a running sum; every other rule holds the round's decoded
  // updates until it closes: n * d floats (8 devices of LeNet-300-100,
  // 266,610 parameters: 8.5 MB). krum:F and multi-krum:F need 2F + 3
  // updates: Create refuses a config whose first round (min_devices joined,
  // sampled as configured) would sample fewer, and a later round that
  // closes with fewer is reported as not applied (the reason in
  // RoundReport::failure) and runs again. With NDQSG the rule combines the
  // decoded updates, but the nested updates are decoded against the plain
  // mean of the anchors (the side information), which the rule does not
  // protect: a hostile anchor can spoil the decoding of the nested ones.
  AggregationRule aggregation;
  // Every decoded update is scaled down to this L2 norm when larger (0: no
  // clipping), before it is combined; max_update_norm still refuses the
  // absurd ones first. DP rounds clip to dp.clip instead (then it must be 0).
  double clip_update_norm = 0;
  // Client-level DP-FedAvg (privacy.h; off while dp.noise_multiplier is 0):
  // updates clipped to dp.clip and summed with weight 1, Gaussian noise of
  // std dp.noise_multiplier * dp.clip added to the sum, divided by the number
  // of devices sampled. Needs aggregation mean. RoundReport::dp_epsilon is
  // the privacy spent after each applied round; with a budget, a round that
  // would pass it is not started and the training finishes.
  DpOptions dp;
  std::size_t max_unjoined_connections = 1024;
  std::size_t max_unjoined_per_address = 64;
  // Joined devices at once: a join beyond it is refused (kResourceExhausted).
  // Capped by the keys known (only they can join; `fedrt serve` sizes by its
  // keys file), it bounds the sampling, and so the round's update storage.
  std::size_t max_devices = std::size_t{1} << 16;
  // Updates one round takes (its bookkeeping, the decoded updates of rules
  // other than mean, and NDQSG's payload slots). 0: what the sampling takes
  // from max_devices joined devices; a smaller value is refused by Create.
  std::size_t max_updates_per_round = 0;
  // Every codec but NDQSG: updates a round holds as payloads at once, being
  // received or waiting for their turn in the sum (the block's payload slots,
  // one more kept for the device whose turn it is). An update is folded
  // into the sum when its turn comes (sampled devices in sorted order), so
  // only early arrivals wait. When they fill the pool, a device whose turn
  // it is not is told so (an Error, kUnavailable, the connection kept; its
  // update is dropped, AggregatorCounters::updates_deferred counts it) and
  // gets the round's instructions again once a slot is free for it: it
  // trains the same update again (same model, seed and round) and sends it.
  // 0: kDefaultWaitingUpdates. NDQSG decodes its nested updates against the
  // mean of every anchor, so it holds every payload until the round closes
  // (max_updates_per_round slots): a value other than 0 is refused there.
  std::size_t max_waiting_updates = 0;
  static constexpr std::size_t kDefaultWaitingUpdates = 64;
  // Every codec but NDQSG: of the updates waiting for their turn, how many
  // may wait decoded (d floats each, in the block). An update that arrives
  // before its turn is decoded on arrival to be checked; with a buffer free
  // it stays decoded there until its turn, else only its payload waits and
  // it is decoded again at its turn (AggregatorCounters::updates_decoded_again).
  // The sum and its order are the same either way. At most
  // max_waiting_updates are used; 0: none (every early update is decoded
  // twice). NDQSG decodes at the close and has none.
  std::size_t max_decoded_waiting = kDefaultDecodedWaiting;
  static constexpr std::size_t kDefaultDecodedWaiting = 16;
  // A rule other than mean: the decoded updates a round may hold for the
  // rule (d floats each, in the block), so the block grows with the devices
  // a round samples up to this cap, never with the keys (10,000 keys of
  // LeNet-300-100 with median: 69 MB of held updates at the default, not
  // 10.7 GB). Create refuses a config whose first round (min_devices
  // joined) would sample more; a later round that would sample more (more
  // devices joined) is not started: the training stops, status() naming the
  // sample and this cap. 0: kDefaultHeldUpdates. With aggregation mean
  // (which keeps a running sum) a value other than 0 is refused.
  std::size_t max_held_updates = 0;
  static constexpr std::size_t kDefaultHeldUpdates = 64;
  // connection_options(): a connection silent this long is closed. A join
  // for a device id whose connection was heard from within half of it is
  // refused, the established connection kept; one quiet for longer is
  // replaced by the new join (0: a connection is kept until it closes).
  uint32_t idle_timeout_ms = 30000;
  uint32_t join_timeout_ms = 10000;    // a connection must authenticate within this
  uint32_t max_frame_bytes = 4u << 20;
  // connection_options(): a frame body or a write (up to 16 queued frames)
  // must complete within this. Slow links need more than the default.
  uint32_t io_timeout_ms = 10000;
  // Finish the training (as after the last round) once a round's test
  // accuracy reaches this; 0: off. Needs the test set.
  double target_accuracy = 0;
};

// One sampled device's part in a round (NDQSG rounds fill rho and wraps).
struct DeviceRoundReport {
  std::string device_id;
  bool anchor = false;                 // sent plain DQSG (NDQSG rounds)
  int rho = 0;                         // nesting ratio it was told to use (0: not nested)
  uint64_t near_wraps = 0;             // CountNearWrap of its nested update
  int next_rho = 0;                    // what it is told next round (0: anchor / DQSG)
  uint64_t bytes = 0;                  // payload bytes received
};

// What happened in one round, reported when it closes. A round that applied
// nothing (no update arrived, every update was rejected, or the server
// optimizer refused the mean) is reported with applied = false and the
// reason in `failure`: the global model, the round count and the checkpoint
// stay as they were, and the same round runs again (same round id), up to
// AggregatorConfig::max_failed_rounds in a row; the last of those is
// reported with stopped = true and the training ends.
struct RoundReport {
  uint32_t round = 0;                  // 1-based: the round closed (when applied: rounds completed so far)
  bool applied = true;                 // false: nothing applied; the round runs again
  std::string failure;                 // why nothing was applied (empty when applied)
  uint32_t failed_in_a_row = 0;        // not applied: rounds in a row that applied nothing, this one included
  bool stopped = false;                // not applied, and the training stops (max_failed_rounds reached)
  std::size_t sampled = 0;
  std::size_t updates = 0;             // aggregated
  std::size_t rejected = 0;            // updates refused (connection closed, or not decodable at the close)
  double test_accuracy = -1;           // -1 without a test set
  double test_loss = 0;
  double train_loss = 0;               // sample-weighted mean of the devices' reports
  uint64_t bytes_up = 0;               // update payload bytes received this round
  uint64_t bytes_down = 0;             // model payload bytes sent this round (deltas or full models)
  std::size_t full_models_down = 0;    // downlink codec set: devices sent the full model instead
  uint64_t fp32_bytes_up = 0;          // what the same updates take as raw fp32
  uint64_t near_wraps = 0;             // NDQSG nested decodes near the wrap boundary
  std::size_t anchors = 0;
  double seconds = 0;                  // time of the round (the engine's clock)
  // Where the round's time went, along the update that arrived last: its
  // instructions until the device acknowledged them (download), the
  // device's training and encoding as it reports it (compute, 0 from a device
  // that does not measure), and the rest until the update's last chunk
  // arrived (upload). seconds - their sum is the aggregator's own work
  // (decoding, aggregating, evaluating) and waiting for the round to close.
  double download_seconds = 0;
  double compute_seconds = 0;
  double upload_seconds = 0;
  uint64_t anchor_bytes_up = 0;        // NDQSG: the anchors' share of bytes_up
  std::size_t rho_raised = 0;          // NDQSG: devices given a larger rho for the next round
  std::size_t rho_lowered = 0;         // NDQSG: devices stepped back down
  std::size_t switched_to_dqsg = 0;    // NDQSG: devices past max_rho, anchors next round
  std::size_t clipped = 0;             // updates scaled down to clip_update_norm (or dp.clip)
  std::vector<std::string> selected;   // krum, multi-krum: the devices whose updates were chosen
  double dp_epsilon = -1;              // DP: epsilon spent so far at dp.delta (-1: DP off)
  double dp_sampling_rate = 0;         // DP: devices sampled / connected this round
  std::vector<DeviceRoundReport> devices;  // the updates received, in decoding order
  uint32_t level_table_version = 0;    // ALQ / AMQ: the table the next round uses
  std::vector<float> level_table;      // its levels
};

// Why an update was refused, for AggregatorCounters. An update is counted
// once, under the first check it failed.
enum class UpdateRejection : int {
  kNotRequested = 0,  // for a round that did not sample the device
  kWrongCodec,        // not the codec the instructions named
  kTooLarge,          // announced more bytes than the codec allows for the model
  kBadSamples,        // sample count 0 or above max_update_samples
  kBadLevels,         // ALQ / AMQ: wrong table version or bad statistics
  kBadChunks,         // the chunks did not reassemble
  kBadValues,         // did not decode, not finite, or above max_update_norm
  kNotCombined,       // refused when the round closed (no anchor, the sum refused it)
};
constexpr int kUpdateRejectionCount = 8;
// "not_requested", "wrong_codec", ... (the label monitoring exports).
const char* UpdateRejectionName(UpdateRejection reason);

// Running totals since Create (resumed rounds count in rounds_completed
// only), for a host's monitoring; read them between calls, on the thread
// that drives the aggregator.
struct AggregatorCounters {
  uint64_t rounds_completed = 0;       // round(): applied rounds, resumed ones included
  uint64_t rounds_not_applied = 0;     // rounds closed with nothing applied (run again)
  uint32_t failed_in_a_row = 0;        // of those, since the last applied round (0: the last one applied)
  std::string last_failure;            // why the last round that applied nothing did not (empty: none yet)
  uint64_t joins = 0;                  // successful joins (reconnects count again)
  uint64_t connections_refused = 0;    // closed at once for the caps on unjoined connections
  uint64_t updates_accepted = 0;       // updates combined into an applied or failed round
  uint64_t updates_rejected[kUpdateRejectionCount] = {};  // by UpdateRejection
  uint64_t updates_deferred = 0;       // told to send again later: max_waiting_updates were waiting
  uint64_t updates_decoded_again = 0;  // arrived before their turn, no decoded buffer free: decoded twice
  uint64_t bytes_up = 0;               // update payload bytes received in closed rounds
  uint64_t bytes_down = 0;             // model payload bytes sent in closed rounds
  uint64_t rounds_timed = 0;           // closed rounds (applied or not) ...
  double round_seconds_total = 0;      // ... and their time on the engine's clock
  double last_round_seconds = -1;      // -1: no round closed yet
  double last_test_accuracy = -1;      // after the last applied round (-1: none, or no test set)
  double best_test_accuracy = -1;
  double dp_epsilon = -1;              // DP: spent so far (-1: DP off or no round yet)
};

// The round in progress, for a host's display (Aggregator::round_progress).
struct RoundProgress {
  bool open = false;             // a round is running
  uint32_t round = 0;            // 1-based, as RoundReport::round
  std::size_t sampled = 0;
  std::size_t received = 0;      // updates in
  std::size_t quorum = 0;        // updates that close it before its deadline
  uint64_t elapsed_ms = 0;
  uint64_t deadline_in_ms = 0;   // until it closes with what has arrived
};

// What an aggregator needs to resume where it was and send the instructions
// it would have sent: global model, server optimizer state, completed rounds
// and the codec state. RunAggregator keeps it in a file
// (src/star/aggregator_checkpoint.h describes the format).
struct AggregatorCheckpoint {
  std::string model;
  uint32_t round = 0;
  std::vector<float> parameters;
  std::vector<float> first_moment;
  std::vector<float> second_moment;
  // Codec state (version 2).
  std::string codec;                      // empty: none recorded (version 1)
  uint32_t level_table_version = 0;       // ALQ / AMQ: the table of the next round
  std::vector<float> level_table;         // empty: none
  std::map<std::string, int32_t> rho;     // NDQSG devices whose rho is not the codec's
  std::set<std::string> forced_anchors;   // NDQSG devices told to send plain DQSG next
  std::string downlink_codec;             // empty: full models down
  int64_t device_model_round = -1;        // round of device_model (-1: none)
  std::vector<float> device_model;        // the model the devices reconstructed
  std::map<std::string, int64_t> synced;  // device -> last round whose model it acknowledged
  // DP (version 3): the accountant's RDP at orders 2..256 (empty: none).
  std::vector<double> dp_rdp;
  // ALQ / AMQ with refit=N (section version 2): the level statistics merged
  // since the last fit and the rounds they span, so a restarted aggregator
  // fits the same next table as one that ran on.
  LevelStatistics pending_levels;
  uint32_t rounds_since_refit = 0;
};

// Callbacks run on the thread that drives the aggregator, inside Tick() or a
// connection callback (or CloseJobDone()); they must not block for long.
// on_checkpoint is the exception: with on_close_job it runs in the job, on
// the host's thread.
struct AggregatorHooks {
  // RunAggregator only: the TCP port it listens on, and the port of its
  // monitoring endpoint (AggregatorOptions::http_host).
  std::function<void(uint16_t port)> on_listening;
  std::function<void(uint16_t port)> on_http_listening;
  // RunAggregator only: between slices of its loop (every 20 ms) while a
  // round is open.
  std::function<void(const RoundProgress&)> on_round_progress;
  std::function<void(const RoundReport&)> on_round;
  // The state to persist after every applied round (before on_round).
  std::function<void(const AggregatorCheckpoint&)> on_checkpoint;
  // Takes the heavy end of an applied round's close (the evaluation, then
  // on_checkpoint) to run on any thread; the host calls CloseJobDone() on the
  // driving thread once it has run (see "The close job" above). Called only
  // when there is something to run (a test set or on_checkpoint). Empty: the
  // job runs inside Tick().
  std::function<void(std::function<void()> job)> on_close_job;
  // The round's mean decoded update before the server optimizer (tests).
  std::function<void(uint32_t round, const std::vector<float>& mean)> on_aggregate;
  // With a downlink codec: the model the devices hold for `round` (tests).
  std::function<void(uint32_t round, const std::vector<float>& device_model)> on_broadcast;
  // The instruction frames sent to a device for `round`, as wire bytes (tests).
  std::function<void(uint32_t round, const std::string& device_id, const std::vector<uint8_t>& wire_bytes)>
      on_instructions;
  // The aggregator tier this engine is one rank of (aggregator_tier.h: it
  // then serves the devices of its shard, redirects the others, and agrees
  // every Tick and every round with the other ranks). Null: this engine is
  // the whole aggregator. Not owned; it outlives the engine.
  AggregatorTier* tier = nullptr;
};

class Aggregator final : public transport::ConnectionHandler {
 public:
  // Checks the config (model spec, codecs, NDQSG and downlink settings, frame
  // limit) and the test set (null: no evaluation; it must fit the model) and
  // builds the initial global model from model_seed. kInvalidArgument (or the
  // parser's status) naming what is wrong.
  // Create makes the block on the heap.
  static Result<std::shared_ptr<Aggregator>> Create(const AggregatorConfig& config, const transport::KeyStore& keys,
                                                    transport::Crypto& crypto, const Clock& clock,
                                                    const DataView* test_set, AggregatorHooks hooks = {});
  // The bytes CreateIn needs for `config` (at any alignment), or the
  // config's error. The keys count: no more devices can join than have one.
  static Result<std::size_t> RequiredBytes(const AggregatorConfig& config, const transport::KeyStore& keys);
  // Places the aggregator in `memory` (`size` bytes, at least RequiredBytes;
  // kOutOfRange otherwise), which must outlive it; Destroy ends it (Abort
  // first). Connections hold their handler by shared_ptr: hand them a
  // non-owning one, std::shared_ptr<Aggregator>(std::shared_ptr<void>(), a),
  // and Abort or Finish before Destroy.
  static Result<Aggregator*> CreateIn(void* memory, std::size_t size, const AggregatorConfig& config,
                                      const transport::KeyStore& keys, transport::Crypto& crypto, const Clock& clock,
                                      const DataView* test_set, AggregatorHooks hooks = {});
  static void Destroy(Aggregator* aggregator);
  ~Aggregator() override;
  Aggregator(const Aggregator&) = delete;
  Aggregator& operator=(const Aggregator&) = delete;

  // Resumes from a saved state, before the first connection opens. The codec
  // state is used where it belongs to this config's codecs (another update
  // codec starts its table and rho afresh, another downlink codec starts
  // from full models). kFailedPrecondition for another model ("holds model
  // ...") or once a connection has opened; kCorrupt for a level table the
  // codec refuses.
  Status Restore(AggregatorCheckpoint checkpoint);

  // Deadlines and round changes (see above). Returns the milliseconds until
  // the next deadline it knows of (UINT32_MAX: none; it waits for frames);
  // 0 when it closed a round and the next can start at once. While a close
  // job is out no round starts: tick again after CloseJobDone().
  uint32_t Tick();
  // The close job handed to on_close_job has run: reports the round
  // (on_round) and lets the next start. No-op unless closing().
  void CloseJobDone();
  // A close job is out (handed to on_close_job, CloseJobDone() not called yet).
  bool closing() const;
  // Tells every joined device that the training is over (a Leave) and closes
  // every connection; finished() is then true. Tick() calls it once the last
  // round is applied; a host may call it to end the training early.
  void Finish();
  // Closes every connection at once, without a Leave (the host is stopping).
  void Abort(const Status& reason);

  bool finished() const;
  // OK, or why the training stopped before its last round: kFailedPrecondition
  // when max_failed_rounds rounds in a row applied nothing (naming the last
  // round's reason). finished() is true then as well.
  Status status() const;
  uint32_t round() const;                 // rounds completed (counting resumed ones)
  std::size_t connected_devices() const;  // joined devices with an open connection
  std::size_t open_connections() const;   // joined or not
  // The same over every rank of the engine's tier (AggregatorHooks::tier)
  // as of its last Tick (agreed there, no extra exchange); without a tier,
  // the two above. Rank 0's /metrics and /healthz report these.
  std::size_t all_connected_devices() const;
  std::size_t all_open_connections() const;
  const Model& model() const;             // the global model
  const std::string& codec() const;       // the update codec's canonical spec
  const AggregatorConfig& config() const;
  const AggregatorCounters& counters() const;
  RoundProgress round_progress() const;
  // Options for the connections of a binding: the frame limits (sized for
  // the model, and the small pre-join limit, which the aggregator lifts when
  // a device has joined), idle timeout and heartbeat interval, and no
  // transport log of close reasons (the aggregator logs each close once).
  // TLS is the binding's.
  transport::ConnectionOptions connection_options() const;

  // transport::ConnectionHandler.
  void OnOpen(const std::shared_ptr<transport::Connection>& connection) override;
  void OnFrame(transport::Connection& connection, transport::Frame frame) override;
  void OnClose(transport::Connection& connection, const Status& reason) override;

  struct State;  // private to the runtime

 private:
  Aggregator(State* state, std::unique_ptr<unsigned char[]> block);
  State* state_;                          // in the block
  std::unique_ptr<unsigned char[]> block_;  // Create's heap block (null for CreateIn)
};

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_AGGREGATOR_ENGINE_H_
