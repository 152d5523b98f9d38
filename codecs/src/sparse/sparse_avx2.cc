// AVX2 sparsifier kernels (see sparse_kernels.h). Integer compares on the
// magnitude bit patterns, so the selection equals the scalar reference's.
// Histogram: bins computed eight at a time, counted in four sub-histograms.
// Filters (prefix histogram, collect): eight coordinates per compare; the
// rare blocks with a match are finished lane by lane in index order.
// Compaction: branch-free compress-store, eight lanes per step (a
// permutation per 8-bit match mask from a table, a full-width store, and the
// count advanced by the mask's popcount).
// Tails (< 8 coordinates): the scalar kernels.
#include <immintrin.h>

#include <cstring>

#include "sparse/sparse_kernels.h"

namespace fedrt::avx2 {
namespace {

// For every 8-bit mask: the lanes whose bit is set, in order, then zeros;
// and the number of set bits.
struct CompressTable {
  uint32_t lanes[256][8];
  uint32_t count[256];
};

constexpr CompressTable MakeCompressTable() {
  CompressTable t{};
  for (uint32_t mask = 0; mask < 256; ++mask) {
    uint32_t n = 0;
    for (uint32_t lane = 0; lane < 8; ++lane) {
      if ((mask >> lane) & 1u) t.lanes[mask][n++] = lane;
    }
    t.count[mask] = n;
  }
  return t;
}

constexpr CompressTable kCompress = MakeCompressTable();

}  // namespace

void MagnitudeHistogram(const float* x, std::size_t n, uint32_t* hist) {
  uint32_t* sub[3] = {hist + kMagnitudeBins, hist + 2 * kMagnitudeBins, hist + 3 * kMagnitudeBins};
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  alignas(32) uint32_t bins[8];
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i m = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask);
    _mm256_store_si256(reinterpret_cast<__m256i*>(bins), _mm256_srli_epi32(m, 20));
    ++hist[bins[0]];
    ++sub[0][bins[1]];
    ++sub[1][bins[2]];
    ++sub[2][bins[3]];
    ++hist[bins[4]];
    ++sub[0][bins[5]];
    ++sub[1][bins[6]];
    ++sub[2][bins[7]];
  }
  for (; i < n; ++i) {  // tail (the scalar kernel would reuse the sub-histograms)
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    ++hist[(bits & 0x7fffffffu) >> 20];
  }
  for (std::size_t b = 0; b < kMagnitudeBins; ++b) hist[b] += sub[0][b] + sub[1][b] + sub[2][b];
}

void PrefixHistogram(const float* x, std::size_t n, uint32_t prefix, int shift, int width, uint32_t* hist) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i want = _mm256_set1_epi32(static_cast<int>(prefix));
  const __m128i prefix_shift = _mm_cvtsi32_si128(shift + width);
  const uint32_t mask = (1u << width) - 1;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i m = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask);
    const __m256i hit = _mm256_cmpeq_epi32(_mm256_srl_epi32(m, prefix_shift), want);
    int bits = _mm256_movemask_ps(_mm256_castsi256_ps(hit));
    if (bits == 0) continue;
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), m);
    while (bits != 0) {
      const int lane = __builtin_ctz(static_cast<unsigned>(bits));
      ++hist[(lanes[lane] >> shift) & mask];
      bits &= bits - 1;
    }
  }
  scalar::PrefixHistogram(x + i, n - i, prefix, shift, width, hist);
}

void HistogramAbove(const float* x, std::size_t n, uint32_t low, uint32_t* hist) {
  if (low > 0x7fffffffu) return;  // keeps the signed compare exact
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i below = _mm256_set1_epi32(static_cast<int>(low) - 1);
  std::size_t i = 0;
  if (low > 0) {
    for (; i + 8 <= n; i += 8) {
      const __m256i m = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask);
      int bits = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(m, below)));
      if (bits == 0) continue;
      alignas(32) uint32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), m);
      while (bits != 0) {
        ++hist[lanes[__builtin_ctz(static_cast<unsigned>(bits))] >> 20];
        bits &= bits - 1;
      }
    }
  }
  scalar::HistogramAbove(x + i, n - i, low, hist);
}

std::size_t ValuesInBin(const float* x, std::size_t n, uint32_t bin, uint32_t* out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i want = _mm256_set1_epi32(static_cast<int>(bin));
  std::size_t count = 0;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i m = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask);
    int bits = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_srli_epi32(m, 20), want)));
    if (bits == 0) continue;
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), m);
    while (bits != 0) {
      out[count++] = lanes[__builtin_ctz(static_cast<unsigned>(bits))];
      bits &= bits - 1;
    }
  }
  return count + scalar::ValuesInBin(x + i, n - i, bin, out + count);
}

std::size_t CollectAbove(const float* x, std::size_t n, uint32_t base, uint32_t threshold, std::size_t* ties,
                         uint32_t* out) {
  // No magnitude pattern exceeds 0x7fffffff; this also keeps the signed compares below exact.
  if (threshold > 0x7fffffffu) return 0;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i t = _mm256_set1_epi32(static_cast<int>(threshold));
  std::size_t count = 0;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i m = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask);
    int gt = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(m, t)));
    const int eq = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(m, t)));
    if (eq != 0 && *ties > 0) {
      count += scalar::CollectAbove(x + i, 8, base + static_cast<uint32_t>(i), threshold, ties, out + count);
      continue;
    }
    while (gt != 0) {
      out[count++] = base + static_cast<uint32_t>(i) + static_cast<uint32_t>(__builtin_ctz(static_cast<unsigned>(gt)));
      gt &= gt - 1;
    }
  }
  return count + scalar::CollectAbove(x + i, n - i, base + static_cast<uint32_t>(i), threshold, ties, out + count);
}

std::size_t CompactAtLeast(const float* x, std::size_t n, uint32_t base, uint32_t low, uint32_t* idx, uint32_t* mag,
                           std::size_t cap) {
  if (low > 0x7fffffffu) return 0;  // no magnitude pattern reaches it
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  // m >= low as m > low - 1, exact in signed 32-bit: both sides in [-1, 2^31).
  const __m256i below = _mm256_set1_epi32(static_cast<int>(low) - 1);
  const __m256i step = _mm256_set1_epi32(8);
  __m256i index = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(base)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  std::size_t count = 0;
  std::size_t i = 0;
  for (; i + 8 <= n && count + 8 <= cap; i += 8) {
    const __m256i m = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask);
    const unsigned bits = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(m, below))));
    const __m256i permute = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kCompress.lanes[bits]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(mag + count), _mm256_permutevar8x32_epi32(m, permute));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + count), _mm256_permutevar8x32_epi32(index, permute));
    count += kCompress.count[bits];
    index = _mm256_add_epi32(index, step);
  }
  const std::size_t rest =
      scalar::CompactAtLeast(x + i, n - i, base + static_cast<uint32_t>(i), low, idx + count, mag + count, cap - count);
  return rest > cap - count ? cap + 1 : count + rest;
}

}  // namespace fedrt::avx2
