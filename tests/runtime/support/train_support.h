// Small synthetic data sets for training tests: `classes` clusters of
// noisy points, deterministic, learnable in a few epochs. Stored as bytes
// like an image set; features read back as (center - 0.5) + noise.
#ifndef FEDRT_TESTS_RUNTIME_TRAIN_SUPPORT_H_
#define FEDRT_TESTS_RUNTIME_TRAIN_SUPPORT_H_

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/runtime/trainer.h"

namespace fedrt::testing {

inline Dataset Clusters(std::size_t count, int channels, int height, int width, int classes, uint32_t seed) {
  Dataset d;
  d.count = count;
  d.channels = channels;
  d.height = height;
  d.width = width;
  d.num_classes = classes;
  const std::size_t size = d.example_size();
  d.pixels.resize(count * size);
  d.labels.resize(count);
  uint32_t x = seed * 2654435761u + 7;
  auto noise = [&x] {
    x = x * 1664525u + 1013904223u;
    return static_cast<float>(static_cast<int>(x >> 8) % 1000 - 500) / 1000.0f;
  };
  for (std::size_t n = 0; n < count; ++n) {
    const int label = static_cast<int>(n % static_cast<std::size_t>(classes));
    d.labels[n] = static_cast<uint8_t>(label);
    for (std::size_t i = 0; i < size; ++i) {
      // Class c lights up features whose index is congruent to c.
      const float center = static_cast<int>(i % static_cast<std::size_t>(classes)) == label ? 1.0f : 0.0f;
      // center + noise is in [-0.5, 1.5): bytes 0..254 across that range.
      d.pixels[n * size + i] = static_cast<uint8_t>((center + noise() + 0.5f) * 127.5f);
    }
  }
  d.normalization = {0.5f, 0.5f};
  return d;
}

// Fashion-MNIST's test images when installed (and readable by this build),
// else synthetic 28x28 clusters of the same shape: real updates for the
// codec measurements that need them.
inline Dataset FashionMnistOrClusters() {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  Result<Dataset> data = LoadIdxDataset(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
  if (data.ok()) {
    data->normalization = ComputeNormalization(*data);
    return std::move(*data);
  }
  MESSAGE("Fashion-MNIST not available (" << data.status().ToString() << "): synthetic images");
  return Clusters(2000, 1, 28, 28, 10, 3);
}

// `steps` plain SGD steps (lr 0.05, batch 32) of `model` on `data`.
inline void TrainSteps(Model& model, const Dataset& data, std::size_t steps) {
  SgdOptions o;
  o.schedule.base_lr = 0.05;
  Result<Sgd> sgd = Sgd::Create(o, model.parameter_count());
  REQUIRE(sgd.ok());
  TrainOptions options;
  options.batch = 32;
  options.max_steps = steps;
  REQUIRE(TrainEpoch(model, *sgd, data, 0, options).ok());
}

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_RUNTIME_TRAIN_SUPPORT_H_
