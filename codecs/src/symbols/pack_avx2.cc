// AVX2 fixed-length packing (pack_kernels.h), 32 symbols per iteration.
//
// Pack, b = bits per symbol (1..7): pairs of bytes are merged into 16-bit
// lanes (lo | hi << b), pairs of those into 32-bit lanes (<< 2b), pairs of
// those into 64-bit lanes (<< 4b), so each 64-bit lane holds eight symbols in
// its low b bytes; a byte shuffle moves the 2b bytes of each 128-bit half to
// its front, and two 16-byte stores write them. Unpack runs the same steps
// backwards. The stores and loads cover 16 bytes of which 2b are wanted, so
// the vector loops stop when fewer than 2b + 16 bytes of stream remain; for
// packing the scalar reference finishes, rewriting any byte a vector store
// covered beyond its own; unpacking finishes with the vector step on a
// zero-padded copy of the last bytes. b = 8 is a copy.
//
// Base 3 (five trits per byte) uses 64-bit integer arithmetic, not vectors:
// Base3Byte() for packing, an 8-byte table lookup per byte for unpacking
// (both in pack_kernels.h), again leaving the last 16 symbols to the reference.
#include <immintrin.h>

#include <cstring>

#include "symbols/pack_kernels.h"
#include "symbols/symbol_streams.h"

namespace fedrt::avx2 {
namespace {

// Shuffle moving bytes [0, b) and [8, 8 + b) of each 128-bit half to [0, 2b).
__m256i CompactShuffle(int b) {
  alignas(32) int8_t bytes[32];
  for (int k = 0; k < 16; ++k) {
    const int8_t from = static_cast<int8_t>(k < b ? k : k < 2 * b ? 8 + (k - b) : -1);
    bytes[k] = bytes[16 + k] = from;
  }
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(bytes));
}

// The inverse: bytes [0, b) to [0, b) and [b, 2b) to [8, 8 + b), zeros elsewhere.
__m256i SpreadShuffle(int b) {
  alignas(32) int8_t bytes[32];
  for (int k = 0; k < 16; ++k) {
    const int8_t from = static_cast<int8_t>(k < b ? k : (k >= 8 && k < 8 + b) ? b + (k - 8) : -1);
    bytes[k] = bytes[16 + k] = from;
  }
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(bytes));
}

std::size_t PackBase3(const uint8_t* symbols, std::size_t count, uint8_t* out) {
  std::size_t g = 0;
  // Each step reads 8 bytes from 5 g: stop 16 symbols before the end.
  for (; 5 * g + 16 <= count; ++g) {
    uint64_t word;
    std::memcpy(&word, symbols + 5 * g, 8);
    out[g] = Base3Byte(word);
  }
  return 5 * g;
}

}  // namespace

void PackSymbols(const uint8_t* symbols, std::size_t count, uint32_t alphabet, uint8_t* out) {
  const int b = codec_internal::PackedBits(alphabet);
  if (alphabet == 3) {
    const std::size_t done = PackBase3(symbols, count, out);
    scalar::PackSymbols(symbols + done, count - done, alphabet, out + done / 5);
    return;
  }
  if (b == 8 || b == 0) {
    scalar::PackSymbols(symbols, count, alphabet, out);
    return;
  }
  const __m256i compact = CompactShuffle(b);
  const __m128i b1 = _mm_cvtsi32_si128(b), b2 = _mm_cvtsi32_si128(2 * b), b4 = _mm_cvtsi32_si128(4 * b);
  const __m256i low8 = _mm256_set1_epi16(0x00FF);
  const __m256i low16 = _mm256_set1_epi32(0x0000FFFF);
  const __m256i low32 = _mm256_set1_epi64x(0xFFFFFFFFll);
  std::size_t i = 0;
  uint8_t* dst = out;
  // The second store reaches dst + 2b + 16: stay inside the stream.
  const uint8_t* end = out + codec_internal::PackedStreamSize(count, alphabet);
  for (; i + 32 <= count && end - dst >= 2 * b + 16; i += 32) {
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(symbols + i));
    x = _mm256_or_si256(_mm256_and_si256(x, low8), _mm256_sll_epi16(_mm256_srli_epi16(x, 8), b1));
    x = _mm256_or_si256(_mm256_and_si256(x, low16), _mm256_sll_epi32(_mm256_srli_epi32(x, 16), b2));
    x = _mm256_or_si256(_mm256_and_si256(x, low32), _mm256_sll_epi64(_mm256_srli_epi64(x, 32), b4));
    x = _mm256_shuffle_epi8(x, compact);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(x));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * b), _mm256_extracti128_si256(x, 1));
    dst += 4 * b;
  }
  scalar::PackSymbols(symbols + i, count - i, alphabet, dst);
}

