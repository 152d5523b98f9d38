// `fedrt peer` as users run it: four processes on 127.0.0.1 train a tiny
// data set together; one is killed mid-run; the other three name it, re-form
// the ring and finish training. Native builds only (real processes).
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "temp_dir.h"

namespace fedrt {
namespace {

uint16_t FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // stdout and stderr
  std::string text;
};

Child Spawn(const std::vector<std::string>& args) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  c.out = fds[0];
  return c;
}

void Drain(Child& c) {
  char buf[4096];
  for (;;) {
    ssize_t n = read(c.out, buf, sizeof buf);
    if (n <= 0) return;
    c.text.append(buf, static_cast<std::size_t>(n));
  }
}

// A data directory, peers.json and a key file for n local peers.
struct LocalRing {
  std::string data, config, keys;
};

LocalRing MakeLocalRing(const testing::TempDir& dir, int n, const std::string& id_prefix, int step_timeout_ms) {
  LocalRing ring;
  ring.data = dir.path() + "/data";
  REQUIRE(mkdir(ring.data.c_str(), 0700) == 0);
  REQUIRE(std::system((std::string(FEDRT_IDX_FIXTURE_PATH) + " " + ring.data).c_str()) == 0);
  std::string peers, keys;
  for (int i = 0; i < n; ++i) {
    peers += std::string(i ? "," : "") + "{\"id\": \"" + id_prefix + std::to_string(i) +
             "\", \"host\": \"127.0.0.1\", \"port\": " + std::to_string(FreePort()) + "}";
    keys += id_prefix + std::to_string(i) + " 5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a" + std::to_string(10 + i) + "\n";
  }
  ring.config = dir.path() + "/peers.json";
  ring.keys = dir.path() + "/keys.txt";
  std::ofstream(ring.config) << "{\"peers\": [" << peers << "], \"step_timeout_ms\": " << step_timeout_ms << "}\n";
  std::ofstream(ring.keys) << keys;
  chmod(ring.keys.c_str(), 0600);
  return ring;
}

// `fedrt peer` for every rank of `files`, training mlp:784-16-10 with batch
// 8 and lr 0.05, plus `extra` flags.
std::vector<Child> SpawnPeers(const LocalRing& files, int n, const std::vector<std::string>& extra) {
  std::vector<Child> children;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args = {FEDRT_CLI_PATH, "peer", "--peers", files.config, "--keys", files.keys, "--rank",
                                     std::to_string(r), "--data", files.data, "--model", "mlp:784-16-10",
                                     "--batch", "8", "--lr", "0.05"};
    args.insert(args.end(), extra.begin(), extra.end());
    children.push_back(Spawn(args));
  }
  return children;
}

// Waits for the child until `deadline` (then kills it and fails); returns its
// wait status with all its output drained.
int Finish(Child& c, std::chrono::steady_clock::time_point deadline, int rank) {
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline && waitpid(c.pid, &status, WNOHANG) == 0) {
    Drain(c);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (waitpid(c.pid, &status, WNOHANG) == 0) {
    kill(c.pid, SIGKILL);
    waitpid(c.pid, &status, 0);
    FAIL("rank ", rank, " did not finish: ", c.text);
  }
  Drain(c);
  close(c.out);
  return status;
}

// Waits for every child of SpawnPeers until `seconds` from now and checks
// that each exited 0 and printed `line`.
void FinishAllOk(std::vector<Child>& children, int seconds, const std::string& line) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (std::size_t r = 0; r < children.size(); ++r) {
    const int status = Finish(children[r], deadline, static_cast<int>(r));
    INFO("rank ", r, ":\n", children[r].text);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(children[r].text.find(line) != std::string::npos);
  }
}

// The test accuracy of a peer's last epoch line ("test acc 93.75%").
std::string LastAccuracy(const std::string& text) {
  const std::size_t line = text.rfind("epoch 40/40");
  if (line == std::string::npos) return "";
  const std::size_t at = text.find("test acc ", line);
  return at == std::string::npos ? "" : text.substr(at, text.find('%', at) - at);
}

// The step a gossip peer resumed at after the re-formation ("resuming at
// step N"), or "" when it printed none.
std::string ResumedAt(const std::string& text) {
  const std::size_t at = text.find("resuming at step ");
  if (at == std::string::npos) return "";
  return text.substr(at, text.find('\n', at) - at);
}

