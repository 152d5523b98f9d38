// The star topology's aggregator: the server that devices join, that sends
// each round's instructions (global model, codec, seed, epochs, learning rate,
// NDQSG anchor role) and that combines the devices' compressed updates into
// the next global model (transport/README.md, "Star protocol").
//
// One EventLoop (one Asio io_context) on the calling thread serves every
// connection asynchronously: a slow device never blocks the others, and a
// round closes at its quorum or at its deadline, whichever comes first. Every
// received update is untrusted: its round, codec spec, announced size, payload
// (checked by the codec's decoder) and decoded values (finite) are checked
// before anything is added; a bad one closes that connection only, with the
// reason logged, and the round goes on without it.
//
// NDQSG rounds: the aggregator names the anchors (plain DQSG with s = s1) and
// decodes them first, then decodes the nested updates against the running mean
// (fedrt/codecs/ndqsg.h). It counts near-wraps per device and adapts that
// device's nesting ratio: a device whose count passes `wrap_threshold` (a
// fraction of the coordinates) gets the next larger rho next round
// (2 -> 3 -> 5 -> ...), and plain DQSG (it becomes an anchor) once rho would
// pass `max_rho`; a device well under the threshold (a quarter of it) steps
// back down towards the configured rho. RoundReport::devices records every
// device's role, rho and count.
//
// ALQ / AMQ rounds: every instruction carries the level table and its
// version; the devices encode with it and send the statistics of what they
// encoded; an update naming another version, or with statistics that fail
// validation, is refused like any bad update. When a round is applied the
// statistics of its accepted updates are merged and the next table (version
// + 1) is fitted to them, deterministically. The checkpoint holds the table,
// the NDQSG per-device rho and the downlink device model, so a restarted
// aggregator sends the instructions it would have sent.
//
// Determinism: a round's updates are combined in the order of its sampled
// devices (sorted ids), whatever order they arrive in, so the same updates
// give the same global model bit for bit (plain sums and NDQSG running means,
// decodes, wrap counts and adaptation alike).
//
// Ownership: RunAggregator owns everything it creates; the callbacks run on
// the calling thread, between I/O handlers, and must not block for long.
// Thread-safety: RequestStop() may be called from any thread.
#ifndef FEDRT_RUNTIME_AGGREGATOR_H_
#define FEDRT_RUNTIME_AGGREGATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/transport/tls.h"

namespace fedrt {

struct AggregatorOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;                   // 0: any free port (reported by on_listening)
  std::string key_file;                // every device's key (transport/README.md)
  std::string data_dir;                // MNIST-style directory: test set, normalisation; empty: no evaluation
  std::string model = "mlp:784-300-100-10";
  uint64_t model_seed = 1;             // initial global model
  std::string codec = "fp32";          // what devices send; "ndqsg:..." runs anchors + nested
  uint32_t rounds = 10;                // stop after this many rounds (counting resumed ones)
  std::size_t min_devices = 1;         // joined devices before the first round starts
  SamplingOptions sampling;            // devices per round
  double quorum = 1.0;                 // fraction of the sampled devices that closes a round early
  uint32_t round_deadline_ms = 120000; // a round closes at the deadline with what has arrived
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
  std::string checkpoint;              // written atomically every round, resumed from; empty: none
  uint32_t idle_timeout_ms = 30000;    // a connection that sends nothing for this long is closed
  uint32_t join_timeout_ms = 10000;    // a connection must authenticate within this
  uint32_t max_frame_bytes = 4u << 20;
  transport::TlsConfig tls;            // cert_file + key_file: devices connect over TLS; empty: plain TCP
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

// What happened in one round, reported after it is applied.
struct RoundReport {
  uint32_t round = 0;                  // 1-based: rounds completed so far
  std::size_t sampled = 0;
  std::size_t updates = 0;             // aggregated
  std::size_t rejected = 0;            // updates refused (connection closed)
  double test_accuracy = -1;           // -1 without a test set
  double test_loss = 0;
  double train_loss = 0;               // sample-weighted mean of the devices' reports
  uint64_t bytes_up = 0;               // update payload bytes received this round
  uint64_t bytes_down = 0;             // model payload bytes sent this round (deltas or full models)
  std::size_t full_models_down = 0;    // downlink codec set: devices sent the full model instead
  uint64_t fp32_bytes_up = 0;          // what the same updates take as raw fp32
  uint64_t near_wraps = 0;             // NDQSG nested decodes near the wrap boundary
  std::size_t anchors = 0;
  double seconds = 0;                  // wall time of the round
  uint64_t anchor_bytes_up = 0;        // NDQSG: the anchors' share of bytes_up
  std::size_t rho_raised = 0;          // NDQSG: devices given a larger rho for the next round
  std::size_t rho_lowered = 0;         // NDQSG: devices stepped back down
  std::size_t switched_to_dqsg = 0;    // NDQSG: devices past max_rho, anchors next round
  std::vector<DeviceRoundReport> devices;  // the updates received, in decoding order
  uint32_t level_table_version = 0;    // ALQ / AMQ: the table the next round uses
  std::vector<float> level_table;      // its levels
};

struct AggregatorHooks {
  std::function<void(uint16_t port)> on_listening;
  std::function<void(const RoundReport&)> on_round;
  // The round's mean decoded update before the server optimizer (tests).
  std::function<void(uint32_t round, const std::vector<float>& mean)> on_aggregate;
  // With a downlink codec: the model the devices hold for `round` (tests).
  std::function<void(uint32_t round, const std::vector<float>& device_model)> on_broadcast;
  // The instruction frames sent to a device for `round`, as wire bytes (tests).
  std::function<void(uint32_t round, const std::string& device_id, const std::vector<uint8_t>& wire_bytes)>
      on_instructions;
};

// Serves until `options.rounds` rounds are done (then tells the devices to
// leave) or `stop` becomes true. Returns the first fatal error (bad options,
// key file, data set, port in use, checkpoint unreadable).
Status RunAggregator(const AggregatorOptions& options, const AggregatorHooks& hooks,
                     const std::atomic<bool>* stop = nullptr);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_AGGREGATOR_H_
