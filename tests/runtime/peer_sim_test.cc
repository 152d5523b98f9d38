// `fedrt sim --topology ring|gossip` as users run it: peer processes on
// 127.0.0.1 train a tiny generated data set; the run writes metrics.jsonl and
// plot.svg, and `fedrt sim --compare` draws both runs on one plot. And both
// simulations, star and ring, stop with the reason when a device or peer
// process ends early instead of waiting for it. Native builds only (real
// processes).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_cli.h"
#include "child_process.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

using Run = testing::CliRun;
using testing::RunCli;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<nlohmann::json> Lines(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::size_t Count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string TinyData(const testing::TempDir& dir) {
  const std::string data = dir.File("data");
  REQUIRE(mkdir(data.c_str(), 0700) == 0);
  REQUIRE(std::system((std::string(FEDRT_IDX_FIXTURE_PATH) + " " + data).c_str()) == 0);
  return data;
}

// Every row of one codec: increasing epochs and bytes, accuracy in [0, 1].
void CheckSeries(const std::vector<nlohmann::json>& rows, const std::string& topology, const std::string& codec,
                 std::size_t expected_rows) {
  std::vector<nlohmann::json> mine;
  for (const auto& r : rows) {
    if (r["codec"] == codec) mine.push_back(r);
  }
  INFO(topology, " ", codec);
  REQUIRE(mine.size() == expected_rows);
  double last_epoch = 0, last_bytes = 0;
  for (const auto& r : mine) {
    CHECK(r["topology"] == topology);
    CHECK(r["peers"] == 3);
    CHECK(r["reporting_peers"] == 3);
    CHECK(r["epoch"].get<double>() > last_epoch);
    CHECK(r["total_bytes_sent"].get<double>() > last_bytes);
    CHECK(r["test_accuracy"].get<double>() >= 0.0);
    CHECK(r["test_accuracy"].get<double>() <= 1.0);
    last_epoch = r["epoch"].get<double>();
    last_bytes = r["total_bytes_sent"].get<double>();
  }
  CHECK(last_epoch == doctest::Approx(2.0));
}

TEST_CASE("fedrt sim runs a ring and a gossip simulation and draws them on one comparison plot") {
  testing::TempDir dir;
  const std::string data = TinyData(dir);
  const std::string common = " --peers 3 --data " + data + " --model mlp:784-32-10 --epochs 2 --batch 8 --evals-per-epoch 2";

  Run ring = RunCli("sim --topology ring --out " + dir.File("ring") + common + " --codec fp32 --codec iwp:density=0.05");
  INFO(ring.output);
  REQUIRE(ring.exit_code == 0);
  CHECK(ring.output.find("[ring iwp:density=0.05] epoch 2.00/2  peers 3  test acc") != std::string::npos);
  const auto ring_rows = Lines(dir.File("ring/metrics.jsonl"));
  CheckSeries(ring_rows, "ring", "fp32", 4);
  CheckSeries(ring_rows, "ring", "iwp:density=0.05", 4);
  // IWP at 5% density sends far less than the dense ring, which sends
  // exactly what the fp32 reference says.
  CHECK(ring_rows[3]["total_bytes_sent"].get<double>() >= ring_rows[3]["fp32_bytes"].get<double>());
  CHECK(ring_rows[7]["total_bytes_sent"].get<double>() * 5 < ring_rows[3]["total_bytes_sent"].get<double>());
  const std::string ring_svg = Slurp(dir.File("ring/plot.svg"));
  CHECK(ring_svg.rfind("<svg", 0) == 0);
  CHECK(Count(ring_svg, "<polyline") == 4);  // two codecs, two panels
  CHECK(ring_svg.find(">ring iwp:density=0.05</text>") != std::string::npos);

  Run gossip = RunCli("sim --topology gossip --out " + dir.File("gossip") + common +
                      " --codec fp32 --codec moniqua:bits=1,theta=0.5");
  INFO(gossip.output);
  REQUIRE(gossip.exit_code == 0);
  const auto gossip_rows = Lines(dir.File("gossip/metrics.jsonl"));
  CheckSeries(gossip_rows, "gossip", "fp32", 4);
  CheckSeries(gossip_rows, "gossip", "moniqua:bits=1,theta=0.5", 4);
  CHECK(gossip_rows[0]["graph"] == "ring");

  Run compare = RunCli("sim --compare " + dir.File("ring") + " " + dir.File("gossip") + " --out " + dir.File("both"));
  INFO(compare.output);
  REQUIRE(compare.exit_code == 0);
  const std::string both = Slurp(dir.File("both/plot.svg"));
  CHECK(Count(both, "<polyline") == 8);
  for (const char* name : {"ring fp32", "ring iwp:density=0.05", "gossip fp32", "gossip moniqua:bits=1,theta=0.5"}) {
    CHECK(both.find(std::string(">") + name + "</text>") != std::string::npos);
    CHECK(compare.output.find(name) != std::string::npos);
  }
}

TEST_CASE("fedrt sim runs gossip on a torus and names the graph in its metrics and legend") {
  testing::TempDir dir;
  const std::string data = TinyData(dir);
  Run torus = RunCli("sim --topology gossip --graph torus --peers 4 --codec fp32 --data " + data +
                     " --model mlp:784-32-10 --epochs 1 --batch 8 --out " + dir.File("torus"));
  INFO(torus.output);
  REQUIRE(torus.exit_code == 0);
  const auto rows = Lines(dir.File("torus/metrics.jsonl"));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["graph"] == "torus");
  CHECK(rows[0]["peers"] == 4);
  // 2 x 2 torus: two neighbours each, so fp32 sends exactly the reference.
  CHECK(rows[0]["total_bytes_sent"].get<double>() == doctest::Approx(rows[0]["fp32_bytes"].get<double>()).epsilon(1e-6));
  CHECK(Slurp(dir.File("torus/plot.svg")).find(">gossip fp32 (torus)</text>") != std::string::npos);
}

