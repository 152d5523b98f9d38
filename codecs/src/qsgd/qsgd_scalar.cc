// Scalar reference of the normalized-quantizer kernels (qsgd_kernels.h has
// the definitions, which this file follows literally).
#include <cmath>

#include "fedrt/codecs/philox.h"
#include "qsgd/qsgd_kernels.h"

namespace fedrt {
namespace scalar {
namespace {

float L2Norm(const float* v, std::size_t n) {
  double lanes[kNormLanes] = {};
  return static_cast<float>(std::sqrt(FinishNormLanes<true>(lanes, v, 0, n)));
}

float MeanAbs(const float* v, std::size_t n) {
  if (n == 0) return 0.0f;
  double lanes[kNormLanes] = {};
  return static_cast<float>(FinishNormLanes<false>(lanes, v, 0, n) / static_cast<double>(n));
}

float MaxAbs(const float* v, std::size_t n) {
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = std::fabs(v[i]);
    if (a > m) m = a;
  }
  return m;
}

void QuantizeLevels(const float* v, std::size_t n, float norm, const float* levels, int s, const uint32_t* words,
                    uint8_t* symbols) {
  for (std::size_t i = 0; i < n; ++i) {
    float r = std::fabs(v[i]) / norm;
    if (r > 1.0f) r = 1.0f;
    int j = 0;
    for (int k = 1; k < s; ++k) j += levels[k] <= r ? 1 : 0;
    const float p = (r - levels[j]) / (levels[j + 1] - levels[j]);
    const int level = j + (UniformFromWord(words[i]) < p ? 1 : 0);
    symbols[i] = static_cast<uint8_t>(v[i] < 0.0f ? s - level : s + level);
  }
}

float LevelValue(uint8_t symbol, float norm, const float* levels, int s) {
  const int offset = static_cast<int>(symbol) - s;
  const float magnitude = norm * levels[offset < 0 ? -offset : offset];
  return offset < 0 ? -magnitude : magnitude;
}

void DequantizeLevels(const uint8_t* symbols, std::size_t n, float norm, const float* levels, int s, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = LevelValue(symbols[i], norm, levels, s);
}

void DequantizeLevelsAccumulate(const uint8_t* symbols, std::size_t n, float norm, const float* levels, int s,
                                float weight, float* acc) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += weight * LevelValue(symbols[i], norm, levels, s);
}

void SignQuantize(const float* v, std::size_t n, uint8_t* symbols) {
  for (std::size_t i = 0; i < n; ++i) symbols[i] = v[i] < 0.0f ? 1 : 0;
}

void SignDequantize(const uint8_t* symbols, std::size_t n, float scale, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = symbols[i] ? -scale : scale;
}

void SignDequantizeAccumulate(const uint8_t* symbols, std::size_t n, float scale, float weight, float* acc) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += weight * (symbols[i] ? -scale : scale);
}

void QuantizeLevelsStream(const float* v, std::size_t n, float norm, const float* levels, int s,
                          const RandomStream& stream, uint64_t first, uint8_t* symbols) {
  QuantizeLevelsByWords(&QuantizeLevels, v, n, norm, levels, s, stream, first, symbols);
}

}  // namespace

const QsgdKernels kQsgdKernels = {&L2Norm,         &MeanAbs,      &MaxAbs,         &QuantizeLevels,
                                  &DequantizeLevels, &DequantizeLevelsAccumulate, &SignQuantize,
                                  &SignDequantize, &SignDequantizeAccumulate, &QuantizeLevelsStream};

}  // namespace scalar
}  // namespace fedrt
