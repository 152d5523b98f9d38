// AVX-512 Philox4x32-10 kernels (philox_avx512.h): 32 blocks per iteration
// (four independent sets of eight), then sets of eight; fewer than eight
// blocks at the end go through one set on the stack.
#include "philox/philox_avx512.h"

#include <cstring>

namespace fedrt::avx512 {
namespace {

// Hands every eight blocks of [first_block, first_block + blocks) to
// sink(at, eight), `at` counted from first_block, and the last 1..7 blocks
// (if any) to tail(at, eight, count).
template <typename Sink, typename Tail>
inline void ForBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                      std::size_t blocks, Sink sink, Tail tail) {
  const PhiloxCall call(key, c1, c2, c3);
  ForBlockSets<4, 8, EightBlocks>(
      first_block, blocks,
      [&call](auto sets, uint32_t block, EightBlocks* out) { PhiloxSets<decltype(sets)::value>(call, block, out); },
      sink, tail);
}

// Copies the first `count` blocks of `eight` (as T values, 4 per block).
template <typename T, typename Convert>
inline void StorePartial(EightBlocks eight, std::size_t count, Convert convert, T* out) {
  alignas(64) T values[32];
  convert(eight, values);
  std::memcpy(out, values, 4 * count * sizeof(T));
}

inline void StoreWords(EightBlocks eight, uint32_t* dst) {
  _mm512_storeu_si512(dst, eight.first);
  _mm512_storeu_si512(dst + 16, eight.second);
}

inline void StoreDither(EightBlocks eight, float* dst) {
  _mm512_storeu_ps(dst, PhiloxDitherOf(eight.first));
  _mm512_storeu_ps(dst + 16, PhiloxDitherOf(eight.second));
}

}  // namespace

void PhiloxBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                  std::size_t blocks, uint32_t* out) {
  ForBlocks(
      key, first_block, c1, c2, c3, blocks,
      [out](std::size_t at, EightBlocks eight) { StoreWords(eight, out + 4 * at); },
      [out](std::size_t at, EightBlocks eight, std::size_t count) {
        StorePartial(eight, count, StoreWords, out + 4 * at);
      });
}

void PhiloxDitherBlocks(PhiloxKey key, uint32_t first_block, uint32_t c1, uint32_t c2, uint32_t c3,
                        std::size_t blocks, float* out) {
  ForBlocks(
      key, first_block, c1, c2, c3, blocks,
      [out](std::size_t at, EightBlocks eight) { StoreDither(eight, out + 4 * at); },
      [out](std::size_t at, EightBlocks eight, std::size_t count) {
        StorePartial(eight, count, StoreDither, out + 4 * at);
      });
}

}  // namespace fedrt::avx512
