// examples/02_c_device (the C API's device client over POSIX sockets)
// against `fedrt serve`, as real processes on 127.0.0.1:
//   - four C devices train 5 rounds of NDQSG on IID shares of Fashion-MNIST,
//     and the same run with four `fedrt device` processes ends at the same
//     accuracy (both run the same engine on the same shares, in the same
//     example order: within 1 point is asserted, both are printed). When
//     FEDRT_CROSS_C_DEVICE names a cross-built 02_c_device behind its
//     emulator ('|'-separated words), the fourth C device is that one: a
//     cross build registers this test so (tests/capi/CMakeLists.txt);
//   - the C device keeps its error-feedback residual in the state file
//     `fedrt device` reads, and resumes from it;
//   - it refuses the TLS flags and bad arguments.
// Every wait is for a line a process prints or its exit, with generous limits.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "star/device_state.h"
#include "star_processes.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

using testing::ChildProcess;

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";
constexpr const char* kModel = "mlp:784-64-10";
constexpr int kDevices = 4;

// A private folder with every device's key file and the aggregator's.
struct Keys {
  testing::TempDir dir;
  Keys() {
    std::string all;
    for (int i = 0; i < kDevices; ++i) {
      const std::string line = Id(i) + " " + std::string(2, static_cast<char>('a' + i)) + "0123456789abcdef0123456789abcd\n";
      all += line;
      Write(KeyFile(i), line);
    }
    Write(dir.File("keys.txt"), all);
  }
  static std::string Id(int i) { return "dev-" + std::to_string(i); }
  std::string KeyFile(int i) const { return dir.File(Id(i) + ".key"); }
  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
    ::chmod(path.c_str(), 0600);
  }
};

