// The training core on a microcontroller: the built-in GEMM with the build's
// blocking (FEDRT_GEMM_BLOCKING) gives the reference product's bits, and
// mlp:784-16-10 (the firmware example's model) learns on caller memory.
// Runs on the host and on the Cortex-M4 under QEMU; on the board the runner
// prints the stack and heap high-water marks after the tests.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fedrt/runtime/gemm.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/runtime/trainer.h"
#include "mini_test.h"
#include "train/gemm_kernels.h"

namespace {

uint32_t Next(uint32_t& state) {
  state = state * 1664525u + 1013904223u;
  return state;
}

TEST("the blocked GEMM gives the reference bits across block edges") {
  // Sizes beyond every block of the Cortex-M preset (64;16;64) and not
  // multiples of the kernel's tile.
  const int m = 37, n = 70, k = 150;
  std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n);
  uint32_t state = 7;
  for (float& x : a) x = static_cast<float>(static_cast<int32_t>(Next(state)) >> 8) * 0x1p-23f;
  for (float& x : b) x = static_cast<float>(static_cast<int32_t>(Next(state)) >> 8) * 0x1p-23f;
  std::vector<float> blocked(static_cast<std::size_t>(m) * n, 0.5f), reference(blocked);
  fedrt::BuiltinGemm(fedrt::Transpose::kNo, fedrt::Transpose::kNo, m, n, k, a.data(), k, b.data(), n, 1.0f,
                     blocked.data(), n);
  fedrt::ReferenceGemm(fedrt::Transpose::kNo, fedrt::Transpose::kNo, m, n, k, a.data(), k, b.data(), n, 1.0f,
                       reference.data(), n);
  CHECK(std::memcmp(blocked.data(), reference.data(), blocked.size() * sizeof(float)) == 0);
  std::printf("  packing scratch for %dx%dx%d: %u floats\n", m, n, k,
              static_cast<unsigned>(fedrt::BuiltinGemmScratchFloats(m, n, k)));
}

TEST("a cnn spec builds, or is refused naming FEDRT_CONV_LAYERS when the build leaves convolutions out") {
  fedrt::Result<fedrt::Model> model = fedrt::Model::Create("cnn:8x8x1-c2k3-p2-d4-3", 1);
#if FEDRT_CONV_LAYERS
  CHECK(model.ok());
#else
  REQUIRE(!model.ok());
  CHECK(model.status().code() == fedrt::StatusCode::kUnsupported);
  CHECK(model.status().message().find("FEDRT_CONV_LAYERS=OFF") != std::string::npos);
#endif
}

TEST("mlp:784-16-10 learns a synthetic task on caller memory") {
  const char* spec = "mlp:784-16-10";
  const int batch = 8;
  const std::size_t count = 64;
  fedrt::SgdOptions sgd_options;
  sgd_options.schedule.base_lr = 0.01;
  auto sizes = fedrt::QueryTrainingBufferSizes(spec, sgd_options, batch);
  REQUIRE(sizes.ok());
  // One arena for parameters, gradients, optimizer state and workspace.
  std::vector<float> arena(sizes->total_floats());
  auto buffers = fedrt::CarveTrainingBuffers(*sizes, fedrt::FloatSpan{arena.data(), arena.size()});
  REQUIRE(buffers.ok());
  auto model = fedrt::Model::CreateInBuffers(spec, 1, batch, buffers->parameters, buffers->gradients,
                                             buffers->workspace);
  REQUIRE(model.ok());
  auto sgd = fedrt::Sgd::CreateInBuffer(sgd_options, model->parameter_count(), buffers->optimizer_state);
  REQUIRE(sgd.ok());
  std::printf("  %u parameters (%u bytes), training arena %u bytes\n",
              static_cast<unsigned>(model->parameter_count()),
              static_cast<unsigned>(model->parameter_count() * sizeof(float)),
              static_cast<unsigned>(arena.size() * sizeof(float)));

  // Class c lights up pixels [c * 78, c * 78 + 78) on top of noise.
  std::vector<uint8_t> pixels(count * 784), labels(count);
  uint32_t state = 99;
  for (std::size_t e = 0; e < count; ++e) {
    labels[e] = static_cast<uint8_t>(e % 10);
    for (std::size_t p = 0; p < 784; ++p) {
      const bool lit = p / 78 == labels[e];
      pixels[e * 784 + p] = static_cast<uint8_t>((Next(state) >> 26) + (lit ? 160 : 0));
    }
  }
  fedrt::DataView data;
  data.count = count;
  data.example_size = 784;
  data.num_classes = 10;
  data.pixels = pixels.data();
  data.labels = labels.data();
  data.normalization = {0.3f, 0.35f};  // on pixels / 255
  REQUIRE(data.Validate().ok());

  fedrt::TrainOptions options;
  options.batch = batch;
  double first_loss = 0.0, last_loss = 0.0, last_accuracy = 0.0;
  for (uint64_t epoch = 0; epoch < 4; ++epoch) {
    auto stats = fedrt::TrainEpoch(*model, *sgd, data, epoch, options);
    REQUIRE(stats.ok());
    if (epoch == 0) first_loss = stats->loss;
    last_loss = stats->loss;
    last_accuracy = stats->accuracy;
    std::printf("  epoch %u: loss %d/1000, accuracy %d%%\n", static_cast<unsigned>(epoch),
                static_cast<int>(stats->loss * 1000), static_cast<int>(stats->accuracy * 100));
  }
  CHECK(std::isfinite(last_loss));
  CHECK(last_loss < first_loss * 0.5);
  CHECK(last_accuracy > 0.9);
}

}  // namespace
