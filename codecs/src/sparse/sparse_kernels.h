// Sparsifier kernel family: the passes over the whole vector that magnitude
// selection needs. This file is the family's list: dispatch (sparse_select.cc),
// the tests and the benchmarks all go through SparseKernelsFor().
//
// Magnitudes are compared as the bit patterns of |x| (the float with its sign
// bit cleared, read as uint32): for finite floats that order is the numeric
// order of |x|, so every variant selects exactly the same coordinates. NaN
// and Inf have patterns >= 0x7f800000 and land in histogram bins >= 2040,
// which the caller checks.
//
// MagnitudeHistogram  hist[m >> 20] += 1 for every coordinate (2048 bins).
//                     hist holds 4 * 2048 words, the last 3 * 2048 zero on
//                     entry: sub-histograms that leave the stack small
//                     (unspecified on return).
// PrefixHistogram     for coordinates with (m >> (shift + width)) == prefix:
//                     hist[(m >> shift) & (2^width - 1)] += 1.
// HistogramAbove      hist[m >> 20] += 1 for coordinates with m >= low.
// ValuesInBin         appends m for coordinates with m >> 20 == bin; returns
//                     the count (the caller guarantees the room).
// CollectAbove        in index order, appends base + i for every coordinate
//                     with m > threshold, and for the first *ties coordinates
//                     with m == threshold (decrementing *ties); returns the
//                     count written to out (the caller guarantees the room).
// CompactAtLeast      in index order, writes base + i to idx and m to mag for
//                     every coordinate with m >= low; returns the count, or
//                     cap + 1 as soon as more than cap coordinates match
//                     (then idx/mag hold unspecified values). Writes only
//                     idx[0..cap) and mag[0..cap).
// All: any n (tails inside), any alignment, read only x[0..n).
#ifndef FEDRT_CODECS_SPARSE_SPARSE_KERNELS_H_
#define FEDRT_CODECS_SPARSE_SPARSE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/platform/cpu.h"

namespace fedrt {

inline constexpr int kMagnitudeTopBits = 11;  // first pass: bits 30..20
inline constexpr std::size_t kMagnitudeBins = std::size_t{1} << kMagnitudeTopBits;

struct SparseKernels {
  void (*magnitude_histogram)(const float* x, std::size_t n, uint32_t* hist);
  void (*prefix_histogram)(const float* x, std::size_t n, uint32_t prefix, int shift, int width,
                           uint32_t* hist);
  void (*histogram_above)(const float* x, std::size_t n, uint32_t low, uint32_t* hist);
  std::size_t (*values_in_bin)(const float* x, std::size_t n, uint32_t bin, uint32_t* out);
  std::size_t (*collect_above)(const float* x, std::size_t n, uint32_t base, uint32_t threshold,
                               std::size_t* ties, uint32_t* out);
  std::size_t (*compact_at_least)(const float* x, std::size_t n, uint32_t base, uint32_t low, uint32_t* idx,
                                  uint32_t* mag, std::size_t cap);
};

#define FEDRT_SPARSE_KERNEL_DECLS                                                                  \
  void MagnitudeHistogram(const float* x, std::size_t n, uint32_t* hist);                          \
  void PrefixHistogram(const float* x, std::size_t n, uint32_t prefix, int shift, int width,       \
                       uint32_t* hist);                                                            \
  void HistogramAbove(const float* x, std::size_t n, uint32_t low, uint32_t* hist);                \
  std::size_t ValuesInBin(const float* x, std::size_t n, uint32_t bin, uint32_t* out);             \
  std::size_t CollectAbove(const float* x, std::size_t n, uint32_t base, uint32_t threshold,       \
                           std::size_t* ties, uint32_t* out);                                      \
  std::size_t CompactAtLeast(const float* x, std::size_t n, uint32_t base, uint32_t low, uint32_t* idx,   \
                             uint32_t* mag, std::size_t cap);

namespace scalar {
FEDRT_SPARSE_KERNEL_DECLS
}
namespace avx2 {
FEDRT_SPARSE_KERNEL_DECLS
}
namespace neon {
FEDRT_SPARSE_KERNEL_DECLS
}
#undef FEDRT_SPARSE_KERNEL_DECLS

// The variant for `isa` (which must be available, see IsaAvailable()).
const SparseKernels& SparseKernelsFor(Isa isa);

}  // namespace fedrt

#endif  // FEDRT_CODECS_SPARSE_SPARSE_KERNELS_H_
