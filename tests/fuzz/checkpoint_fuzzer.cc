// libFuzzer target: the readers of the files a restarted process trusts,
// fed arbitrary bytes: a training checkpoint (DecodeCheckpoint, then restored
// into the model its spec names), an aggregator checkpoint
// (DecodeAggregatorCheckpoint, then restored into an Aggregator engine, whose
// Restore checks the codec state) and a device's state file (DecodeResidual).
// The first byte picks the reader and may ask for the CRC trailer to be
// recomputed (fuzz_support.h); the rest is the file. A reader may refuse the
// bytes; it must not crash, overflow or hit undefined behaviour, and what it
// accepts must satisfy its own contract (finite residual of the asked size).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/runtime/checkpoint.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"
#include "fuzz_support.h"
#include "star/aggregator_checkpoint.h"
#include "star/device_state.h"

namespace {

using fedrt::fuzz::CheckpointReader;

// Models small enough to build for every input.
constexpr std::size_t kMaxParameters = std::size_t{1} << 16;
constexpr std::size_t kMaxWorkspace = std::size_t{1} << 20;

void RestoreTrainingCheckpoint(const fedrt::Checkpoint& checkpoint) {
  auto sizes = fedrt::QueryModelBufferSizes(checkpoint.spec, 1);
  if (!sizes.ok() || sizes->parameters > kMaxParameters || sizes->workspace > kMaxWorkspace) return;
  auto model = fedrt::Model::Create(checkpoint.spec, 1);
  if (!model.ok()) return;
  fedrt::SgdOptions options;
  options.momentum = checkpoint.velocity.empty() ? 0.0f : 0.9f;
  auto sgd = fedrt::Sgd::Create(options, model->parameter_count());
  if (!sgd.ok()) std::abort();
  (void)fedrt::RestoreCheckpoint(checkpoint, *model, *sgd);
}

const fedrt::transport::KeyStore& NoKeys() {
  static const auto* keys = new fedrt::transport::KeyStore();
  return *keys;
}

void RestoreAggregator(fedrt::AggregatorCheckpoint checkpoint, bool levels) {
  fedrt::AggregatorConfig config;
  config.model = fedrt::fuzz::kNpyModelSpec;
  config.codec = levels ? "alq" : "ndqsg";  // the codecs with state in the checkpoint
  config.downlink_codec = "fp16";
  fedrt::fuzz::FixedCrypto crypto;
  auto aggregator = fedrt::Aggregator::Create(config, NoKeys(), crypto, fedrt::SystemClock(), nullptr);
  if (!aggregator.ok()) std::abort();
  (void)(*aggregator)->Restore(std::move(checkpoint));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::vector<uint8_t> file(data + 1, data + size);
  if ((data[0] & fedrt::fuzz::kFixCrcBit) != 0) fedrt::fuzz::FixCrc32cTrailer(file);
  const auto reader = static_cast<CheckpointReader>(data[0] & 3);
  switch (reader) {
    case CheckpointReader::kModel: {
      auto checkpoint = fedrt::DecodeCheckpoint(file.data(), file.size(), "fuzz.ckpt");
      if (checkpoint.ok()) RestoreTrainingCheckpoint(*checkpoint);
      break;
    }
    case CheckpointReader::kAggregator: {
      auto checkpoint = fedrt::DecodeAggregatorCheckpoint(file.data(), file.size(), "fuzz.agg");
      if (checkpoint.ok()) RestoreAggregator(std::move(*checkpoint), (data[0] & 4) != 0);
      break;
    }
    case CheckpointReader::kDeviceState: {
      auto residual =
          fedrt::star::DecodeResidual(file.data(), file.size(), fedrt::fuzz::kDeviceStateValues, "fuzz.state");
      if (residual.ok()) {
        if (residual->size() != fedrt::fuzz::kDeviceStateValues) std::abort();
        for (float v : *residual) {
          if (!std::isfinite(v)) std::abort();
        }
      }
      break;
    }
    default: break;
  }
  return 0;
}
