// 03_embed: an aggregator and four devices in one process, federated over
// in-memory pipes. No socket and no thread, and no file unless a data set is
// named: the application owns the data, the keys and the loop that moves
// bytes, and the engines (fedrt/runtime/aggregator_engine.h,
// fedrt/runtime/device_client.h) do the protocol: joins with HMAC
// challenge-response, round instructions, local training, updates compressed
// with DQSG, aggregation and evaluation.
//
// Usage: 03_embed [FASHION_MNIST_DIR]
//   Without an argument: 8 Gaussian blobs in 32 dimensions, made here
//   (4,000 training examples shared IID by the devices, 2,000 to test),
//   model mlp:32-16-8. With a directory (e.g. /usr/share/datasets/fashion-mnist):
//   its four MNIST-style files, normalised, model mlp:784-100-10.
//   Five rounds, one local epoch each, codec dqsg. The joins' HMAC-SHA256 is
//   libcrypto's where fedrt has it (FEDRT_WITH_OPENSSL, the default), else
//   the example port's (examples/port/hmac_sha256.c, as firmware would bring
//   its own), so every build of fedrt runs this program.
//
// Expected output (x86-64 release build; with another ISA or GEMM the last
// digits may differ):
//   $ 03_embed
//   model mlp:32-16-8 (664 parameters), 4 devices, codec dqsg:s=2,b=0,ef=off,ec=rans
//   round 1/5  test accuracy 75.95%  loss 0.8817  up 0.7 KB (fp32: 10.4 KB)
//   round 2/5  test accuracy 89.10%  loss 0.4526  up 0.8 KB (fp32: 10.4 KB)
//   round 3/5  test accuracy 92.00%  loss 0.3065  up 0.8 KB (fp32: 10.4 KB)
//   round 4/5  test accuracy 93.75%  loss 0.2387  up 0.8 KB (fp32: 10.4 KB)
//   round 5/5  test accuracy 94.30%  loss 0.2017  up 0.8 KB (fp32: 10.4 KB)
//   final test accuracy 94.30% after 5 rounds (chance: 12.50%)
//   $ 03_embed /usr/share/datasets/fashion-mnist
//   model mlp:784-100-10 (79510 parameters), 4 devices, codec dqsg:s=2,b=0,ef=off,ec=rans
//   round 1/5  test accuracy 83.03%  loss 0.4827  up 18.7 KB (fp32: 1242.3 KB)
//   ...
//   round 5/5  test accuracy 86.31%  loss 0.3799  up 22.0 KB (fp32: 1242.3 KB)
//   final test accuracy 86.31% after 5 rounds (chance: 10.00%)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/config.h"
#include "fedrt/platform/log.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/device_client.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/partition.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/stream.h"
#include "port/port_crypto.h"

namespace {

using fedrt::Status;

constexpr int kDevices = 4;
constexpr uint32_t kRounds = 5;

// Examples the application owns; the engines read them through DataViews.
struct Examples {
  std::vector<float> features;
  std::vector<uint8_t> labels;
  fedrt::DataView View(std::size_t example_size, int classes) const {
    fedrt::DataView view;
    view.count = labels.size();
    view.example_size = example_size;
    view.num_classes = classes;
    view.features = features.data();
    view.labels = labels.data();
    return view;
  }
};

// Gaussian blobs: `classes` centres drawn once from `seed`, examples
// scattered around them with a standard deviation of 0.8. The normal deviates come from Box-Muller over mt19937 (both
// fully specified), so every platform makes the same examples.
void MakeBlobs(int classes, int dims, std::size_t train_count, std::size_t test_count, uint32_t seed,
               Examples* train, Examples* test) {
  std::mt19937 rng(seed);
  const auto uniform = [&rng] { return (static_cast<double>(rng()) + 0.5) / 4294967296.0; };
  const auto normal = [&uniform] {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));  // two statements: a fixed draw order
    return static_cast<float>(radius * std::cos(6.283185307179586 * uniform()));
  };
  std::vector<float> centres(static_cast<std::size_t>(classes) * dims);
  for (float& c : centres) c = 0.6f * normal();
  for (Examples* set : {train, test}) {
    const std::size_t count = set == train ? train_count : test_count;
    for (std::size_t i = 0; i < count; ++i) {
      const int label = static_cast<int>(rng() % static_cast<uint32_t>(classes));
      set->labels.push_back(static_cast<uint8_t>(label));
      for (int j = 0; j < dims; ++j) set->features.push_back(centres[label * dims + j] + 0.8f * normal());
    }
  }
}

struct Device {
  std::vector<uint32_t> share;
  std::unique_ptr<fedrt::Model> model;
  std::unique_ptr<fedrt::DeviceClient> client;
  std::shared_ptr<fedrt::DeviceConnectionHandler> link;
  std::unique_ptr<fedrt::transport::MemoryPipe> pipe;  // a: the aggregator's end, b: the device's
};


int Fail(const Status& status) {
  std::fprintf(stderr, "03_embed: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: 03_embed [FASHION_MNIST_DIR]\n");
    return 2;
  }
  fedrt::SetLogLevel(fedrt::LogLevel::kWarning);  // the engines' progress lines stay quiet

  // The data: made here, or read from an MNIST-style directory if one is given.
  Examples blobs_train, blobs_test;
  fedrt::TrainTestData mnist;
  fedrt::DataView train, test;
  std::string model_spec;
  if (argc == 2) {
    fedrt::Result<fedrt::TrainTestData> loaded = fedrt::LoadMnistStyleDirectory(argv[1]);
    if (!loaded.ok()) return Fail(loaded.status());
    mnist = std::move(*loaded);
    const fedrt::Normalization normalization = fedrt::ComputeNormalization(mnist.train);
    fedrt::Normalize(mnist.train, normalization);
    fedrt::Normalize(mnist.test, normalization);
    train = mnist.train;
    test = mnist.test;
    model_spec = "mlp:784-100-10";
  } else {
    MakeBlobs(8, 32, 4000, 2000, 11, &blobs_train, &blobs_test);
    train = blobs_train.View(32, 8);
    test = blobs_test.View(32, 8);
    model_spec = "mlp:32-16-8";
  }

  // The keys: one random key per device, shared with the aggregator.
