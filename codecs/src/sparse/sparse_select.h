// Selection for the sparsifiers (codecs/README.md). Internal
// to fedrt_codecs.
//
// Top-r by magnitude in O(d), never a sort: a radix select on the bit
// patterns of |x| (histogram passes on bits 30..20, 19..9, 8..0) finds the
// r-th largest magnitude T exactly. For large vectors the first pass counts
// only coordinates above a lower bound taken from a strided sample, and with
// working space the last two passes become a selection among the values of
// T's first-pass bin; a final pass collects, in index
// order, every coordinate with |x| > T and then as many with |x| == T as are
// still needed. Tie rule: among equal magnitudes the LOWER INDEX wins. The
// result is the set of the r largest magnitudes, already sorted by index.
//
// Uniform k-of-n subsets: selection sampling (Knuth's algorithm S) driven by
// Philox words of purpose kRandomSubset: candidate j (0-based, in index
// order) is taken iff word_j * (n - j) < (k - taken) * 2^32, compared
// exactly in 64-bit integers. It takes exactly k candidates, each k-subset
// with probability equal up to the 2^-32 resolution of the words, in index
// order, and both ends of a transfer regenerate it from the shared seed.
#ifndef FEDRT_CODECS_SPARSE_SPARSE_SELECT_H_
#define FEDRT_CODECS_SPARSE_SPARSE_SELECT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fedrt/codecs/philox.h"
#include "fedrt/platform/status.h"
#include "sparse/sparse_kernels.h"

namespace fedrt::codec_internal {

// The magnitude bit pattern of the r-th largest |x| and how many coordinates
// with exactly that magnitude belong to the top r (lowest indices first).
struct MagnitudeThreshold {
  uint32_t bits = 0xffffffffu;  // nothing is above this
  std::size_t ties = 0;
};

// Words of `histograms` working space the selection needs (the histograms
// of the three passes and the sample): 32 KB, whatever d.
inline constexpr std::size_t kSelectWorkspaceWords = 4 * kMagnitudeBins;

// kInvalidArgument (naming the coordinate) when x holds NaN or Inf. r <= d.
// Optional working space (scratch_size uint32) lets large vectors skip two
// passes: the values of the bin holding T are gathered and selected there.
// `histograms` (kSelectWorkspaceWords, any content) keeps the stack small;
// without it the call allocates them.
Result<MagnitudeThreshold> FindMagnitudeThreshold(const float* x, std::size_t d, std::size_t r,
                                                  uint32_t* scratch = nullptr, std::size_t scratch_size = 0,
                                                  uint32_t* histograms = nullptr);

// The top r in one pass over x, for large vectors and small r (d >= 2^16,
// 0 < r <= d / 16): a lower bound for the r-th largest magnitude is estimated
// from a strided sample (sorted in `work`), every coordinate at or above it is
// compacted into `work` (index and magnitude, so work_words / 2 candidates
// fit), and the exact threshold and ties are selected among the candidates.
// On success returns true with the top-r indices, in index order and with the
// tie rule above, in work[0..r). Returns false when it does not apply (vector
// too small, r too large, the bound admitted fewer than r or more candidates
// than fit); the caller then uses FindMagnitudeThreshold + CollectTop, which
// choose the same set. kInvalidArgument as FindMagnitudeThreshold.
Result<bool> SelectTopByCandidates(const float* x, std::size_t d, std::size_t r, uint32_t* work,
                                   std::size_t work_words, uint32_t* histograms = nullptr);

// Writes the indices of the top r (as chosen by `threshold`) to out[0..r).
void CollectTop(const float* x, std::size_t d, MagnitudeThreshold threshold, uint32_t* out);

// Calls sink(const uint32_t* indices, std::size_t n) with the top-r indices
// in index order, a chunk at a time (no memory beyond a stack chunk).
template <typename Sink>
void ForEachTop(const float* x, std::size_t d, MagnitudeThreshold threshold, Sink sink) {
  constexpr std::size_t kChunk = 256;  // 1 KB of stack
  const SparseKernels& kernels = SparseKernelsFor(ActiveIsa());
  uint32_t chunk[kChunk];
  std::size_t ties = threshold.ties;
  for (std::size_t at = 0; at < d; at += kChunk) {
    const std::size_t n = d - at < kChunk ? d - at : kChunk;
    const std::size_t got =
        kernels.collect_above(x + at, n, static_cast<uint32_t>(at), threshold.bits, &ties, chunk);
    if (got > 0) sink(chunk, got);
  }
}

// Selection sampling of k out of n candidates (see above), fed candidate by
// candidate in order.
class SubsetSampler {
 public:
  SubsetSampler(const RandomStream& stream, std::size_t n, std::size_t k);
  // Whether candidate j (the next one, in order) is taken.
  bool Take();
  bool Done() const { return taken_ == k_; }
  std::size_t taken() const { return taken_; }

 private:
  static constexpr std::size_t kWords = 256;
  RandomStream stream_;
  std::size_t n_, k_;
  std::size_t j_ = 0, taken_ = 0;
  std::size_t buffered_from_ = 0, buffered_ = 0;
  uint32_t words_[kWords];
};

}  // namespace fedrt::codec_internal

#endif  // FEDRT_CODECS_SPARSE_SPARSE_SELECT_H_
