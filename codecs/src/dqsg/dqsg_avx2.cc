// AVX2 DQSG / NDQSG kernels: eight coordinates per vector, 32 per iteration
// for the kernels that write symbols (four vectors packed to bytes at once).
// Division is _mm256_div_ps (correctly rounded, like the scalar '/'), rounding
// _mm256_round_ps(_MM_FROUND_TO_NEAREST_INT), no FMA: every value equals the
// scalar reference bit for bit, subnormals included (MXCSR defaults: no
// FTZ/DAZ). Tails (fewer than one iteration): the scalar kernels. The
// dither_* kernels make the dither in registers (philox_avx2.h; its one FMA is
// exact) and use it in the same loop.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "dqsg/dqsg_kernels.h"
#include "philox/philox_avx2.h"

namespace fedrt::avx2 {
namespace {

inline __m256 Round(__m256 x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

// Stores 32 symbols given as four vectors of int32 lanes in [0, 255].
inline void Store32(__m256i a, __m256i b, __m256i c, __m256i d, uint8_t* out) {
  // packs/packus interleave 128-bit lanes; the permute restores the order.
  const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// Stores 16 symbols given as two vectors of int32 lanes in [0, 255].
inline void Store16(__m256i a, __m256i b, uint8_t* out) {
  // packs interleaves 128-bit lanes (a0-3 b0-3 | a4-7 b4-7); the permute restores the order.
  const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1)));
}

// Writes 32 symbols per iteration from `eight(i)`, which returns symbols
// i..i+7 as int32 lanes in [0, 255]. Returns how many were written.
template <typename Eight>
inline std::size_t StoreSymbols32(std::size_t n, uint8_t* out, Eight eight) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) Store32(eight(i), eight(i + 8), eight(i + 16), eight(i + 24), out + i);
  return i;
}

// DQSG symbols of eight coordinates: clamp(round(w / scale + u), -s, s) + s.
class QuantizeEight {
 public:
  QuantizeEight(float scale, int s)
      : scale_(_mm256_set1_ps(scale)),
        hi_(_mm256_set1_ps(static_cast<float>(s))),
        lo_(_mm256_set1_ps(-static_cast<float>(s))),
        offset_(_mm256_set1_epi32(s)) {}
  __m256i operator()(__m256 w, __m256 u) const {
    const __m256 t = _mm256_add_ps(_mm256_div_ps(w, scale_), u);
    const __m256 q = _mm256_min_ps(_mm256_max_ps(Round(t), lo_), hi_);
    return _mm256_add_epi32(_mm256_cvtps_epi32(q), offset_);
  }

 private:
  __m256 scale_, hi_, lo_;
  __m256i offset_;
};

// Sets of four Philox blocks per step of the fused dither kernels: an even
// number, so that a step covers whole 32-symbol stores.
constexpr int kDitherSets = 4;
constexpr int kDitherVectors = 2 * kDitherSets;
constexpr uintptr_t kPrefetchBytes = 4096;

// Symbols i..i+7 minus `offset`, as floats (exact: small integers).
inline __m256 LoadLevels(const uint8_t* symbols, __m256i offset) {
  const __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(symbols)));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(q, offset));
}

}  // namespace

float MaxAbs(const float* w, std::size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i best = _mm256_setzero_si256();
  std::size_t i = 0;
  // Two cache lines per iteration, the lines 4 KB ahead prefetched (the
  // vector is read once, from DRAM when large).
  for (; i + 32 <= n; i += 32) {
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(w + i) + kPrefetchBytes;
    _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(ahead + 64), _MM_HINT_T0);
    __m256i pair[2];
    for (int k = 0; k < 2; ++k) {
      pair[k] = _mm256_max_epu32(
          _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(w + i + 16 * k)), abs_mask),
          _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(w + i + 16 * k + 8)), abs_mask));
    }
    best = _mm256_max_epu32(best, _mm256_max_epu32(pair[0], pair[1]));
  }
  for (; i + 8 <= n; i += 8) {
    best = _mm256_max_epu32(best, _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(w + i)), abs_mask));
  }
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(best), _mm256_extracti128_si256(best, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
  const float vector_max = _mm_cvtss_f32(_mm_castsi128_ps(m));
  const float tail_max = scalar::MaxAbs(w + i, n - i);
  // Compare the bit patterns, as the reference does (a NaN must win too).
  const uint32_t vector_bits = static_cast<uint32_t>(_mm_cvtsi128_si32(m));
  uint32_t tail_bits;
  std::memcpy(&tail_bits, &tail_max, sizeof tail_bits);
  return tail_bits > vector_bits ? tail_max : vector_max;
}

