// Data and models as users bring them, through the real `fedrt` binary: the
// tiny IDX fixture turned by NumPy into an .npz, a directory of .npy files,
// CSV files and IDX files with dotted names, unzipped; every form trains (and
// the devices of `fedrt sim` read it); a model whose output layer does not
// match the class count is refused naming both numbers; `fedrt sim` saves
// each codec's final model for NumPy and starts from one, in the star and
// in the peer topologies; a sim whose devices
// cannot start stops within 30 s with their reason. Runs where the build
// found Debian's python3-numpy.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <string>

#include "run_cli.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

using testing::CliRun;
using testing::RunCli;
using testing::RunCommand;

// A test accuracy of 90% or more after `after` ("epoch 2/2 ", "round 1/1 ").
bool LearnedWell(const std::string& output, const std::string& after) {
  const std::size_t at = output.find(after);
  if (at == std::string::npos) return false;
  const std::size_t acc = output.find("test acc ", at);
  return acc != std::string::npos && (output.compare(acc + 9, 1, "9") == 0 || output.compare(acc + 9, 3, "100") == 0);
}

std::string Python(const std::string& dir, const std::string& code) { return testing::RunPython(dir, code); }

// The fixture's four IDX files as NumPy arrays xt, yt, xe, ye.
const char kReadIdx[] =
    "def idx(p):\n"
    "    b = gzip.open(p).read(); n = b[3]\n"
    "    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], 'big') for i in range(n)]\n"
    "    return np.frombuffer(b[4 + 4 * n:], dtype=np.uint8).reshape(dims)\n"
    "d = '" FEDRT_TINY_IDX_DIR "/'\n"
    "xt = idx(d + 'train-images-idx3-ubyte.gz'); yt = idx(d + 'train-labels-idx1-ubyte.gz')\n"
    "xe = idx(d + 't10k-images-idx3-ubyte.gz'); ye = idx(d + 't10k-labels-idx1-ubyte.gz')\n";

const char kWriteDataSets[] =
    "np.savez_compressed('set.npz', x_train=xt, y_train=yt.astype(np.int64), x_test=xe, y_test=ye.astype(np.int64))\n"
    "os.mkdir('npy')\n"
    "np.save('npy/x_train.npy', (xt / 255).astype(np.float32).reshape(len(xt), -1))\n"
    "np.save('npy/y_train.npy', yt.astype(np.int32))\n"
    "np.save('npy/x_test.npy', (xe / 255).astype(np.float32).reshape(len(xe), -1))\n"
    "np.save('npy/y_test.npy', ye.astype(np.int32))\n"
    "os.mkdir('csv')\n"
    "for name, x, y in (('train', xt, yt), ('test', xe, ye)):\n"
    "    with open('csv/' + name + '.csv', 'w') as f:\n"
    "        f.write('label,' + ','.join('p%d' % i for i in range(784)) + '\\\\n')\n"
    "        for xi, yi in zip(x.reshape(len(x), -1), y):\n"
    "            f.write('%d,' % yi + ','.join('%.4f' % (v / 255) for v in xi) + '\\\\n')\n"
    "os.mkdir('dotted')\n"
    "for n in ('train-images', 'train-labels', 't10k-images', 't10k-labels'):\n"
    "    a = {'train-images': xt, 'train-labels': yt, 't10k-images': xe, 't10k-labels': ye}[n]\n"
    "    head = bytes([0, 0, 8, a.ndim]) + b''.join(int(s).to_bytes(4, 'big') for s in a.shape)\n"
    "    open('dotted/' + n + '.idx%d-ubyte' % a.ndim, 'wb').write(head + a.tobytes())\n";

