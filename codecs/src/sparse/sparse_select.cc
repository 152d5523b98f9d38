// Radix select on magnitudes and selection sampling (see sparse_select.h),
// plus the dispatch table of the sparsifier kernels.
#include "sparse/sparse_select.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

#include "fedrt/codecs/codec.h"
#include "fedrt/platform/config.h"

namespace fedrt {

const SparseKernels& SparseKernelsFor(Isa requested) {
  const Isa isa = Avx2ForAvx512(requested);  // no AVX-512 variants: AVX2
  static const SparseKernels kScalar = {&scalar::MagnitudeHistogram, &scalar::PrefixHistogram, &scalar::HistogramAbove,
                                        &scalar::ValuesInBin, &scalar::CollectAbove,
                                        &scalar::CompactAtLeast};
#if FEDRT_HAVE_AVX2_KERNELS
  static const SparseKernels kAvx2 = {&avx2::MagnitudeHistogram, &avx2::PrefixHistogram, &avx2::HistogramAbove,
                                      &avx2::ValuesInBin, &avx2::CollectAbove,
                                        &avx2::CompactAtLeast};
  if (isa == Isa::kAvx2) return kAvx2;
#endif
#if FEDRT_HAVE_NEON_KERNELS
  static const SparseKernels kNeon = {&neon::MagnitudeHistogram, &neon::PrefixHistogram, &neon::HistogramAbove,
                                      &neon::ValuesInBin, &neon::CollectAbove,
                                        &neon::CompactAtLeast};
  if (isa == Isa::kNeon) return kNeon;
#endif
  (void)isa;
  return kScalar;
}

namespace codec_internal {
namespace {

// In hist[0..bins), the bin holding the `need`-th largest element counting
// from the top (need >= 1 and <= the total). *need becomes the rank inside
// that bin and *whole tells whether the whole bin is taken.
uint32_t FindBin(const uint32_t* hist, std::size_t bins, std::size_t* need, bool* whole) {
  std::size_t left = *need;
  for (std::size_t b = bins; b-- > 0;) {
    if (hist[b] >= left) {
      *need = left;
      *whole = hist[b] == left;
      return static_cast<uint32_t>(b);
    }
    left -= hist[b];
  }
  *whole = false;
  return 0;  // unreachable when need <= total
}

}  // namespace

// A magnitude pattern, rounded down to its first-pass bin, that probably has
// between r and about 2r + 32 d / 4096 coordinates above it: the rank-scaled
// order statistic of a strided sample. Only speed depends on the guess; the
// caller checks the count and falls back to the full histogram.
uint32_t SampledLowerBound(const float* x, std::size_t d, std::size_t r, uint32_t* sample) {
  constexpr std::size_t kSamples = 4096;
  const std::size_t stride = d / kSamples;
  for (std::size_t j = 0; j < kSamples; ++j) {
    std::memcpy(&sample[j], x + j * stride, 4);
    sample[j] &= 0x7fffffffu;
  }
  std::size_t rank = 2 * static_cast<std::size_t>(static_cast<uint64_t>(r) * kSamples / d) + 32;
  if (rank >= kSamples) rank = kSamples - 1;
  std::nth_element(sample, sample + rank, sample + kSamples, std::greater<uint32_t>());
  return sample[rank] & ~0xfffffu;
}

Result<MagnitudeThreshold> FindMagnitudeThreshold(const float* x, std::size_t d, std::size_t r,
                                                  uint32_t* scratch, std::size_t scratch_size,
                                                  uint32_t* histograms) {
  MagnitudeThreshold t;
  const SparseKernels& kernels = SparseKernelsFor(ActiveIsa());
  std::vector<uint32_t> heap;
  if (histograms == nullptr) {
    heap.resize(kSelectWorkspaceWords);
    histograms = heap.data();
  }
  // histograms: the first pass's bins, then its sub-histograms (or the
  // sample); the later passes reuse the words after the first pass's bins.
  uint32_t* hist = histograms;
  std::memset(hist, 0, kMagnitudeBins * sizeof(uint32_t));
  bool filled = false;
  // Large vectors, small r: count only the coordinates above a sampled lower
  // bound (a filter pass, far cheaper than histogramming everything).
  if (r > 0 && d >= (std::size_t{1} << 16) && r <= d / 16) {
    const uint32_t low = SampledLowerBound(x, d, r, histograms + kMagnitudeBins);
    if (low > 0) {
      kernels.histogram_above(x, d, low, hist);
      std::size_t total = 0;
      for (std::size_t b = 0; b < kMagnitudeBins; ++b) total += hist[b];
      filled = total >= r;
      if (!filled) std::memset(hist, 0, kMagnitudeBins * sizeof(uint32_t));
    }
  }
  if (!filled) {
    std::memset(hist + kMagnitudeBins, 0, 3 * kMagnitudeBins * sizeof(uint32_t));
    kernels.magnitude_histogram(x, d, hist);
  }
  for (std::size_t b = 0x7f8; b < kMagnitudeBins; ++b) {
    if (hist[b] != 0) return CheckFinite(x, d);  // names the coordinate
  }
  if (r == 0) return t;
  if (r >= d) {
    t.bits = 0;
    t.ties = d;
    return t;
  }
  std::size_t need = r;
  bool whole = false;
  const uint32_t b1 = FindBin(hist, kMagnitudeBins, &need, &whole);
  if (whole) {  // every element of the bin is in: threshold at the bin's floor
    t.bits = b1 << 20;
    t.ties = SIZE_MAX;
    return t;
  }
  // Bins at or above the sampled bound hold exact counts, so the bin's
  // values fit when hist[b1] does: select among them directly.
  if (scratch != nullptr && hist[b1] <= scratch_size) {
    const std::size_t n = kernels.values_in_bin(x, d, b1, scratch);
    std::nth_element(scratch, scratch + (need - 1), scratch + n, std::greater<uint32_t>());
    t.bits = scratch[need - 1];
    std::size_t above = 0;
    for (std::size_t j = 0; j < n; ++j) above += scratch[j] > t.bits ? 1 : 0;
    t.ties = need - above;
    return t;
  }
  uint32_t* hist2 = histograms + kMagnitudeBins;
  std::memset(hist2, 0, kMagnitudeBins * sizeof(uint32_t));
  kernels.prefix_histogram(x, d, b1, 9, 11, hist2);
  const uint32_t b2 = FindBin(hist2, kMagnitudeBins, &need, &whole);
  if (whole) {
    t.bits = (b1 << 20) | (b2 << 9);
    t.ties = SIZE_MAX;
    return t;
  }
  uint32_t* hist3 = histograms + 2 * kMagnitudeBins;
  std::memset(hist3, 0, 512 * sizeof(uint32_t));
  kernels.prefix_histogram(x, d, (b1 << 11) | b2, 0, 9, hist3);
  const uint32_t b3 = FindBin(hist3, 512, &need, &whole);
  t.bits = (b1 << 20) | (b2 << 9) | b3;
  t.ties = need;
  return t;
}

Result<bool> SelectTopByCandidates(const float* x, std::size_t d, std::size_t r, uint32_t* work,
                                   std::size_t work_words, uint32_t* histograms) {
  if (r == 0 || d < (std::size_t{1} << 16) || r > d / 16) return false;
  // Sample: every stride-th coordinate. With np = r * samples / d expected
  // sample points above the true threshold, the bound is the sample's
  // (np + 3 sqrt(np) + 4)-th largest: about r (1 + 3 / sqrt(np)) candidates,
  // fewer than r with probability ~0.1% (then the caller's path runs).
  constexpr std::size_t kMaxSamples = std::size_t{1} << 15;
  const std::size_t samples = work_words < kMaxSamples ? work_words : kMaxSamples;
  const std::size_t cap = work_words / 2;
  if (samples < 1024 || cap < r) return false;
  const std::size_t stride = d / samples;
  for (std::size_t j = 0; j < samples; ++j) {
    std::memcpy(&work[j], x + j * stride, 4);
    work[j] &= 0x7fffffffu;
  }
  const double expected = static_cast<double>(r) * static_cast<double>(samples) / static_cast<double>(d);
  std::size_t rank = static_cast<std::size_t>(expected + 3.0 * std::sqrt(expected)) + 4;
  // Skip the pass when the bound would probably admit more than fit.
  if (rank >= samples || static_cast<double>(rank) * static_cast<double>(d) / static_cast<double>(samples) >
                             static_cast<double>(cap)) {
    return false;
  }
  std::nth_element(work, work + rank, work + samples, std::greater<uint32_t>());
  const uint32_t low = work[rank];
  if (low == 0) return false;  // mostly zeros: the bound would admit everything

  const SparseKernels& kernels = SparseKernelsFor(ActiveIsa());
  uint32_t* idx = work;
  uint32_t* mag = work + cap;
  const std::size_t n = kernels.compact_at_least(x, d, 0, low, idx, mag, cap);
  if (n > cap || n < r) return false;
  // Every NaN or Inf is a candidate unless the bound itself is one (then
  // every candidate is), so this finds them if there are any.
  for (std::size_t j = 0; j < n; ++j) {
    if (mag[j] >= 0x7f800000u) {
      FEDRT_RETURN_IF_ERROR(CheckFinite(x, d));
    }
  }
  // Every coordinate with a magnitude >= the r-th largest is a candidate, in
  // index order: the candidates' own top r is the vector's.
  auto t = FindMagnitudeThreshold(reinterpret_cast<const float*>(mag), n, r, nullptr, 0, histograms);
  FEDRT_RETURN_IF_ERROR(t.status());
  std::size_t ties = t->ties;
  std::size_t out = 0;
  for (std::size_t j = 0; j < n; ++j) {  // branch-free, in place (out <= j)
    const uint32_t m = mag[j];
    const bool tie = m == t->bits;
    const bool take = m > t->bits || (tie && ties > 0);
    idx[out] = idx[j];
    out += take ? 1 : 0;
    ties -= (take && tie) ? 1 : 0;
  }
  return out == r;
}

void CollectTop(const float* x, std::size_t d, MagnitudeThreshold threshold, uint32_t* out) {
  std::size_t ties = threshold.ties;
  SparseKernelsFor(ActiveIsa()).collect_above(x, d, 0, threshold.bits, &ties, out);
}

SubsetSampler::SubsetSampler(const RandomStream& stream, std::size_t n, std::size_t k)
    : stream_(stream), n_(n), k_(k) {
  stream_.purpose = RandomPurpose::kRandomSubset;
}

bool SubsetSampler::Take() {
  if (taken_ == k_) {
    ++j_;
    return false;
  }
  if (j_ - buffered_from_ >= buffered_) {
    buffered_from_ = j_;
    buffered_ = n_ - j_ < kWords ? n_ - j_ : kWords;
    PhiloxWords(stream_, j_, buffered_, words_);
  }
  const uint64_t word = words_[j_ - buffered_from_];
  const bool take = word * (n_ - j_) < (uint64_t{k_ - taken_} << 32);
  ++j_;
  if (take) ++taken_;
  return take;
}

}  // namespace codec_internal
}  // namespace fedrt