void Quantize(const float* w, const float* u, std::size_t n, float scale, int s, uint8_t* symbols) {
  const QuantizeEight eight(scale, s);
  const std::size_t done = StoreSymbols32(
      n, symbols, [&](std::size_t i) { return eight(_mm256_loadu_ps(w + i), _mm256_loadu_ps(u + i)); });
  scalar::Quantize(w + done, u + done, n - done, scale, s, symbols + done);
}

void DitherQuantize(const RandomStream& dither, uint64_t first, const float* w, std::size_t n, float scale, int s,
                    uint8_t* symbols) {
  const QuantizeEight eight(scale, s);
  WithDither<kDitherSets>(
      dither, first, n,
      [&](std::size_t i, const __m256* u) {
        // The input of a later step, 4 KB ahead (an address only: prefetches
        // past the end are harmless); measured to help from 2^24 floats on.
        const uintptr_t ahead = reinterpret_cast<uintptr_t>(w + i) + kPrefetchBytes;
        for (int line = 0; line < kDitherVectors / 2; ++line) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * static_cast<uintptr_t>(line)), _MM_HINT_T0);
        }
        int v = 0;
        for (; v + 4 <= kDitherVectors; v += 4) {
          const float* x = w + i + 8 * v;
          Store32(eight(_mm256_loadu_ps(x), u[v]), eight(_mm256_loadu_ps(x + 8), u[v + 1]),
                  eight(_mm256_loadu_ps(x + 16), u[v + 2]), eight(_mm256_loadu_ps(x + 24), u[v + 3]),
                  symbols + i + 8 * v);
        }
        if (v < kDitherVectors) {
          const float* x = w + i + 8 * v;
          Store16(eight(_mm256_loadu_ps(x), u[v]), eight(_mm256_loadu_ps(x + 8), u[v + 1]), symbols + i + 8 * v);
        }
      },
      [&](std::size_t i, std::size_t count, const float* u) { Quantize(w + i, u, count, scale, s, symbols + i); });
}

void Dequantize(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s, float* out) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  const __m256i offset = _mm256_set1_epi32(s);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 q = LoadLevels(symbols + i, offset);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_sub_ps(q, _mm256_loadu_ps(u + i)), scale_v));
  }
  scalar::Dequantize(symbols + i, u + i, n - i, scale, s, out + i);
}

void DequantizeAccumulate(const uint8_t* symbols, const float* u, std::size_t n, float scale, int s,
                          float weight, float* acc) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  const __m256 weight_v = _mm256_set1_ps(weight);
  const __m256i offset = _mm256_set1_epi32(s);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 q = LoadLevels(symbols + i, offset);
    const __m256 value = _mm256_mul_ps(_mm256_sub_ps(q, _mm256_loadu_ps(u + i)), scale_v);
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(weight_v, value)));
  }
  scalar::DequantizeAccumulate(symbols + i, u + i, n - i, scale, s, weight, acc + i);
}