TEST_CASE("fedrt sim gossips on a non-IID partition beside a no-communication baseline and reports wraps per step") {
  testing::TempDir dir;
  const std::string data = TinyData(dir);
  Run run = RunCli("sim --topology gossip --peers 3 --partition shards:2 --codec local --codec moniqua:bits=1 --data " +
                   data + " --model mlp:784-32-10 --epochs 1 --batch 8 --evals-per-epoch 2 --schedule cosine --out " +
                   dir.File("g"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("shards:2 partition") != std::string::npos);
  const auto rows = Lines(dir.File("g/metrics.jsonl"));
  REQUIRE(rows.size() == 4);
  for (const auto& r : rows) CHECK(r["partition"] == "shards:2");
  // The baseline sends nothing and has no wraps.
  for (int i = 0; i < 2; ++i) {
    CHECK(rows[i]["codec"] == "local");
    CHECK(rows[i]["total_bytes_sent"] == 0);
    CHECK(rows[i]["near_wraps"] == 0);
  }
  // Moniqua without theta runs (theta from Moniqua's bound); every step of
  // an evaluation interval has its wrap count (summed over the peers), and
  // they add up to the interval's count.
  uint64_t steps = 0;
  for (int i = 2; i < 4; ++i) {
    CHECK(rows[i]["codec"] == "moniqua:bits=1");
    CHECK(rows[i]["total_bytes_sent"].get<double>() > 0);
    const auto& per_step = rows[i]["near_wraps_per_step"];
    REQUIRE(per_step.is_array());
    CHECK(per_step.size() > 0);
    uint64_t sum = 0;
    for (const auto& w : per_step) sum += w.get<uint64_t>();
    CHECK(sum == rows[i]["near_wraps"].get<uint64_t>());
    steps += per_step.size();
  }
  CHECK(steps == rows[3]["step"].get<uint64_t>());
  // Each peer trained on its shards, and the moniqua peers took the 1-bit
  // rule (a ring of 3 mixes in one step, lambda 0, but its smallest
  // eigenvalue 0 caps gamma at 0.4 / (1 - 0); theta = lr).
  const std::string log = Slurp(dir.File("g/gossip-moniqua_bits_1/rank-0.log"));
  CHECK(log.find("(shards:2)") != std::string::npos);
  CHECK(log.find("gossip codec moniqua:bits=1,round=dither,gamma=0.4,theta=") != std::string::npos);
  CHECK(log.find("Moniqua at 1 bit: dithered") != std::string::npos);
  CHECK(Slurp(dir.File("g/gossip-local/rank-1.log")).find("reduce local") != std::string::npos);
  // The baseline has no point on the log MB axis: one line (accuracy against
  // epochs) for it, two for moniqua, and both in the legend.
  const std::string svg = Slurp(dir.File("g/plot.svg"));
  CHECK(Count(svg, "<polyline") == 3);
  CHECK(svg.find(">gossip local</text>") != std::string::npos);
  CHECK(svg.find("e-06") == std::string::npos);
}

TEST_CASE("an IWP ring with an exponential warm-up sends more in its first steps and its peers end on one model") {
  testing::TempDir dir;
  const std::string data = TinyData(dir);
  const std::string common = " --topology ring --peers 3 --data " + data +
                             " --model mlp:784-32-10 --epochs 1 --batch 8 --schedule cosine --codec iwp:density=0.05";
  Run plain = RunCli("sim --out " + dir.File("plain") + common + " --peer-arg=--iwp-warmup-steps --peer-arg=0");
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);
  Run warmed = RunCli("sim --out " + dir.File("warm") + common +
                      " --peer-arg=--iwp-warmup-steps --peer-arg=3 --peer-arg=--iwp-warmup-density --peer-arg=0.5"
                      " --peer-arg=--iwp-warmup-shape --peer-arg=exponential");
  INFO(warmed.output);
  REQUIRE(warmed.exit_code == 0);
  const auto a = Lines(dir.File("plain/metrics.jsonl"));
  const auto b = Lines(dir.File("warm/metrics.jsonl"));
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  // mlp:784-32-10 has 25,450 parameters. Three steps at 50%, 23% and 11%
  // instead of 5% add up to about 0.69 of the model to each peer's
  // all-reduce values, which IWP sums on the ring (each of the 3 peers sends
  // 2 (p - 1) / p = 4/3 of them): up to about 0.92 of the model's 4-byte
  // floats from each peer (0.75 measured: the selection keeps fewer than
  // the density asks of some tensors).
  const double extra = b[0]["total_bytes_sent"].get<double>() - a[0]["total_bytes_sent"].get<double>();
  MESSAGE("warm-up sent " << extra << " bytes more");
  CHECK(extra > 3 * 0.6 * 4 * 25450);
  CHECK(extra < 3 * 1.4 * 4 * 25450);  // a constant warm-up at 50% would add about 1.8 of the model
  CHECK(b[0]["fp32_bytes"] == a[0]["fp32_bytes"]);
  CHECK(b[0]["test_accuracy_min"] == b[0]["test_accuracy_max"]);
}

