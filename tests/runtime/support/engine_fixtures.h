// What the engine tests over memory pipes share: the devices' keys and a
// small learnable data set (Gaussian blobs, 16 features, 4 classes).
#ifndef FEDRT_TESTS_RUNTIME_ENGINE_FIXTURES_H_
#define FEDRT_TESTS_RUNTIME_ENGINE_FIXTURES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/gemm.h"

namespace fedrt::testing {

inline constexpr int kBlobFeatures = 16;
inline constexpr int kBlobClasses = 4;

// Device i's pre-shared key, as hex (32 bytes).
inline std::string HexKey(int i) {
  std::string key;
  for (int b = 0; b < 16; ++b) key += "0123456789abcdef"[(i * 7 + b) % 16];
  return key + key;
}

// Four Gaussian blobs: class c is centred at +2.5 on features c, c+4, c+8,
// c+12, with unit noise everywhere. Learnable, not trivially.
struct Blobs {
  std::vector<float> features;
  std::vector<uint8_t> labels;
  DataView view;

  Blobs(std::size_t count, uint32_t seed) : features(count * kBlobFeatures), labels(count) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    for (std::size_t i = 0; i < count; ++i) {
      const int c = static_cast<int>(i % kBlobClasses);
      labels[i] = static_cast<uint8_t>(c);
      for (int j = 0; j < kBlobFeatures; ++j) {
        features[i * kBlobFeatures + j] = noise(rng) + (j % kBlobClasses == c ? 2.5f : 0.0f);
      }
    }
    view.count = count;
    view.example_size = kBlobFeatures;
    view.num_classes = kBlobClasses;
    view.features = features.data();
    view.labels = labels.data();
  }
};

// True when training runs on the SGEMM kernel the golden model hashes were
// recorded with: OpenBLAS's "Haswell" (which "Zen" shares). OpenBLAS picks its
// kernel by CPU when it loads ("SkylakeX" on an AVX-512 CPU sums in another
// order), so ctest sets OPENBLAS_CORETYPE=Haswell for the golden tests
// (tests/runtime/CMakeLists.txt); run by hand without it, only the golden
// comparison is skipped.
inline bool GoldenGemmKernel() {
  const char* core = OpenBlasCoreName();
  return std::strcmp(core, "Haswell") == 0 || std::strcmp(core, "Zen") == 0;
}

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_RUNTIME_ENGINE_FIXTURES_H_