bool HaveFashionMnist() {
  struct stat info;
  return ::stat((std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz").c_str(), &info) == 0;
}

// The test accuracy in `serve`'s line for round `rounds` of `rounds`, in
// percent; -1 when there is none.
double FinalAccuracy(const ChildProcess& serve, int rounds) {
  const std::string mark = "round " + std::to_string(rounds) + "/" + std::to_string(rounds) + " ";
  const std::size_t line = serve.output().find(mark);
  if (line == std::string::npos) return -1;
  const std::size_t at = serve.output().find("test acc ", line);
  return at == std::string::npos ? -1 : std::atof(serve.output().c_str() + at + 9);
}

struct StarRun {
  double accuracy = -1;              // the final round's, in percent
  std::vector<std::string> devices;  // what each device printed
};

// `fedrt serve` on the keys, then one device process per command, until all
// have ended.
StarRun RunStar(const Keys& keys, const std::vector<std::string>& serve_flags,
                const std::vector<std::vector<std::string>>& devices, int rounds) {
  std::vector<std::string> serve_command = {FEDRT_CLI_PATH, "serve", "--key-file", keys.dir.File("keys.txt")};
  serve_command.insert(serve_command.end(), serve_flags.begin(), serve_flags.end());
  ChildProcess serve(serve_command);
  const uint16_t port = testing::ListeningPort(serve);
  REQUIRE_MESSAGE(port != 0, serve.output());
  std::vector<std::unique_ptr<ChildProcess>> running;
  for (std::vector<std::string> command : devices) {
    for (std::string& word : command) {
      if (word == "PORT") word = "127.0.0.1:" + std::to_string(port);
    }
    running.push_back(std::make_unique<ChildProcess>(command));
  }
  CHECK_MESSAGE(serve.Wait(600) == 0, serve.output());
  for (auto& device : running) {
    CHECK_MESSAGE(device->Wait(600) == 0, device->output());
  }
  for (auto& device : running) {
    INFO(device->output());
    CHECK(device->Count("the aggregator ended the training") >= 1);
  }
  MESSAGE(serve.output());
  StarRun run;
  run.accuracy = FinalAccuracy(serve, rounds);
  for (auto& device : running) run.devices.push_back(device->output());
  return run;
}

// The device flags both programs take.
std::vector<std::string> DeviceFlags(const Keys& keys, int i, const std::string& data) {
  return {"--server", "PORT", "--key-file", keys.KeyFile(i), "--data", data, "--model", kModel,
          "--devices", std::to_string(kDevices), "--batch", "32", "--give-up-ms", "120000"};
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_CASE("four 02_c_device processes train to the accuracy of four fedrt device processes") {
  if (!HaveFashionMnist()) {
    MESSAGE("skipped: no Fashion-MNIST in ", kFashionMnist, " (.ci/install-deps installs it)");
    return;
  }
  Keys keys;
  // Small enough for two cores and an emulated device: a 784-64-10 MLP, 20
  // local steps of 32 examples per round.
  const int rounds = 5;
  const std::vector<std::string> serve_flags = {"--data", kFashionMnist, "--model", kModel, "--codec", "ndqsg",
                                                "--rounds", std::to_string(rounds), "--min-devices",
                                                std::to_string(kDevices), "--steps", "20", "--seed", "3"};
  const char* cross = std::getenv("FEDRT_CROSS_C_DEVICE");
  const std::string cross_command = cross != nullptr ? cross : "";

  std::vector<std::vector<std::string>> cli_devices, c_devices;
  for (int i = 0; i < kDevices; ++i) {
    cli_devices.push_back(Concat({FEDRT_CLI_PATH, "device"}, DeviceFlags(keys, i, kFashionMnist)));
    if (i == kDevices - 1 && !cross_command.empty()) {
      c_devices.push_back(testing::Emulated(cross_command, DeviceFlags(keys, i, kFashionMnist)));
    } else {
      c_devices.push_back(Concat({FEDRT_C_DEVICE_PATH}, DeviceFlags(keys, i, kFashionMnist)));
    }
  }
  if (!cross_command.empty()) MESSAGE("device 3 runs as: ", cross_command);
  const double with_cli = RunStar(keys, serve_flags, cli_devices, rounds).accuracy;
  const StarRun c_run = RunStar(keys, serve_flags, c_devices, rounds);
  const double with_c = c_run.accuracy;
  REQUIRE(c_run.devices.size() == kDevices);
  // The C device's first line names the kernels it runs (neon under qemu-aarch64).
  const std::string& last = c_run.devices.back();
  MESSAGE("device 3: ", last.substr(0, last.find('\n')));
  CHECK(last.find("02_c_device dev-3: 15000 examples (iid, share 3 of 4), model mlp:784-64-10, kernels ") !=
        std::string::npos);
  MESSAGE("test accuracy after ", rounds, " rounds: fedrt device ", with_cli, "%, 02_c_device ", with_c, "%");
  REQUIRE(with_cli > 0);
  REQUIRE(with_c > 0);
  CHECK(with_cli > 50.0);  // it learned something: 10 classes start at 10%
  CHECK(std::fabs(with_c - with_cli) <= 1.0);
}

TEST_CASE("02_c_device keeps its residual in the state file fedrt device reads and resumes from it") {
  Keys keys;
  const std::string state = keys.dir.File("dev-0.state");
  const std::vector<std::string> serve_flags = {"--data", FEDRT_TINY_IDX_DIR, "--model", kModel, "--codec",
                                                "dqsg:ef=on", "--rounds", "2", "--steps", "4"};
  const std::vector<std::string> device =
      Concat({FEDRT_C_DEVICE_PATH}, Concat(DeviceFlags(keys, 0, FEDRT_TINY_IDX_DIR), {"--state-file", state}));
  const std::size_t d = 784 * 64 + 64 + 64 * 10 + 10;

  CHECK(RunStar(keys, serve_flags, {device}, 2).accuracy > 0);
  Result<std::vector<float>> saved = star::LoadResidual(state, d);
  REQUIRE_MESSAGE(saved.ok(), saved.status().ToString());
  float largest = 0;
  for (float v : *saved) largest = std::max(largest, std::fabs(v));
  CHECK(largest > 0);  // DQSG leaves an error to carry forward

  // A second run starts from it, and says so.
  std::vector<std::string> serve_command = {FEDRT_CLI_PATH, "serve", "--key-file", keys.dir.File("keys.txt")};
  serve_command.insert(serve_command.end(), serve_flags.begin(), serve_flags.end());
  ChildProcess serve(serve_command);
  const uint16_t port = testing::ListeningPort(serve);
  REQUIRE(port != 0);
  std::vector<std::string> again = device;
  again[2] = "127.0.0.1:" + std::to_string(port);
  ChildProcess resumed(again);
  CHECK(resumed.Wait(300) == 0);
  CHECK(serve.Wait(300) == 0);
  CHECK_MESSAGE(resumed.Count("restored the error-feedback residual from " + state) == 1, resumed.output());

  // A damaged state file stops it before it connects, naming the file.
  std::ofstream(state, std::ios::trunc) << "not a state file";
  again[2] = "127.0.0.1:1";
  ChildProcess refused(again);
  CHECK(refused.Wait() == 1);
  CHECK_MESSAGE(refused.Count("--state-file corrupt: " + state) == 1, refused.output());
  CHECK(refused.Count("connected") == 0);
}

TEST_CASE("02_c_device refuses the TLS flags and bad arguments") {
  Keys keys;
  struct Case {
    std::vector<std::string> arguments;
    int exit_code;
    std::string message;
  };
  const std::string key = keys.KeyFile(0);
  const Case cases[] = {
      {{"--server", "127.0.0.1:1", "--key-file", key, "--tls-ca", "ca.pem"}, 2, "--tls-ca does not apply"},
      {{"--server", "127.0.0.1:1", "--key-file", key, "--tls-cert=c.pem"}, 2, "--tls-cert does not apply"},
      {{"--key-file", key}, 2, "--server and --key-file are required"},
      {{"--server", "localhost", "--key-file", key}, 2, "--server must be HOST:PORT"},
      {{"--server", "127.0.0.1:70000", "--key-file", key}, 2, "--server must be HOST:PORT"},
      {{"--server", "127.0.0.1:1", "--key-file", key, "--batch", "0"}, 2, "--batch 0 is not a number in 1..65536"},
      {{"--server", "127.0.0.1:1", "--key-file", key, "--epochs", "3"}, 2, "unknown flag '--epochs'"},
      {{"--server", "127.0.0.1:1", "--key-file", key, "--devices"}, 2, "--devices needs a value"},
      {{"--server", "127.0.0.1:1", "--key-file", key + ".absent"}, 1, "not_found"},
      {{"--server", "127.0.0.1:1", "--key-file", key, "--data", FEDRT_TINY_IDX_DIR, "--model", "mlp:100-10"}, 1,
       "model 'mlp:100-10' takes 100 features, the data has 784"},
      {{"--server", "127.0.0.1:1", "--key-file", key, "--data", FEDRT_TINY_IDX_DIR, "--model", kModel,
        "--give-up-ms", "0"},
       1, "the aggregator at 127.0.0.1:1 stayed unreachable"},
  };
  for (const Case& c : cases) {
    ChildProcess run(Concat({FEDRT_C_DEVICE_PATH}, c.arguments));
    const int exit_code = run.Wait();
    INFO(run.output());
    CHECK(exit_code == c.exit_code);
    CHECK(run.Count(c.message) == 1);
  }
}

}  // namespace
}  // namespace fedrt
