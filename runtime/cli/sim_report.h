// What the simulations share: `fedrt sim` runs the star topology
// (sim_command.cc) or N `fedrt peer` processes on a ring or gossip graph
// (sim_peer.cc); both draw the same plot and summary table, and
// `fedrt sim --compare` draws several runs' metrics.jsonl on one plot.
#ifndef FEDRT_RUNTIME_CLI_SIM_REPORT_H_
#define FEDRT_RUNTIME_CLI_SIM_REPORT_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/runtime/aggregator.h"

namespace fedrt::cli {

struct SimFlags {
  std::string topology = "star";  // star | ring | gossip
  int devices = 8;                // star: device processes
  int peers = 4;                  // ring, gossip: peer processes
  uint32_t rounds = 10;
  std::vector<std::string> codecs;
  std::string partition = "iid";
  std::string out = "sim-out";
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "mlp:784-300-100-10";
  uint32_t epochs = 1;  // star: local epochs per round; ring, gossip: epochs
  float lr = 0.05f;
  int batch = 32;
  uint32_t deadline_ms = 300000;
  uint64_t seed = 1;             // star: codec randomness, sampling and the initial model
  uint64_t partition_seed = 7;   // star: the devices' shares and their local data order
  // Star: anchor_fraction, wrap_threshold, max_rho, anchor_levels,
  // downlink_codec, and the robust aggregation and DP options.
  AggregatorOptions star;
  std::string aggregation = "mean";  // star: parsed into star.aggregation
  // Star: "N:KIND": devices dev-0 .. dev-(N-1) misbehave (fedrt/runtime/byzantine.h).
  std::string byzantine;
  // Star: the round-0 model of every codec's run (.npz or checkpoint), and
  // where each codec's final model goes: <save_model without .npz>-<label>.npz.
  std::string init_model;
  std::string save_model;
  // Ring and gossip.
  int evals_per_epoch = 1;
  uint32_t step_timeout_ms = 30000;
  bool repair = false;
  std::string graph = "ring";  // gossip: ring | torus
  float momentum = 0.9f;
  std::string schedule = "constant";  // ring, gossip: constant | cosine
  std::vector<std::string> peer_args;  // appended to every `fedrt peer` command line
  // Plot only: earlier runs' output directories.
  std::vector<std::string> compare;
  // TLS on every connection with a throwaway CA and certificate written to
  // <out>/tls; the three files are set when the run starts. The star
  // aggregator and every peer present the 127.0.0.1 certificate.
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
};

// One line of the plot: test accuracy against `rounds` (rounds for the star
// topology, epochs for ring and gossip) and against cumulative megabytes.
struct SimSeries {
  std::string codec;  // the legend's text
  std::vector<double> rounds, accuracy, megabytes;
  uint64_t bytes_up = 0, fp32_bytes_up = 0, near_wraps = 0, bytes_down = 0;
  double seconds = 0;
};

// SVG with two panels: accuracy vs `x_label`, accuracy vs MB (log axis); a
// marker (class "point", titled with its values) on every point, tick labels
// of class "xtick", "ytick" and "mbtick", the legend below the panels.
std::string SimPlot(const std::vector<SimSeries>& all, const std::string& title,
                    const std::string& x_label = "round",
                    const std::string& mb_label = "MB uploaded (log scale)");
// Axis ticks over [lo, hi]: the multiples of one step (1, 2 or 5 times a
// power of ten; whole numbers when `integers`) in it, at most about `most`.
std::vector<double> NiceTicks(double lo, double hi, int most, bool integers);
// A tick's label with the decimals its step needs (no two labels alike).
std::string TickLabel(double value, const std::vector<double>& ticks);
// The closing table (final accuracy, MB, ratio to fp32, wraps, time).
void PrintSimTable(const std::vector<SimSeries>& all, const char* name_header, const char* mb_header);
// Starts the `fedrt` binary with `args` (args[0] is its name), output to
// `log_path`, OPENBLAS_NUM_THREADS=1; -1 when it cannot start.
pid_t SpawnLogged(std::vector<std::string> args, const std::string& log_path);
// "exited with status 1", "was killed by signal 9": a waitpid status.
std::string DescribeExit(int status);
// Directory-safe form of a codec spec.
std::string SimLabel(const std::string& codec);
// Where `fedrt sim --save-model F` writes `codec`'s final model: F without a
// trailing ".npz", "-", SimLabel(codec), ".npz" (m.npz, fp32: m-fp32.npz).
std::string SimModelPath(const std::string& save_model, const std::string& codec);

int RunPeerSim(const SimFlags& flags);
int RunSimCompare(const SimFlags& flags);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_SIM_REPORT_H_
