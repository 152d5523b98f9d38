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
  // Star, stragglers: the share of the devices a round wants, spares sampled
  // on top (over-selection), and the share of the wanted whose updates close
  // the round before the deadline (AggregatorConfig::quorum).
  double fraction = 1.0;
  double over_selection = 0.0;
  double quorum = 1.0;
  uint64_t seed = 1;             // star: codec randomness, sampling and the initial model
  uint64_t partition_seed = 7;   // star: the devices' shares and their local data order
  // Star: a codec's run ends at the first round whose test accuracy reaches
  // this fraction; the summary gives each codec's time and bytes to it and
  // its speed-up against fp32. 0: off.
  double target_accuracy = 0;
  // Star: anchor_fraction, wrap_threshold, max_rho, anchor_levels and the
  // robust aggregation and DP options.
  AggregatorOptions star;
  std::string aggregation = "mean";  // star: parsed into star.aggregation
  // Star: --downlink-codec, given once (every codec) or once per --codec
  // (the i-th codec's, in order); "none": the full fp32 model.
  std::vector<std::string> downlink_codecs;
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
  // Each device's (peer's) link (cli/link_flags.h): --link for all, or
  // --link-file; shaped in the kernel, in user space or both, as
  // PlanShapers (cli/kernel_links.h) decides: shaper is auto, kernel or user.
  std::string link;
  std::string link_file;
  std::string shaper = "auto";
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
  // --target-accuracy: when the run first reached it (-1: never), with the
  // bytes up and down and the rounds it took.
  double seconds_to_target = -1;
  uint64_t bytes_to_target = 0;
  double rounds_to_target = 0;
  // Where the applied rounds' time went (RoundReport's split, summed).
  double download_seconds = 0, compute_seconds = 0, upload_seconds = 0;
  // Wall time of each point (empty: not known; the plot's third panel needs
  // it for every series).
  std::vector<double> elapsed;
  // Star: applied rounds that closed with fewer updates than sampled, and
  // the sampled devices' updates they went without (late, lost or refused).
  std::size_t short_rounds = 0, missing_updates = 0;
};

// SVG with two panels: accuracy vs `x_label`, accuracy vs MB (log axis),
// and a third, accuracy vs wall time, when every series has `elapsed`; a
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
// `target` (> 0): also the time and bytes to that accuracy and the speed-up
// in time against the fp32 run, and where the rounds' time went.
void PrintSimTable(const std::vector<SimSeries>& all, const char* name_header, const char* mb_header,
                   double target = 0);
// Starts the `fedrt` binary with `args` (args[0] is its name), output to
// `log_path`, OPENBLAS_NUM_THREADS=1; -1 when it cannot start.
// With `wrapper` (such as {"ip", "netns", "exec", NAME}), runs the wrapper
// program with the fedrt binary's path and args[1..] after it.
pid_t SpawnLogged(std::vector<std::string> args, const std::string& log_path,
                  const std::vector<std::string>& wrapper = {});
// "exited with status 1", "was killed by signal 9": a waitpid status.
std::string DescribeExit(int status);
// The downlink codec of each of `codecs` from --downlink-codec (flags above);
// "" for the full fp32 model. kInvalidArgument for a count that is neither 1
// nor the codecs' or a spec MakeCodec refuses.
Result<std::vector<std::string>> PairDownlinkCodecs(const std::vector<std::string>& downlinks,
                                                    const std::vector<std::string>& codecs);
// Directory-safe form of a codec spec.
std::string SimLabel(const std::string& codec);
// Where `fedrt sim --save-model F` writes `codec`'s final model: F without a
// trailing ".npz", "-", SimLabel(codec), ".npz" (m.npz, fp32: m-fp32.npz).
std::string SimModelPath(const std::string& save_model, const std::string& codec);

// "N:KIND" of --byzantine: how many devices (peers) and what they do;
// kInvalidArgument unless 1 <= N <= `members` and KIND parses (byzantine.h).
Status ParseSimByzantine(const std::string& text, int members, int* count, std::string* kind);

int RunPeerSim(const SimFlags& flags);
int RunSimCompare(const SimFlags& flags);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_SIM_REPORT_H_
