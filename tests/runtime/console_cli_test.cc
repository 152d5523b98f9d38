// The terminal side of the long-running commands (runtime/cli/console.h):
// timestamped log lines and --log-level, a progress line only on a terminal
// (train, peer, sim),
// and the process name after the OpenBLAS restart.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pty.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "child_process.h"
#include "run_cli.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

using testing::ChildProcess;
using testing::CliRun;
using testing::RunCli;

// A key file serve accepts (owner-only).
std::string KeyFile(const testing::TempDir& dir) {
  const std::string path = dir.File("keys.txt");
  std::ofstream(path) << "dev-0 00112233445566778899aabbccddeeff\n";
  ::chmod(path.c_str(), 0600);
  return path;
}

// A /proc file (they report size 0, so read to the end).
std::string ReadProcFile(const std::string& path) {
  std::string bytes;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return bytes;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) bytes.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  return bytes;
}

// Runs the tool with `args` on a pseudo-terminal: what it wrote there.
std::string RunOnTerminal(const std::vector<std::string>& args) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) return "forkpty failed";
  if (pid == 0) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(master, buffer, sizeof buffer);
    if (n <= 0) break;  // EIO once the child has closed the terminal
    out.append(buffer, static_cast<std::size_t>(n));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  return out;
}

// (Hand-written matchers: GCC 12's <regex> trips -Wmaybe-uninitialized in
// the sanitizer build.)
// Whether a line of `text` starts with a UTC stamp "YYYY-MM-DDTHH:MM:SS.mmmZ"
// directly followed by `rest`.
bool HasStampedLine(const std::string& text, const std::string& rest) {
  const std::string shape = "####-##-##T##:##:##.###Z";
  for (std::size_t at = text.find(rest); at != std::string::npos; at = text.find(rest, at + 1)) {
    if (at < shape.size()) continue;
    const std::size_t start = at - shape.size();
    if (start != 0 && text[start - 1] != '\n') continue;
    bool match = true;
    for (std::size_t i = 0; i < shape.size() && match; ++i) {
      const char c = text[start + i];
      match = shape[i] == '#' ? (c >= '0' && c <= '9') : c == shape[i];
    }
    if (match) return true;
  }
  return false;
}

// Whether `text` holds `head`, digits, "% ", digits and `tail` in a row.
bool HasProgressLine(const std::string& text, const std::string& head, const std::string& tail) {
  const auto digits = [&](std::size_t at) {
    std::size_t end = at;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    return end;
  };
  for (std::size_t at = text.find(head); at != std::string::npos; at = text.find(head, at + 1)) {
    std::size_t p = at + head.size();
    std::size_t q = digits(p);
    if (q == p || text.compare(q, 2, "% ") != 0) continue;
    p = q + 2;
    q = digits(p);
    if (q != p && text.compare(q, tail.size(), tail) == 0) return true;
  }
  return false;
}

// Whether `text` holds `head`, digits and "% " + `tail` in a row (a line
// whose detail does not start with a count).
bool HasPercentLine(const std::string& text, const std::string& head, const std::string& tail) {
  for (std::size_t at = text.find(head); at != std::string::npos; at = text.find(head, at + 1)) {
    std::size_t q = at + head.size();
    while (q < text.size() && text[q] >= '0' && text[q] <= '9') ++q;
    if (q != at + head.size() && text.compare(q, 2 + tail.size(), "% " + tail) == 0) return true;
  }
  return false;
}

// A port on 127.0.0.1 nobody listens on (bound, read, released).
uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST_CASE("long-running commands stamp their log lines with the UTC time and show the level --log-level chooses") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string serve = "serve --rounds 0 --data '' --key-file " + KeyFile(dir);
  const CliRun info = RunCli(serve);
  INFO(info.output);
  CHECK(info.exit_code == 0);
  CHECK(HasStampedLine(info.output, " [fedrt info] aggregator: listening on"));
  const CliRun quiet = RunCli(serve + " --log-level warn");
  CHECK(quiet.exit_code == 0);
  CHECK(quiet.output.find("[fedrt info]") == std::string::npos);
  CHECK(quiet.output.find("listening on port") != std::string::npos);  // results still go to stdout
  for (const char* command : {"serve", "device", "peer", "sim", "train"}) {
    const CliRun wrong = RunCli(std::string(command) + " --log-level loud");
    INFO(command, wrong.output);
    CHECK(wrong.exit_code == 2);
    CHECK(wrong.output.find("loud") != std::string::npos);
  }
  // A short command has no --log-level.
  CHECK(RunCli("info --log-level debug").exit_code == 2);
}

TEST_CASE("train draws a progress line within each epoch on a terminal and nothing extra into a pipe") {
  const std::vector<std::string> args = {FEDRT_CLI_PATH, "train", "--data", FEDRT_TINY_IDX_DIR, "--model",
                                         "mlp:784-16-10", "--epochs", "2", "--batch", "4"};
  const std::string terminal = RunOnTerminal(args);
  INFO(terminal);
  CHECK(HasProgressLine(terminal, "\r\x1b[Kepoch 1/2 ", "/64 steps"));
  CHECK(terminal.find("\r\x1b[Kepoch 2/2  loss") != std::string::npos);  // cleared before the epoch's line
  std::string command;
  for (std::size_t i = 1; i < args.size(); ++i) command += args[i] + " ";
  const CliRun piped = RunCli(command);
  CHECK(piped.exit_code == 0);
  CHECK(piped.output.find('\r') == std::string::npos);
  CHECK(piped.output.find("steps") == std::string::npos);
  CHECK(piped.output.find("epoch 2/2  loss") != std::string::npos);
}