TEST_CASE("fedrt sim stops with the reason when its device processes exit before the training ends") {
  testing::TempDir dir;
  const std::string data = TinyData(dir);
  // More shards than examples: every device stops at its start; the
  // aggregator would wait for them forever. `timeout` fails a hang.
  Run run = testing::RunCommand("timeout 120 " + std::string(FEDRT_CLI_PATH) +
                                " sim --devices 2 --rounds 2 --codec fp32 --partition shards:1000 --model "
                                "mlp:784-32-10 --data " + data + " --out " + dir.File("out"));
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("fedrt sim: fp32: device dev-") != std::string::npos);
  CHECK(run.output.find(" exited with status 1 before round 1 of 2 (its log: " + dir.File("out") + "/fp32/dev-") !=
        std::string::npos);
  CHECK(run.output.find("; stopping") != std::string::npos);
}

// The pid of the child of `parent` whose command line holds `word` then `next`.
pid_t ChildWith(pid_t parent, const std::string& word, const std::string& next) {
  DIR* proc = opendir("/proc");
  REQUIRE(proc != nullptr);
  pid_t found = -1;
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = std::atoi(entry->d_name);
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
    std::vector<std::string> args;
    for (std::string arg; std::getline(cmdline, arg, '\0');) args.push_back(arg);
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == word && args[i + 1] == next) found = pid;
    }
  }
  closedir(proc);
  return found;
}