#if FEDRT_HAVE_OPENSSL
  fedrt::transport::Crypto& crypto = fedrt::transport::SystemCrypto();
#else
  // Without libcrypto the application brings the join's primitives.
  fedrt_example::PortCrypto port_crypto;
  fedrt::transport::Crypto& crypto = port_crypto;
#endif
  std::string key_text;
  for (int i = 0; i < kDevices; ++i) {
    uint8_t key[32];
    if (!crypto.RandomBytes(key, sizeof(key)).ok()) return Fail(Status(fedrt::StatusCode::kInternal, "no randomness"));
    key_text += "dev-" + std::to_string(i) + " ";
    for (uint8_t byte : key) key_text += "0123456789abcdef"[byte >> 4], key_text += "0123456789abcdef"[byte & 15];
    key_text += "\n";
  }
  fedrt::Result<fedrt::transport::KeyStore> keys = fedrt::transport::KeyStore::Parse(key_text);
  if (!keys.ok()) return Fail(keys.status());

  // The aggregator.
  fedrt::AggregatorConfig config;
  config.model = model_spec;
  config.codec = "dqsg";
  config.rounds = kRounds;
  config.min_devices = kDevices;
  config.local_epochs = 1;
  config.learning_rate = 0.1f;
  double final_accuracy = 0;
  fedrt::AggregatorHooks hooks;
  hooks.on_round = [&final_accuracy](const fedrt::RoundReport& r) {
    if (!r.applied) {  // nothing applied: the aggregator runs the round again
      std::printf("round %u/%u  not applied: %s\n", r.round, kRounds, r.failure.c_str());
      return;
    }
    final_accuracy = r.test_accuracy;
    std::printf("round %u/%u  test accuracy %.2f%%  loss %.4f  up %.1f KB (fp32: %.1f KB)\n", r.round, kRounds,
                100.0 * r.test_accuracy, r.test_loss, static_cast<double>(r.bytes_up) / 1024.0,
                static_cast<double>(r.fp32_bytes_up) / 1024.0);
  };
  const fedrt::Clock& clock = fedrt::SystemClock();
  fedrt::Result<std::shared_ptr<fedrt::Aggregator>> created =
      fedrt::Aggregator::Create(config, *keys, crypto, clock, &test, hooks);
  if (!created.ok()) return Fail(created.status());
  std::shared_ptr<fedrt::Aggregator> aggregator = *created;
  std::printf("model %s (%zu parameters), %d devices, codec %s\n", model_spec.c_str(),
              aggregator->model().parameter_count(), kDevices, aggregator->codec().c_str());

  // The devices, each with an IID share of the training examples, each
  // joined to the aggregator by a pipe.
  fedrt::Result<fedrt::Partition> shares = fedrt::PartitionIid(train.count, kDevices, 7);
  if (!shares.ok()) return Fail(shares.status());
  std::vector<Device> devices(kDevices);
  for (int i = 0; i < kDevices; ++i) {
    Device& d = devices[i];
    d.share = (*shares)[i];
    fedrt::Result<fedrt::Model> model = fedrt::Model::Create(model_spec, 1);
    if (!model.ok()) return Fail(model.status());
    d.model = std::make_unique<fedrt::Model>(std::move(*model));
    fedrt::DeviceClientConfig device_config;
    device_config.device_id = "dev-" + std::to_string(i);
    device_config.key = *keys->Find(device_config.device_id);
    device_config.shuffle_seed = 100 + static_cast<uint64_t>(i);
    fedrt::Result<std::unique_ptr<fedrt::DeviceClient>> client =
        fedrt::DeviceClient::Create(device_config, *d.model, train, &d.share, crypto);
    if (!client.ok()) return Fail(client.status());
    d.client = std::move(*client);
    d.link = std::make_shared<fedrt::DeviceConnectionHandler>(*d.client);
    fedrt::Result<std::unique_ptr<fedrt::transport::MemoryPipe>> pipe =
        fedrt::transport::MemoryPipe::Create(aggregator, d.link, aggregator->connection_options(), clock);
    if (!pipe.ok()) return Fail(pipe.status());
    d.pipe = std::move(*pipe);
    const Status started = d.client->Start(d.pipe->b());
    if (!started.ok()) return Fail(started);
  }

  // The loop: move bytes, let the devices train, let the aggregator keep
  // time. One thread drives everything.
  while (!aggregator->finished()) {
    bool moved = false;
    for (Device& d : devices) {
      if (d.pipe->Pump()) moved = true;
      if (d.client->has_work()) {
        const Status worked = d.client->Work(d.pipe->b(), 0);
        if (!worked.ok()) return Fail(worked);
        moved = true;
      }
    }
    const uint32_t wait_ms = aggregator->Tick();
    for (Device& d : devices) {
      if (d.pipe->Pump()) moved = true;
    }
    // Nothing to do until a deadline: a device went quiet (none does here).
    if (!moved && wait_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::min<uint32_t>(wait_ms, 10)));
  }
  for (Device& d : devices) d.pipe->Pump();  // the Leave and the closes
  std::printf("final test accuracy %.2f%% after %u rounds (chance: %.2f%%)\n", 100.0 * final_accuracy,
              aggregator->round(), 100.0 / test.num_classes);
  return 0;
}
