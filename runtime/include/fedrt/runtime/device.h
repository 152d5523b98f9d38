// The star topology's device as a Linux program's building block: RunDevice
// loads the key file, the data share and the state file, dials the
// aggregator over TCP (TLS), and drives the device engine
// (fedrt/runtime/device_client.h, which has the protocol and embeds in any
// program) until the training ends. It joins an aggregator, and for every round it is
// sampled in, trains its share of the data for the instructed epochs from the
// global model it received, encodes delta = local - global with the instructed
// codec (through its error-feedback residual when the codec asks for one), and
// sends it (transport/README.md, "Star protocol").
//
// When the link drops (or cannot be made) the device reconnects with
// exponential backoff (100 ms doubling to 5 s) and jitter, and resumes at the
// aggregator's current round. The error-feedback residual is kept across
// rounds and, with `state_file`, across restarts of the device.
//
// Ownership: RunDevice owns its connection, model and data.
// Thread-safety: RequestStop via `stop` from any thread; the hooks run on the
// calling thread.
#ifndef FEDRT_RUNTIME_DEVICE_H_
#define FEDRT_RUNTIME_DEVICE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/device_client.h"
#include "fedrt/transport/link_profile.h"
#include "fedrt/transport/tls.h"

namespace fedrt {

struct DeviceOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  // An aggregator tier (aggregator_tier.h): further ranks' HOST:PORT. The
  // device joins host:port; when that cannot be reached it tries these in
  // turn, and a rank that redirects it (the rank serving its shard) is where
  // it joins next.
  std::vector<std::string> more_servers;
  std::string device_id;
  std::string key_file;              // the device's own key line
  std::string data_dir;              // MNIST-style directory (training set)
  std::string model = "mlp:784-300-100-10";  // must have the aggregator's parameter count
  std::string partition = "iid";     // iid | dirichlet:<alpha> | shards:<k>
  int devices = 1;                   // how many shares the training set is cut into
  int index = -1;                    // this device's share; -1: from the id's trailing number
  uint64_t partition_seed = 7;
  int batch = 32;
  std::string state_file;            // error-feedback residual across restarts; empty: memory only
  uint32_t connect_timeout_ms = 5000;
  uint32_t max_backoff_ms = 5000;
  uint32_t give_up_ms = 60000;       // stop reconnecting after this long without the server
  // A frame body or a write must complete within this (slow links need more
  // than the default for a model-sized frame: 1 MB at 1 Mbit/s is 8 s).
  uint32_t io_timeout_ms = 10000;
  // Shape the connection to the aggregator in user space (transport/shaper.h):
  // what a device on a link of this rate, delay and loss would see. Not
  // shaped by default.
  transport::LinkProfile link;
  transport::TlsConfig tls;          // ca_file (+ server_name): connect over TLS; empty: plain TCP
  // Misbehave (tests of robust aggregation): a fedrt/runtime/byzantine.h
  // behaviour applied to every update before encoding; empty: honest.
  std::string byzantine;
};

// Runs until the aggregator says the training is over (OK), `stop` becomes
// true (kCancelled), the join is refused (kUnauthenticated) or the server
// stays unreachable for give_up_ms (kUnavailable).
Status RunDevice(const DeviceOptions& options, const DeviceHooks& hooks,
                 const std::atomic<bool>* stop = nullptr);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_DEVICE_H_