TEST_CASE("peer draws the steps of its epoch on a terminal and nothing extra into a pipe") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string keys = dir.File("peer-keys.txt");
  std::ofstream(keys) << "peer-0 00112233445566778899aabbccddeeff\npeer-1 ffeeddccbbaa99887766554433221100\n";
  ::chmod(keys.c_str(), 0600);
  const std::string peers = dir.File("peers.json");
  std::ofstream(peers) << "{\"peers\": [{\"id\": \"peer-0\", \"host\": \"127.0.0.1\", \"port\": " << FreePort()
                       << "}, {\"id\": \"peer-1\", \"host\": \"127.0.0.1\", \"port\": " << FreePort() << "}]}\n";
  // 256 examples on 2 peers, batch 4: 32 steps an epoch.
  const auto args = [&](const char* rank) {
    return std::vector<std::string>{FEDRT_CLI_PATH, "peer", "--peers", peers, "--keys", keys, "--rank", rank,
                                    "--data", FEDRT_TINY_IDX_DIR, "--model", "mlp:784-16-10", "--epochs", "2",
                                    "--batch", "4"};
  };
  ChildProcess piped(args("1"));
  const std::string terminal = RunOnTerminal(args("0"));
  INFO(terminal);
  CHECK(HasProgressLine(terminal, "\r\x1b[Kpeer rank 0 epoch 1/2 ", "/32 steps"));
  CHECK(terminal.find("\r\x1b[Kpeer rank 0 epoch 2/2  loss") != std::string::npos);  // cleared before the epoch's line
  CHECK(piped.Wait() == 0);
  CHECK(piped.output().find('\r') == std::string::npos);
  CHECK(piped.output().find("/32 steps") == std::string::npos);  // "32 steps/epoch" is the start line
  CHECK(piped.output().find("peer rank 1 epoch 2/2  loss") != std::string::npos);
}

TEST_CASE("sim draws the run's progress on a terminal and nothing extra into a pipe") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::vector<std::string> star = {FEDRT_CLI_PATH, "sim", "--data", FEDRT_TINY_IDX_DIR, "--model",
                                         "mlp:784-16-10", "--devices", "2", "--rounds", "2", "--batch", "16",
                                         "--codec", "fp32", "--out", dir.File("star")};
  std::string terminal = RunOnTerminal(star);
  INFO(terminal);
  CHECK(HasPercentLine(terminal, "\r\x1b[K[fp32] ", "round 1/2, "));
  CHECK(terminal.find("\r\x1b[K[fp32] round 2/2 ") != std::string::npos);  // cleared before the round's line
  const std::vector<std::string> ring = {FEDRT_CLI_PATH, "sim", "--topology", "ring", "--peers", "2", "--data",
                                         FEDRT_TINY_IDX_DIR, "--model", "mlp:784-16-10", "--epochs", "2", "--batch",
                                         "16", "--codec", "fp32", "--out", dir.File("ring")};
  terminal = RunOnTerminal(ring);
  CHECK(HasPercentLine(terminal, "\r\x1b[K[ring fp32] ", "epoch "));
  CHECK(terminal.find("\r\x1b[K[ring fp32] epoch 1.00/2 ") != std::string::npos);  // cleared before the line
  for (const std::vector<std::string>* args : {&star, &ring}) {
    std::string command;
    for (std::size_t i = 1; i < args->size(); ++i) command += (*args)[i] + " ";
    const CliRun plain = RunCli(command);
    INFO(plain.output);
    CHECK(plain.exit_code == 0);
    CHECK(plain.output.find('\r') == std::string::npos);
  }
}

TEST_CASE("fedrt keeps its process name after it restarts itself for better OpenBLAS kernels") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  // The restart's test hook: restart as if OpenBLAS had chosen slow kernels.
  ::setenv("FEDRT_OPENBLAS_RESTART", "force", 1);
  ::unsetenv("OPENBLAS_CORETYPE");
  ChildProcess serve({FEDRT_CLI_PATH, "serve", "--data", "", "--rounds", "1", "--key-file", KeyFile(dir)});
  ::unsetenv("FEDRT_OPENBLAS_RESTART");
  REQUIRE(serve.WaitFor("listening on port"));
  const std::string proc = "/proc/" + std::to_string(serve.pid());
  // The environment of the process's last exec: the restart set the variable.
  const std::string environ = ReadProcFile(proc + "/environ");
  CHECK(environ.find(std::string("OPENBLAS_CORETYPE=Haswell") + '\0') != std::string::npos);
  CHECK(ReadProcFile(proc + "/comm") == "fedrt\n");
  serve.Signal(SIGTERM);
  CHECK(serve.Wait() == 128 + SIGTERM);
}

}  // namespace
}  // namespace fedrt
