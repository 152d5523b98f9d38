// AVX2 Philox4x32-10 kernels (philox_avx2.h): twelve blocks per iteration
// (three independent sets of four), then sets of four; fewer than four
// blocks at the end go through one set on the stack.
#include "philox/philox_avx2.h"

#include <cstring>

namespace fedrt::avx2 {
namespace {

// Hands every four blocks of [first_block, first_block + blocks) to
// sink(at, four), `at` counted from first_block, and the last 1..3 blocks
// (if any) to tail(at, four, count).
template <typename Sink, typename Tail>
inline void ForBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                      std::size_t blocks, Sink sink, Tail tail) {
  const PhiloxCall call(key, c1, c2, c3);
  ForBlockSets<3, 4, FourBlocks>(
      first_block, blocks,
      [&call](auto sets, uint32_t block, FourBlocks* out) { PhiloxSets<decltype(sets)::value>(call, block, out); },
      sink, tail);
}

// Copies the first `count` blocks of `four` (as T values, 4 per block).
template <typename T, typename Convert>
inline void StorePartial(FourBlocks four, std::size_t count, Convert convert, T* out) {
  alignas(32) T values[16];
  convert(four, values);
  std::memcpy(out, values, 4 * count * sizeof(T));
}

inline void StoreWords(FourBlocks four, uint32_t* dst) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), four.first);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8), four.second);
}

inline void StoreDither(FourBlocks four, float* dst) {
  _mm256_storeu_ps(dst, PhiloxDitherOf(four.first));
  _mm256_storeu_ps(dst + 8, PhiloxDitherOf(four.second));
}

}  // namespace

void PhiloxBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                  std::size_t blocks, uint32_t* out) {
  ForBlocks(
      key, first_block, c1, c2, c3, blocks, [out](std::size_t at, FourBlocks four) { StoreWords(four, out + 4 * at); },
      [out](std::size_t at, FourBlocks four, std::size_t count) {
        StorePartial(four, count, StoreWords, out + 4 * at);
      });
}

void PhiloxDitherBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                        std::size_t blocks, float* out) {
  ForBlocks(
      key, first_block, c1, c2, c3, blocks, [out](std::size_t at, FourBlocks four) { StoreDither(four, out + 4 * at); },
      [out](std::size_t at, FourBlocks four, std::size_t count) {
        StorePartial(four, count, StoreDither, out + 4 * at);
      });
}

}  // namespace fedrt::avx2