// Four `fedrt peer --repair` processes; rank 2 gets SIGKILL after two
// epochs; the other three must name it, re-form with 3 and finish.
// `same_model`: ring modes, where the survivors end with one model.
// `same_step`: gossip, where the survivors agree on the step to resume at
// (some may have finished the failed step before the others failed it).
void KillOneOfFour(const std::vector<std::string>& mode, bool same_model, bool same_step = false) {
  testing::TempDir dir;
  const int n = 4;
  const LocalRing files = MakeLocalRing(dir, n, "b", 3000);
  const std::string& data = files.data;
  const std::string& config = files.config;
  const std::string& key_file = files.keys;

  std::vector<Child> children;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args = {FEDRT_CLI_PATH, "peer", "--peers", config, "--keys", key_file, "--rank",
                                     std::to_string(r), "--data", data, "--model", "mlp:784-32-10",
                                     "--epochs", "40", "--batch", "8", "--lr", "0.05", "--repair"};
    args.insert(args.end(), mode.begin(), mode.end());
    children.push_back(Spawn(args));
  }
  // Kill rank 2 once it has finished two epochs.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  bool killed = false;
  while (std::chrono::steady_clock::now() < deadline) {
    Drain(children[2]);
    if (children[2].text.find("epoch 2/40") != std::string::npos) {
      kill(children[2].pid, SIGKILL);
      killed = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(killed);
  std::vector<std::string> accuracies, resumed;
  for (int r = 0; r < n; ++r) {
    const int status = Finish(children[r], deadline, r);
    if (r == 2) continue;
    INFO("rank ", r, ":\n", children[r].text);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(children[r].text.find("peer rank 2") != std::string::npos);
    CHECK(children[r].text.find("ring re-formed with 3 peers") != std::string::npos);
    // One failure, one re-formation: a survivor that finished cleanly is
    // never taken for a failed one by a peer still taking its last step.
    const std::size_t first = children[r].text.find("re-forming without");
    CHECK(first != std::string::npos);
    CHECK(children[r].text.find("re-forming without", first + 1) == std::string::npos);
    CHECK(children[r].text.find("epoch 40/40") != std::string::npos);
    accuracies.push_back(LastAccuracy(children[r].text));
    resumed.push_back(ResumedAt(children[r].text));
  }
  if (same_step) {
    REQUIRE(resumed.size() == 3);
    CHECK(resumed[0] != "");
    CHECK(resumed[0] == resumed[1]);
    CHECK(resumed[1] == resumed[2]);
  }
  if (same_model) {
    // The survivors resumed at one step with one model: they end alike.
    REQUIRE(accuracies.size() == 3);
    CHECK(accuracies[0] == accuracies[1]);
    CHECK(accuracies[1] == accuracies[2]);
  }
}

TEST_CASE("fedrt peer survives a killed peer: the others name it, re-form with 3 and finish") {
  KillOneOfFour({"--reduce", "dense"}, true);
}

TEST_CASE("an IWP ring survives a killed peer and the survivors end with the same model") {
  KillOneOfFour({"--reduce", "iwp", "--density", "0.05"}, true);
}

TEST_CASE("gossip on a ring survives a killed peer") {
  KillOneOfFour({"--reduce", "gossip", "--codec", "moniqua:bits=2,theta=1"}, false, true);
}

TEST_CASE("gossip on a torus survives a killed peer and re-forms the graph over the other three") {
  KillOneOfFour({"--reduce", "gossip", "--graph", "torus"}, false, true);
}

TEST_CASE("fedrt peer gossip with a moniqua codec that names no theta derives theta from Moniqua's bound at 2 bits") {
  testing::TempDir dir;
  const int n = 3;
  const LocalRing files = MakeLocalRing(dir, n, "g", 5000);
  std::vector<Child> children =
      SpawnPeers(files, n, {"--epochs", "2", "--reduce", "gossip", "--codec", "moniqua:bits=2"});
  FinishAllOk(children, 60, "epoch 2/2");
  for (int r = 0; r < n; ++r) {
    INFO("rank ", r, ":\n", children[r].text);
    // A ring of 3 with weights 1/3 mixes in one step: lambda 0, t_mix ceil(ln 6) = 2.
    CHECK(children[r].text.find("gossip codec moniqua:bits=2, theta from Moniqua's bound") != std::string::npos);
    CHECK(children[r].text.find("t_mix 2,") != std::string::npos);
    CHECK(children[r].text.find("  theta ") != std::string::npos);
  }
}

// peers.json with `extra` (a JSON member) added to what MakeLocalRing wrote.
void AddToConfig(const LocalRing& files, const std::string& extra) {
  std::ifstream in(files.config);
  std::stringstream read;
  read << in.rdbuf();
  const std::string text = read.str();
  const std::size_t end = text.rfind('}');
  REQUIRE(end != std::string::npos);
  std::ofstream(files.config) << text.substr(0, end) << ", " << extra << "}\n";
}

TEST_CASE("fedrt peer takes busy_poll_us from the peer list: 0 trains as before, a value out of range is refused") {
  testing::TempDir dir;
  const int n = 2;
  const LocalRing files = MakeLocalRing(dir, n, "b", 5000);
  AddToConfig(files, "\"busy_poll_us\": 0");
  std::vector<Child> children = SpawnPeers(files, n, {"--epochs", "1"});
  FinishAllOk(children, 60, "epoch 1/1");

  testing::TempDir bad_dir;
  const LocalRing bad = MakeLocalRing(bad_dir, n, "b", 5000);
  AddToConfig(bad, "\"busy_poll_us\": 2000000");
  Child refused = Spawn({FEDRT_CLI_PATH, "peer", "--peers", bad.config, "--keys", bad.keys, "--rank", "0", "--data",
                         bad.data, "--model", "mlp:784-16-10", "--epochs", "1"});
  const int status = Finish(refused, std::chrono::steady_clock::now() + std::chrono::seconds(30), 0);
  INFO(refused.text);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK(refused.text.find("\"busy_poll_us\" must be an integer from 0 to 1000000") != std::string::npos);
}

}  // namespace
}  // namespace fedrt