TEST_CASE("fedrt train reads .npz, .npy, CSV and unzipped dotted IDX data sets and checks the class count") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  Python(dir.path(), std::string(kReadIdx) + kWriteDataSets);
  for (const char* data : {"set.npz", "npy", "csv", "dotted"}) {
    INFO(data);
    const CliRun run = RunCli("train --data " + dir.File(data) + " --model mlp:784-32-10 --epochs 2 --batch 16");
    INFO(run.output);
    CHECK(run.exit_code == 0);
    CHECK(run.output.find("256 training / 64 test examples") != std::string::npos);
    CHECK(LearnedWell(run.output, "epoch 2/2 "));  // the bars are easy
  }
  const CliRun head = RunCli("train --data " + dir.File("npy") + " --model mlp:784-50-100 --epochs 1");
  CHECK(head.exit_code == 1);
  CHECK(head.output.find("the data has 10 classes, model 'mlp:784-50-100' predicts 100") != std::string::npos);

  // Bad data files name the file and what is wrong.
  Python(dir.path(),
         "np.save('npy/y_test.npy', np.full(64, 300))\n"
         "open('notes.txt', 'w').write('hello')\n");
  CliRun bad = RunCli("train --data " + dir.File("npy") + " --epochs 1");
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find("y_test.npy: label 300 of example 0 is outside 0..255") != std::string::npos);
  bad = RunCli("train --data " + dir.File("notes.txt") + " --epochs 1");
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find("notes.txt: a data set file must be an .npz") != std::string::npos);
}

TEST_CASE("fedrt sim saves each codec's final model for NumPy and starts from one") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  Python(dir.path(), std::string(kReadIdx) + kWriteDataSets);
  const std::string common = " --devices 2 --model mlp:784-16-10 --batch 16 --codec fp32 --codec dqsg:s=3";
  CliRun run = RunCli("sim --data " + dir.File("csv") + " --rounds 2 --out " + dir.File("a") + common +
                      " --save-model " + dir.File("m.npz"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("[fp32] saved the final model to " + dir.File("m-fp32.npz")) != std::string::npos);
  CHECK(run.output.find("[dqsg:s=3] saved the final model to " + dir.File("m-dqsg_s_3.npz")) != std::string::npos);
  CHECK(Python(dir.path(),
               "for f in ('m-fp32.npz', 'm-dqsg_s_3.npz'):\n"
               "    m = np.load(f)\n"
               "    print(m['dense1.weight'].shape, m['dense2.bias'].dtype, m['fedrt_model_spec'].item().decode())\n") ==
        "(16, 784) float32 mlp:784-16-10\n(16, 784) float32 mlp:784-16-10\n");

  // The saved model is where the next run starts (its spec too): after it
  // the first round's accuracy is already high.
  run = RunCli("sim --data " + dir.File("set.npz") + " --rounds 1 --out " + dir.File("b") +
               " --devices 2 --batch 16 --codec fp32 --init-model " + dir.File("m-fp32.npz"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("starting from " + dir.File("m-fp32.npz") + " (.npz, model mlp:784-16-10)") !=
        std::string::npos);
  CHECK(LearnedWell(run.output, "round 1/1  updates 2/2 "));

  // A model file for another model (star or peers) and --init-model on a device are errors.
  run = RunCli("sim --data " + dir.File("csv") + " --out " + dir.File("c") + " --model mlp:784-32-10 --init-model " +
               dir.File("m-fp32.npz"));
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("holds model 'mlp:784-16-10', --model says 'mlp:784-32-10'") != std::string::npos);
  run = RunCli("sim --topology ring --data " + dir.File("csv") + " --out " + dir.File("d") +
               " --model mlp:784-32-10 --init-model " + dir.File("m-fp32.npz"));
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("holds model 'mlp:784-16-10', --model says 'mlp:784-32-10'") != std::string::npos);
  CHECK(run.output.find("peer processes started") == std::string::npos);  // refused before any peer started
  run = RunCli("serve --key-file " + dir.File("a/keys.txt") + " --model mlp:784-32-10 --init-model " +
               dir.File("m-fp32.npz"));
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("fedrt serve: invalid_argument: " + dir.File("m-fp32.npz") + " holds model 'mlp:784-16-10'") !=
        std::string::npos);
  run = RunCli("device --server 127.0.0.1:1 --key-file " + dir.File("a/keys/dev-0.key") + " --init-model " +
               dir.File("m-fp32.npz"));
  CHECK(run.exit_code == 2);
  CHECK(run.output.find("--init-model does not apply to a device: it receives the global model from the aggregator") !=
        std::string::npos);
}