namespace {

// The fused decoders: w' = (float(symbol - s) - u) * scale of eight
// coordinates at a time to emit(i, w'), the rest (dither in memory) to plain.
template <typename Emit, typename Plain>
inline void DitherDecoded(const RandomStream& dither, uint64_t first, const uint8_t* symbols, std::size_t n,
                          float scale, int s, Emit emit, Plain plain) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  const __m256i offset = _mm256_set1_epi32(s);
  WithDither<kDitherSets>(
      dither, first, n,
      [&](std::size_t i, const __m256* u) {
        for (int v = 0; v < kDitherVectors; ++v) {
          const __m256 q = LoadLevels(symbols + i + 8 * v, offset);
          emit(i + 8 * static_cast<std::size_t>(v), _mm256_mul_ps(_mm256_sub_ps(q, u[v]), scale_v));
        }
      },
      plain);
}

}  // namespace

void DitherDequantize(const RandomStream& dither, uint64_t first, const uint8_t* symbols, std::size_t n, float scale,
                      int s, float* out) {
  DitherDecoded(
      dither, first, symbols, n, scale, s, [out](std::size_t i, __m256 value) { _mm256_storeu_ps(out + i, value); },
      [&](std::size_t i, std::size_t count, const float* u) {
        Dequantize(symbols + i, u, count, scale, s, out + i);
      });
}

void DitherDequantizeAccumulate(const RandomStream& dither, uint64_t first, const uint8_t* symbols, std::size_t n,
                                float scale, int s, float weight, float* acc) {
  const __m256 weight_v = _mm256_set1_ps(weight);
  DitherDecoded(
      dither, first, symbols, n, scale, s,
      [&](std::size_t i, __m256 value) {
        _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(weight_v, value)));
      },
      [&](std::size_t i, std::size_t count, const float* u) {
        DequantizeAccumulate(symbols + i, u, count, scale, s, weight, acc + i);
      });
}

void NestedQuantize(const float* w, const float* u, std::size_t n, float scale, int s1, int rho,
                    uint8_t* symbols) {
  if (rho % 2 == 0) return scalar::NestedQuantize(w, u, n, scale, s1, rho, symbols);  // even rho: scalar
  const __m256 scale_v = _mm256_set1_ps(scale);
  const __m256 hi = _mm256_set1_ps(static_cast<float>(s1));
  const __m256 lo = _mm256_set1_ps(-static_cast<float>(s1));
  const __m256 rho_v = _mm256_set1_ps(static_cast<float>(rho));
  const __m256i offset = _mm256_set1_epi32((rho - 1) / 2);
  const std::size_t done = StoreSymbols32(n, symbols, [&](std::size_t i) {
    const __m256 t = _mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(w + i), scale_v), _mm256_loadu_ps(u + i));
    const __m256 fine = _mm256_min_ps(_mm256_max_ps(Round(t), lo), hi);
    const __m256 q = _mm256_sub_ps(fine, _mm256_mul_ps(rho_v, Round(_mm256_div_ps(fine, rho_v))));
    return _mm256_add_epi32(_mm256_cvtps_epi32(q), offset);
  });
  scalar::NestedQuantize(w + done, u + done, n - done, scale, s1, rho, symbols + done);
}

void NestedDequantize(const uint8_t* symbols, const float* u, const float* y, std::size_t n, float scale,
                      int rho, float* out) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  const __m256 rho_v = _mm256_set1_ps(static_cast<float>(rho));
  const __m256 d2 = _mm256_set1_ps(static_cast<float>(rho) * scale);
  const __m256i offset = _mm256_set1_epi32((rho - 1) / 2);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 q = LoadLevels(symbols + i, offset);
    const __m256 u_v = _mm256_loadu_ps(u + i);
    const __m256 a = _mm256_mul_ps(_mm256_sub_ps(q, u_v), scale_v);
    const __m256 m = Round(_mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(y + i), a), d2));
    const __m256 fine = _mm256_add_ps(q, _mm256_mul_ps(rho_v, m));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_sub_ps(fine, u_v), scale_v));
  }
  scalar::NestedDequantize(symbols + i, u + i, y + i, n - i, scale, rho, out + i);
}

}  // namespace fedrt::avx2
