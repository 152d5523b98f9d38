// Scalar reference DQSG / NDQSG kernels: the formulas of dqsg_kernels.h,
// one coordinate at a time, rounding with std::nearbyint (half to even in
// the default floating-point environment).
#include <cmath>
#include <cstring>

#include "dqsg/dqsg_kernels.h"

namespace fedrt::scalar {

float MaxAbs(const float* w, std::size_t n) {
  uint32_t best = 0;
  for (std::size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, w + i, sizeof bits);
    bits &= 0x7FFFFFFFu;
    if (bits > best) best = bits;
  }
  float result;
  std::memcpy(&result, &best, sizeof result);
  return result;
}

void Quantize(const float* w, const float* u, std::size_t n, float scale, int s, uint8_t* symbols) {
  const float hi = static_cast<float>(s);
  for (std::size_t i = 0; i < n; ++i) {
    float q = std::nearbyint(w[i] / scale + u[i]);
    q = q > hi ? hi : q < -hi ? -hi : q;
    symbols[i] = static_cast<uint8_t>(static_cast<int>(q) + s);
  }
}

void Dequantize(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s, float* out) {
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = (static_cast<float>(static_cast<int>(symbols[i]) - s) - u[i]) * scale;
  }
}

void DequantizeAccumulate(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s,
                          float weight, float* acc) {
  for (std::size_t i = 0; i < n; ++i) {
    acc[i] += weight * ((static_cast<float>(static_cast<int>(symbols[i]) - s) - u[i]) * scale);
  }
}

void NestedQuantize(const float* w, const float* u, std::size_t n, float scale, int s1, int rho,
                    uint8_t* symbols) {
  const float hi = static_cast<float>(s1);
  const float rho_f = static_cast<float>(rho);
  const int half = (rho - 1) / 2;
  const bool odd = rho % 2 != 0;
  const float half_rho = static_cast<float>(rho / 2);
  for (std::size_t i = 0; i < n; ++i) {
    float fine = std::nearbyint(w[i] / scale + u[i]);
    fine = fine > hi ? hi : fine < -hi ? -hi : fine;
    // Odd rho: q in [-(rho-1)/2, (rho-1)/2]. Even rho: q in [1 - rho/2, rho/2],
    // so the same offset (rho-1)/2 maps both onto [0, rho).
    const float q = odd ? fine - rho_f * std::nearbyint(fine / rho_f)
                        : fine - rho_f * std::ceil((fine - half_rho) / rho_f);
    symbols[i] = static_cast<uint8_t>(static_cast<int>(q) + half);
  }
}

void NestedDequantize(const uint8_t* symbols, const float* u, const float* y, std::size_t n, float scale,
                      int rho, float* out) {
  const float rho_f = static_cast<float>(rho);
  const float d2 = rho_f * scale;
  const int half = (rho - 1) / 2;
  for (std::size_t i = 0; i < n; ++i) {
    const float q = static_cast<float>(static_cast<int>(symbols[i]) - half);
    const float a = (q - u[i]) * scale;
    const float m = std::nearbyint((y[i] - a) / d2);
    const float fine = q + rho_f * m;
    out[i] = (fine - u[i]) * scale;
  }
}

}  // namespace fedrt::scalar
