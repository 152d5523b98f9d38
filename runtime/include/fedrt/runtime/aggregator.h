// The star topology's aggregator: the server that devices join, that sends
// each round's instructions (global model, codec, seed, epochs, learning rate,
// NDQSG anchor role) and that combines the devices' compressed updates into
// the next global model (transport/README.md, "Star protocol").
//
// The aggregator serves every connection asynchronously (RunAggregator: one
// EventLoop, one Asio io_context, on the calling thread): a slow device never
// blocks the others, and a round closes at its quorum or at its deadline,
// whichever comes first. Every
// received update is untrusted: its round, codec spec, announced size, sample
// count (its weight, at most max_update_samples), payload (checked by the
// codec's decoder) and decoded values (finite, L2 norm at most
// max_update_norm) are checked before anything is added; a bad one closes
// that connection only, with the reason logged, and the round goes on
// without it. A round that applies nothing is reported as not applied and
// runs again (RoundReport::applied). The accepted updates are combined by
// the configured rule (mean, median, trimmed mean, Krum, multi-Krum:
// robust_aggregation.h), optionally clipped, or by DP-FedAvg with its
// privacy accountant (privacy.h); AggregatorConfig says how.
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
// This header is the Linux host: RunAggregator loads the key file, the test
// set and the checkpoint, listens on TCP (TLS) and runs the protocol, which
// lives in the engine, fedrt/runtime/aggregator_engine.h (class Aggregator:
// a ConnectionHandler plus Tick(), on an injected clock, key store and test
// set). An application that accepts its own connections, keeps its own
// files, or runs devices in the same process (examples/03_embed.cc) drives
// the engine directly.
//
// Threads: the loop, and one worker for the heavy end of each applied
// round's close (the test set's evaluation, then the checkpoint's fsync'ed
// write: the engine's close job), so that devices and /healthz are served
// while it runs; the next round starts as soon as it is back.
//
// Ownership: RunAggregator owns everything it creates; the callbacks run on
// the calling thread, between I/O handlers, and must not block for long,
// except on_checkpoint, which runs on the close worker (on_close_job is
// RunAggregator's own). Thread-safety: `stop` may be set from any thread.
#ifndef FEDRT_RUNTIME_AGGREGATOR_H_
#define FEDRT_RUNTIME_AGGREGATOR_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/transport/tls.h"

namespace fedrt {

// The engine's config plus what the host loads and where it listens.
struct AggregatorOptions : AggregatorConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 0;                   // 0: any free port (reported by on_listening)
  std::string key_file;                // every device's key (transport/README.md)
  std::string data_dir;                // MNIST-style directory: test set, normalisation; empty: no evaluation
  std::string checkpoint;              // written atomically every round, resumed from; empty: none
  // The global model of round 0 (the model's flat parameters; empty: the
  // model spec's random initialisation). A checkpoint that exists wins: it is
  // resumed from and this is not used.
  std::vector<float> initial_parameters;
  std::string save_model;              // the final global model goes to this .npz (model_file.h); empty: none
  transport::TlsConfig tls;            // cert_file + key_file: devices connect over TLS; empty: plain TCP
  // Monitoring over HTTP on the same event loop: GET /metrics (Prometheus
  // text format: rounds, joins, updates accepted and rejected by reason,
  // payload bytes, round time, test accuracy, checkpoint age, DP epsilon)
  // and GET /healthz (200 while serving; 503 with the reason once the
  // training has finished or stopped, while the last round applied nothing,
  // or when the latest state cannot be saved). Empty: none.
  std::string http_host;
  uint16_t http_port = 0;              // 0: any free port (reported by on_http_listening)
  // After the training has ended (finished, or stopped with a reason) and
  // the model and checkpoint are saved, /metrics and /healthz keep answering
  // this long, so a scraper polling every 15-60 s sees the final state
  // (healthz "finished: ..." or "stopped: ..."); the device port is closed
  // by then. `stop` ends it at once. 0: serving ends with the training.
  uint32_t http_linger_ms = 0;
};

// Serves until `options.rounds` rounds are done (then tells the devices to
// leave) or `stop` becomes true. Returns the first fatal error (bad options,
// key file, data set, port in use, checkpoint unreadable), or, with a
// checkpoint, an error naming the round and the reason when the latest state
// could not be saved by the end. A failed checkpoint write does not stop the
// training: it is logged with the reason and retried (100 ms doubling to
// 2 s, a newer state replacing it), a partial <path>.tmp is removed, and a
// few descriptors are held in reserve for the write, so running out of them
// to connections (EMFILE) does not stop it. With `save_model` the global
// model is written when serving ends (also after `stop`); a failed write is
// the returned error.
Status RunAggregator(const AggregatorOptions& options, const AggregatorHooks& hooks,
                     const std::atomic<bool>* stop = nullptr);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_AGGREGATOR_H_
