// NEON sparsifier kernels (AArch64 and ARMv7; see sparse_kernels.h). Integer
// compares on the magnitude bit patterns only (no float arithmetic, so
// ARMv7's flush-to-zero cannot change a result: denormals are ordinary small
// patterns here). Four coordinates per compare; blocks with a match are
// finished by the scalar kernel in index order. The first histogram pass is
// the scalar one (its cost is the counter increments, not the arithmetic).
// Tails (< 4 coordinates): the scalar kernels.
#include <arm_neon.h>

#include "sparse/sparse_kernels.h"

namespace fedrt::neon {
namespace {

inline bool Any(uint32x4_t v) {
  const uint32x2_t folded = vorr_u32(vget_low_u32(v), vget_high_u32(v));
  return (vget_lane_u32(folded, 0) | vget_lane_u32(folded, 1)) != 0;
}

inline uint32x4_t LoadMagnitudes(const float* x) {
  return vandq_u32(vreinterpretq_u32_f32(vld1q_f32(x)), vdupq_n_u32(0x7fffffffu));
}

}  // namespace

void MagnitudeHistogram(const float* x, std::size_t n, uint32_t* hist) { scalar::MagnitudeHistogram(x, n, hist); }

void PrefixHistogram(const float* x, std::size_t n, uint32_t prefix, int shift, int width, uint32_t* hist) {
  const uint32x4_t want = vdupq_n_u32(prefix);
  const int32x4_t down = vdupq_n_s32(-(shift + width));
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint32x4_t hit = vceqq_u32(vshlq_u32(LoadMagnitudes(x + i), down), want);
    if (Any(hit)) scalar::PrefixHistogram(x + i, 4, prefix, shift, width, hist);
  }
  scalar::PrefixHistogram(x + i, n - i, prefix, shift, width, hist);
}

void HistogramAbove(const float* x, std::size_t n, uint32_t low, uint32_t* hist) {
  const uint32x4_t t = vdupq_n_u32(low);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    if (Any(vcgeq_u32(LoadMagnitudes(x + i), t))) scalar::HistogramAbove(x + i, 4, low, hist);
  }
  scalar::HistogramAbove(x + i, n - i, low, hist);
}

std::size_t ValuesInBin(const float* x, std::size_t n, uint32_t bin, uint32_t* out) {
  const uint32x4_t want = vdupq_n_u32(bin);
  std::size_t count = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    if (Any(vceqq_u32(vshrq_n_u32(LoadMagnitudes(x + i), 20), want))) {
      count += scalar::ValuesInBin(x + i, 4, bin, out + count);
    }
  }
  return count + scalar::ValuesInBin(x + i, n - i, bin, out + count);
}

std::size_t CollectAbove(const float* x, std::size_t n, uint32_t base, uint32_t threshold, std::size_t* ties,
                         uint32_t* out) {
  const uint32x4_t t = vdupq_n_u32(threshold);
  std::size_t count = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint32x4_t hit = vcgeq_u32(LoadMagnitudes(x + i), t);
    if (Any(hit)) {
      count += scalar::CollectAbove(x + i, 4, base + static_cast<uint32_t>(i), threshold, ties, out + count);
    }
  }
  return count + scalar::CollectAbove(x + i, n - i, base + static_cast<uint32_t>(i), threshold, ties, out + count);
}

std::size_t CompactAtLeast(const float* x, std::size_t n, uint32_t base, uint32_t low, uint32_t* idx, uint32_t* mag,
                           std::size_t cap) {
  const uint32x4_t t = vdupq_n_u32(low);
  std::size_t count = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    if (Any(vcgeq_u32(LoadMagnitudes(x + i), t))) {
      const std::size_t got = scalar::CompactAtLeast(x + i, 4, base + static_cast<uint32_t>(i), low, idx + count,
                                                     mag + count, cap - count);
      if (got > cap - count) return cap + 1;
      count += got;
    }
  }
  const std::size_t rest =
      scalar::CompactAtLeast(x + i, n - i, base + static_cast<uint32_t>(i), low, idx + count, mag + count, cap - count);
  return rest > cap - count ? cap + 1 : count + rest;
}

}  // namespace fedrt::neon