TEST_CASE("fedrt sim stops a ring with the reason when one of its peers dies instead of waiting for its deadlines") {
  testing::TempDir dir;
  const std::string data = TinyData(dir);
  // Steps may take ten minutes: the others would wait that long for the dead peer.
  testing::ChildProcess sim({FEDRT_CLI_PATH, "sim", "--topology", "ring", "--peers", "3", "--codec", "fp32",
                             "--epochs", "200", "--step-timeout-ms", "600000", "--data", data, "--model",
                             "mlp:784-32-10", "--batch", "8", "--out", dir.File("out")});
  REQUIRE(sim.WaitFor("peer processes started"));
  // Started means forked: on a loaded machine a child may not have exec'd
  // yet (its command line is still the sim's), so look again for a while.
  pid_t victim = -1;
  for (int tries = 0; tries < 200 && victim <= 0; ++tries) {
    victim = ChildWith(sim.pid(), "--rank", "1");
    if (victim <= 0) ::usleep(50 * 1000);
  }
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  CHECK(sim.Wait(120) == 1);
  INFO(sim.output());
  // A neighbour that failed because of it within the same poll is named too.
  const std::string& out = sim.output();
  CHECK(out.find("fedrt sim: unavailable: ring fp32: peer ") != std::string::npos);
  CHECK(out.find("rank 1 was killed by signal 9") != std::string::npos);
  CHECK(out.find(" before the run ended (logs: " + dir.File("out") +
                 "/ring-fp32/rank-R.log); the other peers were stopped") != std::string::npos);
  CHECK(ChildWith(sim.pid(), "--rank", "0") == -1);  // none left behind
}

// The texts of the elements `<tag class="cls"...>TEXT<` of an SVG, in order.
std::vector<std::string> SvgTexts(const std::string& svg, const std::string& open) {
  std::vector<std::string> texts;
  for (std::size_t at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    const std::size_t begin = svg.find('>', at) + 1;
    texts.push_back(svg.substr(begin, svg.find('<', begin) - begin));
  }
  return texts;
}