TEST_CASE("fedrt sim --topology ring and gossip save rank 0's final model for NumPy and start from one") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  Python(dir.path(), std::string(kReadIdx) + kWriteDataSets);
  const std::string common = " --peers 2 --epochs 2 --batch 16 --codec fp32 --data " + dir.File("set.npz");
  CliRun run = RunCli("sim --topology ring --model mlp:784-16-10 --out " + dir.File("r") + common +
                      " --save-model " + dir.File("ring.npz"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("[ring fp32] saved rank 0's final model to " + dir.File("ring-fp32.npz")) != std::string::npos);
  CHECK(Python(dir.path(),
               "m = np.load('ring-fp32.npz')\n"
               "print(m['dense1.weight'].shape, m['dense2.bias'].dtype, m['fedrt_model_spec'].item().decode())\n") ==
        "(16, 784) float32 mlp:784-16-10\n");

  // NumPy zeroes every tensor and names no model (so --model says which).
  // From all zeros only the output bias gets a gradient: if the peers start
  // from the file, the weights they end with are still exactly zero.
  Python(dir.path(),
         "m = np.load('ring-fp32.npz')\n"
         "np.savez('zero.npz', **{k: np.zeros_like(m[k]) for k in m.files if k != 'fedrt_model_spec'})\n");
  run = RunCli("sim --topology gossip --model mlp:784-16-10 --out " + dir.File("g") + common + " --init-model " +
               dir.File("zero.npz") + " --save-model " + dir.File("gossip"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("starting from " + dir.File("zero.npz") + " (.npz, model mlp:784-16-10)") != std::string::npos);
  CHECK(run.output.find("[gossip fp32] saved rank 0's final model to " + dir.File("gossip-fp32.npz")) !=
        std::string::npos);
  CHECK(Python(dir.path(),
               "m = np.load('gossip-fp32.npz')\n"
               "print(all(not m[k].any() for k in ('dense1.weight', 'dense1.bias', 'dense2.weight')),"
               " bool(m['dense2.bias'].any()))\n") == "True True\n");
}

TEST_CASE("fedrt sim with links compresses every codec's downlink but fp32's, the first model too") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const CliRun run = RunCli("sim --data " FEDRT_TINY_IDX_DIR " --devices 2 --rounds 2 --model mlp:784-16-10"
                            " --codec fp32 --codec dqsg:s=3 --link 1000mbit --shaper user --out " + dir.File("s"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("codecs: fp32 dqsg:s=3 (downlink dqsg:s=4, the default on links),") != std::string::npos);
  CHECK(run.output.find("[fp32] round 2/2") != std::string::npos);
  CHECK(run.output.find("[dqsg:s=3 (down dqsg:s=4)] round 2/2") != std::string::npos);
  // No device of the compressed run got the fp32 model, not even in round 1.
  std::ifstream metrics(dir.File("s/metrics.jsonl"));
  int compressed_rounds = 0;
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"downlink_codec\":\"dqsg:s=4\"") == std::string::npos) continue;
    compressed_rounds++;
    CHECK(line.find("\"full_models_down\":0,") != std::string::npos);
  }
  CHECK(compressed_rounds == 2);
}

TEST_CASE("fedrt sim with links keeps the downlink the user gives: --downlink-codec fp32 sends full models") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const CliRun run = RunCli("sim --data " FEDRT_TINY_IDX_DIR " --devices 2 --rounds 2 --model mlp:784-16-10"
                            " --codec dqsg:s=3 --downlink-codec fp32 --link 1000mbit --shaper user --out " +
                            dir.File("s"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("codecs: dqsg:s=3 (downlink fp32),") != std::string::npos);
  CHECK(run.output.find("the default on links") == std::string::npos);
  CHECK(run.output.find("dqsg:s=4") == std::string::npos);
  // Every round sends both devices the fp32 model: 4 bytes a parameter.
  constexpr int kParameters = 784 * 16 + 16 + 16 * 10 + 10;
  std::ifstream metrics(dir.File("s/metrics.jsonl"));
  int rounds = 0;
  for (std::string line; std::getline(metrics, line);) {
    INFO(line);
    ++rounds;
    CHECK(line.find("\"bytes_down\":" + std::to_string(2 * 4 * kParameters) + ",") != std::string::npos);
  }
  CHECK(rounds == 2);
}

// The number after `"key":` in a metrics line (-1 when absent).
double MetricsNumber(const std::string& line, const std::string& key) {
  const std::size_t at = line.find("\"" + key + "\":");
  return at == std::string::npos ? -1 : std::stod(line.substr(at + key.size() + 3));
}

