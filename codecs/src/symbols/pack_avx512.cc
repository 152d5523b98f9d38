// AVX-512 fixed-length unpacking (pack_kernels.h) with VBMI, 64 symbols per
// iteration; packing and the other cases are the AVX2 kernels'.
//
// Unpack, b = bits per symbol (1..7): eight symbols fill b bytes, so the 8b
// stream bytes of 64 symbols are loaded (masked: never past them), a byte
// permutation (vpermb) gives 64-bit lane j the b bytes of group j, and a
// multishift (vpmultishiftqb) moves symbol k of the lane, at bit k*b, to
// byte k; masking with 2^b - 1 leaves the symbol. The last count % 64
// symbols go to the scalar reference.
//
// VBMI is not part of the AVX-512 ISA level (F/BW/DQ/VL): these functions
// carry it as a target attribute and PackKernelsFor() picks them only on a CPU
// that has it (AvailableAvx512Vbmi()).
// GCC 12 reports its own AVX-512 intrinsics (their undefined pass-through
// operand) as (maybe-)uninitialized where they are inlined; off before the
// intrinsic headers are read, as in philox_avx512.h.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "symbols/pack_kernels.h"
#include "symbols/symbol_streams.h"

namespace fedrt::avx512 {

__attribute__((target("avx512vbmi"))) uint32_t UnpackSymbols(const uint8_t* stream, std::size_t count,
                                                              uint32_t alphabet, uint8_t* symbols) {
  const int b = codec_internal::PackedBits(alphabet);
  if (alphabet == 3 || b == 8 || b == 0) return avx2::UnpackSymbols(stream, count, alphabet, symbols);
  alignas(64) uint8_t permute[64];
  alignas(64) uint8_t shifts[64];
  for (int j = 0; j < 8; ++j) {
    for (int k = 0; k < 8; ++k) {
      permute[8 * j + k] = static_cast<uint8_t>(j * b + k);  // < 64; bytes past 8b are zero
      shifts[8 * j + k] = static_cast<uint8_t>(k * b);
    }
  }
  const __m512i permute_v = _mm512_load_si512(permute);
  const __m512i shifts_v = _mm512_load_si512(shifts);
  const __m512i mask = _mm512_set1_epi8(static_cast<char>((1 << b) - 1));
  const __mmask64 load = (__mmask64{1} << (8 * b)) - 1;
  __m512i largest = _mm512_setzero_si512();
  std::size_t i = 0;
  const uint8_t* src = stream;
  for (; i + 64 <= count; i += 64) {
    __m512i x = _mm512_maskz_loadu_epi8(load, src);
    x = _mm512_multishift_epi64_epi8(shifts_v, _mm512_permutexvar_epi8(permute_v, x));
    x = _mm512_and_si512(x, mask);
    largest = _mm512_max_epu8(largest, x);
    _mm512_storeu_si512(symbols + i, x);
    src += 8 * b;
  }
  // Bytes to 32-bit lanes: the 64 byte maxima folded to 16, then reduced.
  const __m256i half = _mm256_max_epu8(_mm512_castsi512_si256(largest), _mm512_extracti64x4_epi64(largest, 1));
  const __m128i quarter = _mm_max_epu8(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
  const uint32_t head = _mm512_reduce_max_epu32(_mm512_cvtepu8_epi32(quarter));
  const uint32_t rest = scalar::UnpackSymbols(src, count - i, alphabet, symbols + i);
  return rest > head ? rest : head;
}

}  // namespace fedrt::avx512