uint32_t UnpackSymbols(const uint8_t* stream, std::size_t count, uint32_t alphabet, uint8_t* symbols) {
  const int b = codec_internal::PackedBits(alphabet);
  if (alphabet == 3) return UnpackBase3ByTable(stream, count, symbols);
  if (b == 8 || b == 0) return scalar::UnpackSymbols(stream, count, alphabet, symbols);
  const __m256i spread = SpreadShuffle(b);
  const __m128i b1 = _mm_cvtsi32_si128(b), b2 = _mm_cvtsi32_si128(2 * b), b4 = _mm_cvtsi32_si128(4 * b);
  const __m256i mask_b = _mm256_set1_epi16(static_cast<int16_t>((1 << b) - 1));
  const __m256i mask_2b = _mm256_set1_epi32((1 << (2 * b)) - 1);
  const __m256i mask_4b = _mm256_set1_epi64x((int64_t{1} << (4 * b)) - 1);
  // 32 symbols from the 4b bytes at `src` (reading 2b + 16 of them).
  const auto thirty_two = [&](const uint8_t* src) {
    __m256i x = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * b)), 1);
    x = _mm256_shuffle_epi8(x, spread);
    x = _mm256_or_si256(_mm256_and_si256(x, mask_4b), _mm256_slli_epi64(_mm256_srl_epi64(x, b4), 32));
    x = _mm256_or_si256(_mm256_and_si256(x, mask_2b), _mm256_slli_epi32(_mm256_srl_epi32(x, b2), 16));
    return _mm256_or_si256(_mm256_and_si256(x, mask_b), _mm256_slli_epi16(_mm256_srl_epi16(x, b1), 8));
  };
  __m256i largest = _mm256_setzero_si256();
  std::size_t i = 0;
  const uint8_t* src = stream;
  // The second load reaches src + 2b + 16: stay inside the stream.
  const uint8_t* end = stream + codec_internal::PackedStreamSize(count, alphabet);
  for (; i + 32 <= count && end - src >= 2 * b + 16; i += 32) {
    const __m256i x = thirty_two(src);
    largest = _mm256_max_epu8(largest, x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(symbols + i), x);
    src += 4 * b;
  }
  // The last (at most two) steps from a zero-padded copy of the remaining
  // bytes; only their first count - i symbols are kept and counted, so the
  // padding bits of the last byte and the zeros after it never show.
  uint32_t rest = 0;
  const std::size_t load = static_cast<std::size_t>(2 * b + 16);
  for (; i < count; i += 32) {
    alignas(32) uint8_t bytes[32] = {}, out[32];
    const std::size_t avail = static_cast<std::size_t>(end - src);
    std::memcpy(bytes, src, avail < load ? avail : load);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), thirty_two(bytes));
    const std::size_t r = count - i < 32 ? count - i : 32;
    for (std::size_t k = 0; k < r; ++k) rest = out[k] > rest ? out[k] : rest;
    std::memcpy(symbols + i, out, r);
    src += 4 * b;
  }
  __m128i m = _mm_max_epu8(_mm256_castsi256_si128(largest), _mm256_extracti128_si256(largest, 1));
  m = _mm_max_epu8(m, _mm_srli_si128(m, 8));
  m = _mm_max_epu8(m, _mm_srli_si128(m, 4));
  m = _mm_max_epu8(m, _mm_srli_si128(m, 2));
  m = _mm_max_epu8(m, _mm_srli_si128(m, 1));
  const uint32_t head = static_cast<uint32_t>(_mm_cvtsi128_si32(m)) & 0xFFu;
  return rest > head ? rest : head;
}

bool CodesValid(const uint8_t* stream, std::size_t count, uint32_t alphabet) {
  const int b = codec_internal::PackedBits(alphabet);
  std::size_t i = 0;
  const uint8_t* src = stream;
  if (b == 3 || b == 4) {
    // Each 32-bit lane gets one group of eight codes (b bytes, codes at bits
    // k b). Even and odd codes are taken apart, so every code has b zero bits
    // above it; adding 2^b - alphabet carries into bit b of its slot iff the
    // code is >= alphabet.
    alignas(32) int8_t gather[32];
    for (int k = 0; k < 16; ++k) {
      const int group = k / 4, byte = k % 4;
      gather[k] = gather[16 + k] = static_cast<int8_t>(byte < b ? group * b + byte : -1);
    }
    const __m256i spread = _mm256_load_si256(reinterpret_cast<const __m256i*>(gather));
    uint32_t even = 0, add = 0, carry = 0;
    for (int j = 0; j < 4; ++j) {
      even |= ((1u << b) - 1) << (2 * j * b);
      add |= ((1u << b) - alphabet) << (2 * j * b);
      carry |= 1u << (2 * j * b + b);
    }
    const __m256i even_v = _mm256_set1_epi32(static_cast<int>(even));
    const __m256i add_v = _mm256_set1_epi32(static_cast<int>(add));
    const __m256i carry_v = _mm256_set1_epi32(static_cast<int>(carry));
    const __m128i shift = _mm_cvtsi32_si128(b);
    __m256i bad = _mm256_setzero_si256();
    const uint8_t* end = stream + codec_internal::PackedStreamSize(count, alphabet);
    // 64 codes (8b bytes) per step; the second load reaches src + 4b + 16.
    for (; i + 64 <= count && end - src >= 4 * b + 16; i += 64) {
      __m256i x = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 4 * b)), 1);
      x = _mm256_shuffle_epi8(x, spread);
      const __m256i lo = _mm256_add_epi32(_mm256_and_si256(x, even_v), add_v);
      const __m256i hi = _mm256_add_epi32(_mm256_and_si256(_mm256_srl_epi32(x, shift), even_v), add_v);
      bad = _mm256_or_si256(bad, _mm256_and_si256(_mm256_or_si256(lo, hi), carry_v));
      src += 8 * b;
    }
    if (!_mm256_testz_si256(bad, bad)) return false;
  }
  // The rest (everything for other widths) through unpack, a chunk at a time.
  alignas(32) uint8_t symbols[512];
  while (i < count) {
    const std::size_t n = count - i < sizeof symbols ? count - i : sizeof symbols;
    if (UnpackSymbols(src, n, alphabet, symbols) >= alphabet) return false;
    src += codec_internal::PackedStreamSize(n, alphabet);
    i += n;
  }
  return true;
}

}  // namespace fedrt::avx2