TEST_CASE("fedrt sim with a link delay says which shaper did what and every round's download waits for it") {
  // As root without sch_netem (this build machine) the kernel shapes the
  // rate and each device's user-space shaper the delay; elsewhere one of
  // them does both. Either way, a round's download runs from its start to
  // the device's acknowledgement: the instructions cross the delayed
  // downlink and the acknowledgement the delayed uplink, 2 x 300 ms at least.
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const CliRun run = RunCli("sim --data " FEDRT_TINY_IDX_DIR " --devices 2 --rounds 2 --model mlp:784-16-10"
                            " --codec fp32 --link 1000mbit,delay=300ms --out " + dir.File("s"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("links: 2 x 1gbit,delay=300ms; shaper: ") != std::string::npos);
  const bool split = run.output.find("shaper: kernel for the rate (") != std::string::npos;
  const bool kernel = run.output.find("shaper: kernel (") != std::string::npos;
  const bool user = run.output.find("shaper: user space (the kernel cannot: ") != std::string::npos;
  CHECK(int{split} + int{kernel} + int{user} == 1);
  if (split) CHECK(run.output.find("), user space for the delay (the kernel cannot: ") != std::string::npos);
  CHECK(run.output.find("[fp32] round 2/2  updates 2/2") != std::string::npos);
  std::ifstream metrics(dir.File("s/metrics.jsonl"));
  int rounds = 0;
  for (std::string line; std::getline(metrics, line);) {
    ++rounds;
    INFO(line);
    CHECK(MetricsNumber(line, "download_seconds") >= 0.6);
  }
  CHECK(rounds == 2);
}

TEST_CASE("fedrt sim --topology ring and gossip shape every peer's links in user space") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  for (const char* topology : {"ring", "gossip"}) {
    const CliRun run = RunCli(std::string("sim --topology ") + topology + " --data " FEDRT_TINY_IDX_DIR
                              " --peers 2 --epochs 1 --batch 16 --model mlp:784-16-10 --codec fp32"
                              " --link 100mbit,delay=20ms --shaper user --out " + dir.File(topology));
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    CHECK(run.output.find("links: 2 x 100mbit,delay=20ms; shaper: user space (the kernel cannot: --shaper user)") !=
          std::string::npos);
    // Each peer was started with its own link.
    std::ifstream log(dir.File(std::string(topology) + "/" + topology + "-fp32/rank-1.log"));
    bool shaped = false;
    for (std::string line; std::getline(log, line);) shaped = shaped || line == "links shaped in user space: 100mbit,delay=20ms";
    CHECK(shaped);
  }
}

TEST_CASE("fedrt sim devices make room for a codec spec that needs more than the defaults (small buckets)") {
  // A fedrt device is sized for the build's codecs at their default
  // parameters; b=1 needs more codec storage and payload than b=0 (and so
  // does each rho the aggregator moves it to). Before, every device refused
  // every round with resource_exhausted; now a device reports it once per
  // such spec, makes room, joins again and sends its update in the round.
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const CliRun run = RunCli("sim --data " FEDRT_TINY_IDX_DIR " --devices 2 --rounds 2 --model mlp:784-16-10"
                            " --codec ndqsg:s1=1,rho=2,b=1,ec=pack --out " + dir.File("s"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("round 1/2  updates 2/2") != std::string::npos);
  CHECK(run.output.find("round 2/2  updates 2/2") != std::string::npos);
}

TEST_CASE("fedrt sim whose devices exit at start stops within 30 s with their reason") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const auto started = std::chrono::steady_clock::now();
  const CliRun run = RunCli("sim --data " FEDRT_TINY_IDX_DIR " --devices 2 --rounds 2 --model mlp:784-16-10 --codec fp32"
                            " --partition shards:0 --out " + dir.File("s"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK(seconds < 30.0);
  CHECK(run.output.find("exited with status 1 before round 1 of 2 (its log: ") != std::string::npos);
  CHECK(run.output.find("): fedrt device: invalid_argument: shards needs a count 1..1000: 'shards:0'; stopping") !=
        std::string::npos);
}

}  // namespace
}  // namespace fedrt