TEST_CASE("the plot draws a point for a run of one evaluation, ticks that differ, and the legend below the curves") {
  testing::TempDir dir;
  // One evaluation (one epoch of a ring), and two rounds whose accuracies
  // differ in the third digit: the cases that drew nothing and "0 0 1 1 2 2".
  REQUIRE(::mkdir(dir.File("one").c_str(), 0755) == 0);
  REQUIRE(::mkdir(dir.File("two").c_str(), 0755) == 0);
  std::ofstream(dir.File("one/metrics.jsonl"))
      << R"({"topology":"ring","codec":"fp32","epoch":1,"test_accuracy":0.5,"total_bytes_sent":2000000})" << "\n";
  std::ofstream(dir.File("two/metrics.jsonl"))
      << R"({"codec":"fp32","round":1,"test_accuracy":0.851,"total_bytes_up":1000000})" << "\n"
      << R"({"codec":"fp32","round":2,"test_accuracy":0.853,"total_bytes_up":2000000})" << "\n";
  // The output folder is made with its parents.
  Run run = RunCli("sim --compare " + dir.File("one") + " " + dir.File("two") + " --out " + dir.File("runs/today/plot"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const std::string svg = testing::ReadFileBytes(dir.File("runs/today/plot/plot.svg"));
  // Every point has a marker in both panels, titled with its values.
  const std::vector<std::string> points = SvgTexts(svg, "<circle class=\"point\"");
  REQUIRE(points.size() == 6);
  CHECK(svg.find("<title>ring fp32 x 1: 50.00%</title>") != std::string::npos);
  CHECK(svg.find("<title>star fp32 x 2: 85.30%</title>") != std::string::npos);
  CHECK(svg.find("<title>star fp32 MB 2: 85.30%</title>") != std::string::npos);
  // Round ticks are whole and distinct; accuracy ticks distinct.
  const std::vector<std::string> x = SvgTexts(svg, "<text class=\"xtick\"");
  CHECK(x == std::vector<std::string>{"0", "1", "2"});
  const std::vector<std::string> y = SvgTexts(svg, "<text class=\"ytick\"");  // both panels: twice
  CHECK(y == std::vector<std::string>{"50%", "60%", "70%", "80%", "90%", "50%", "60%", "70%", "80%", "90%"});
  CHECK(SvgTexts(svg, "<text class=\"mbtick\"") == std::vector<std::string>{"1", "10"});
  // The legend is below the panels (they end at y = 280).
  const std::size_t legend = svg.find("<g class=\"legend\"><line x1=");
  REQUIRE(legend != std::string::npos);
  const std::size_t y1 = svg.find("y1=\"", legend) + 4;
  CHECK(std::stod(svg.substr(y1, svg.find('"', y1) - y1)) > 280 + 20);
}

TEST_CASE("the plot of timed star rounds has a third panel of accuracy against wall time") {
  testing::TempDir dir;
  REQUIRE(::mkdir(dir.File("timed").c_str(), 0755) == 0);
  std::ofstream(dir.File("timed/metrics.jsonl"))
      << R"({"codec":"fp32","round":1,"test_accuracy":0.70,"total_bytes_up":1000000,"elapsed_seconds":20.5})" << "\n"
      << R"({"codec":"fp32","round":2,"test_accuracy":0.80,"total_bytes_up":2000000,"elapsed_seconds":39.0})" << "\n"
      << R"({"codec":"dqsg","round":1,"test_accuracy":0.72,"total_bytes_up":50000,"elapsed_seconds":3.0})" << "\n";
  Run run = RunCli("sim --compare " + dir.File("timed") + " --out " + dir.File("plot"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const std::string svg = testing::ReadFileBytes(dir.File("plot/plot.svg"));
  CHECK(Count(svg, "<polyline") == 6);  // two codecs, three panels
  CHECK(svg.find("<title>star fp32 s 39: 80.00%</title>") != std::string::npos);
  CHECK(svg.find("<title>star dqsg s 3: 72.00%</title>") != std::string::npos);
  CHECK(svg.find(">wall time (s)</text>") != std::string::npos);
  CHECK(SvgTexts(svg, "<text class=\"stick\"") == std::vector<std::string>{"0", "10", "20", "30"});
}

TEST_CASE("fedrt sim refuses a codec its topology cannot run and a compare folder without metrics") {
  testing::TempDir dir;
  Run ring = RunCli("sim --topology ring --peers 2 --out " + dir.File("x") + " --codec moniqua:bits=1,theta=0.5");
  CHECK(ring.exit_code != 0);
  CHECK(ring.output.find("ring codec 'moniqua:bits=1,theta=0.5' needs side information") != std::string::npos);
  Run compare = RunCli("sim --compare " + dir.File("absent") + " --out " + dir.File("y"));
  CHECK(compare.exit_code != 0);
  CHECK(compare.output.find("absent/metrics.jsonl: cannot open") != std::string::npos);
}

TEST_CASE("fedrt sim names the output folder it cannot create and why") {
  testing::TempDir dir;
  REQUIRE(::mkdir(dir.File("one").c_str(), 0755) == 0);
  std::ofstream(dir.File("one/metrics.jsonl"))
      << R"({"topology":"ring","codec":"fp32","epoch":1,"test_accuracy":0.5,"total_bytes_sent":2000000})" << "\n";
  std::ofstream(dir.File("file")) << "not a folder\n";
  Run run = RunCli("sim --compare " + dir.File("one") + " --out " + dir.File("file/plot"));
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK(run.output.find(dir.File("file") + ": cannot create: Not a directory") != std::string::npos);
}

TEST_CASE("fedrt sim runs byzantine devices against a robust rule, and DP stops at its epsilon budget") {
  testing::TempDir dir;
  const std::string data = TinyData(dir);
  const std::string common = "timeout 120 " + std::string(FEDRT_CLI_PATH) +
                             " sim --codec fp32 --model mlp:784-32-10 --data " + data;
  Run robust = testing::RunCommand(common + " --devices 3 --rounds 2 --byzantine 1:signflip:4 --aggregation median "
                                   "--out " + dir.File("robust"));
  INFO(robust.output);
  REQUIRE(robust.exit_code == 0);
  CHECK(robust.output.find("aggregation median, 1 byzantine devices (signflip:4)") != std::string::npos);
  const std::vector<nlohmann::json> rows = Lines(dir.File("robust") + "/metrics.jsonl");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0]["aggregation"] == "median");
  CHECK(rows[0]["byzantine"] == "1:signflip:4");
  CHECK(Slurp(dir.File("robust") + "/fp32/dev-0.log").find("byzantine: every update is signflip:4") !=
        std::string::npos);
  CHECK(Slurp(dir.File("robust") + "/fp32/dev-1.log").find("byzantine") == std::string::npos);

  // q = 1, z = 1, delta 1e-5: epsilon 4.75, 7.09, 9.09 after 1, 2, 3 rounds.
  Run dp = testing::RunCommand(common + " --devices 2 --rounds 5 --dp-noise-multiplier 1 --dp-clip 1 "
                               "--dp-epsilon-budget 8 --out " + dir.File("dp"));
  INFO(dp.output);
  REQUIRE(dp.exit_code == 0);
  CHECK(dp.output.find("DP epsilon 7.09") != std::string::npos);
  CHECK(dp.output.find("DP budget: round 3 would spend epsilon 9.088 > budget 8") != std::string::npos);
  const std::vector<nlohmann::json> dp_rows = Lines(dir.File("dp") + "/metrics.jsonl");
  REQUIRE(dp_rows.size() == 2);
  CHECK(dp_rows[1]["dp_epsilon"].get<double>() == doctest::Approx(7.0879).epsilon(1e-3));

  // Every device byzantine with updates far above --max-update-norm (1e4 by
  // default): every round applies nothing, and the run stops after
  // --max-failed-rounds of them instead of running them again forever.
  Run refused = testing::RunCommand(common + " --devices 2 --rounds 3 --byzantine 2:scaled:1e9 --deadline-ms 1000 "
                                    "--max-failed-rounds 2 --out " + dir.File("refused"));
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK(refused.output.find("fedrt sim: fp32: failed_precondition: training stopped at round 1: 2 rounds in a row "
                            "applied nothing (max failed rounds 2); the last: every update was rejected (") !=
        std::string::npos);
  CHECK(Lines(dir.File("refused") + "/metrics.jsonl").empty());

  // The ring sums: no rule or clip applies there.
  for (const std::string flags : {"--byzantine 1:signflip", "--aggregation median", "--clip-update-norm 1"}) {
    Run ring = testing::RunCommand(common + " --topology ring --peers 2 " + flags + " --out " + dir.File("ring"));
    INFO(flags, ": ", ring.output);
    CHECK(ring.exit_code == 2);
    CHECK(ring.output.find("apply to --topology star and gossip: the ring all-reduce sums") != std::string::npos);
  }
  // Gossip: a byzantine peer, the median over each neighbourhood, and local DP.
  Run gossip = testing::RunCommand(common + " --topology gossip --peers 4 --byzantine 1:signflip:3 --aggregation median "
                                   "--dp-noise-multiplier 2 --dp-clip 10 --out " + dir.File("gossip"));
  INFO(gossip.output);
  REQUIRE(gossip.exit_code == 0);
  const std::vector<nlohmann::json> gossip_rows = Lines(dir.File("gossip") + "/metrics.jsonl");
  REQUIRE(gossip_rows.size() == 1);
  CHECK(gossip_rows[0]["aggregation"] == "median");
  CHECK(gossip_rows[0]["byzantine"] == "1:signflip:3");
  CHECK(gossip_rows[0]["test_accuracy_honest"].get<double>() >= 0);
  CHECK(gossip_rows[0]["dp_epsilon"].get<double>() > 0);
  const std::string rank0 = Slurp(dir.File("gossip") + "/gossip-fp32/rank-0.log");
  CHECK(rank0.find("byzantine: every model sent is signflip:3") != std::string::npos);
  CHECK(rank0.find("aggregation median, local DP z=2 C=10") != std::string::npos);
  CHECK(Slurp(dir.File("gossip") + "/gossip-fp32/rank-1.log").find("byzantine") == std::string::npos);
  for (const std::string flags : {"--reduce dense --aggregation median", "--reduce iwp --clip-update-norm 1",
                                  "--reduce local --dp-noise-multiplier 1"}) {
    Run peer = testing::RunCommand(std::string(FEDRT_CLI_PATH) + " peer --peers x.json --keys k.txt --rank 0 " + flags);
    INFO(flags, ": ", peer.output);
    CHECK(peer.exit_code == 2);
    CHECK(peer.output.find(" only; this run is --reduce ") != std::string::npos);
  }
  Run krum = testing::RunCommand(common + " --topology gossip --peers 4 --aggregation krum:1 --out " + dir.File("krum"));
  CHECK(krum.exit_code == 1);
  // Every peer refuses krum at its first step; whichever exit the sim sees first is named.
  CHECK(krum.output.find(" exited with status 1") != std::string::npos);
  // The first peer to refuse ends the run, and the sim stops the others, so a
  // peer may be stopped before its own first step (seen under load): the
  // refusal is in at least one peer's log, not necessarily rank 0's.
  bool krum_refused = false;
  for (int rank = 0; rank < 4; ++rank) {
    krum_refused = krum_refused || Slurp(dir.File("krum") + "/gossip-fp32/rank-" + std::to_string(rank) + ".log")
                                 .find("krum:1 needs 5 models per gossip step") != std::string::npos;
  }
  CHECK(krum_refused);
  Run bad = testing::RunCommand(common + " --devices 2 --byzantine 3:signflip --out " + dir.File("bad"));
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find("expected N:KIND with N from 1 to the device count (2)") != std::string::npos);
}

}  // namespace
}  // namespace fedrt
