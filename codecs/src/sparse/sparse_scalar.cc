// Scalar reference of the sparsifier kernels (see sparse_kernels.h). The
// histogram uses four interleaved sub-histograms so repeated bins do not
// serialise on one counter; they are summed at the end.
#include <cstring>

#include "sparse/sparse_kernels.h"

namespace fedrt::scalar {
namespace {

inline uint32_t MagnitudeBits(const float* x, std::size_t i) {
  uint32_t bits;
  std::memcpy(&bits, x + i, 4);
  return bits & 0x7fffffffu;
}

}  // namespace

void MagnitudeHistogram(const float* x, std::size_t n, uint32_t* hist) {
  uint32_t* sub[3] = {hist + kMagnitudeBins, hist + 2 * kMagnitudeBins, hist + 3 * kMagnitudeBins};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    ++hist[MagnitudeBits(x, i) >> 20];
    ++sub[0][MagnitudeBits(x, i + 1) >> 20];
    ++sub[1][MagnitudeBits(x, i + 2) >> 20];
    ++sub[2][MagnitudeBits(x, i + 3) >> 20];
  }
  for (; i < n; ++i) ++hist[MagnitudeBits(x, i) >> 20];
  for (std::size_t b = 0; b < kMagnitudeBins; ++b) hist[b] += sub[0][b] + sub[1][b] + sub[2][b];
}

void PrefixHistogram(const float* x, std::size_t n, uint32_t prefix, int shift, int width, uint32_t* hist) {
  const uint32_t mask = (1u << width) - 1;
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t m = MagnitudeBits(x, i);
    if ((m >> (shift + width)) == prefix) ++hist[(m >> shift) & mask];
  }
}

void HistogramAbove(const float* x, std::size_t n, uint32_t low, uint32_t* hist) {
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t m = MagnitudeBits(x, i);
    if (m >= low) ++hist[m >> 20];
  }
}

std::size_t ValuesInBin(const float* x, std::size_t n, uint32_t bin, uint32_t* out) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t m = MagnitudeBits(x, i);
    if ((m >> 20) == bin) out[count++] = m;
  }
  return count;
}

std::size_t CollectAbove(const float* x, std::size_t n, uint32_t base, uint32_t threshold, std::size_t* ties,
                         uint32_t* out) {
  std::size_t count = 0;
  std::size_t ties_left = *ties;
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t m = MagnitudeBits(x, i);
    if (m > threshold || (m == threshold && ties_left > 0)) {
      if (m == threshold) --ties_left;
      out[count++] = base + static_cast<uint32_t>(i);
    }
  }
  *ties = ties_left;
  return count;
}

std::size_t CompactAtLeast(const float* x, std::size_t n, uint32_t base, uint32_t low, uint32_t* idx, uint32_t* mag,
                           std::size_t cap) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t m = MagnitudeBits(x, i);
    if (m >= low) {
      if (count == cap) return cap + 1;
      idx[count] = base + static_cast<uint32_t>(i);
      mag[count] = m;
      ++count;
    }
  }
  return count;
}

}  // namespace fedrt::scalar
