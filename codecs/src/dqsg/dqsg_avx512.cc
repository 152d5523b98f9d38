// AVX-512 DQSG kernels (AVX-512F/BW/DQ/VL): max_abs and the fused dither_*
// kernels, sixteen coordinates per vector. The dither comes from the AVX-512
// Philox core (philox_avx512.h) in registers, 128 coordinates per step. The
// arithmetic is the AVX2 kernels' (dqsg_avx2.cc): correctly rounded
// division, no FMA; round half to even happens in the float-to-int
// conversion (embedded rounding), and the clamp to [-s, s] is done on the
// integers, which is the same as clamping the rounded float. Coordinates
// before the first block boundary and after the last whole step, and the
// kernels with the dither in memory, are the AVX2 kernels.
#include "philox/philox_avx512.h"  // first: it includes the intrinsics (see there)

#include <cstdint>
#include <cstring>

#include "dqsg/dqsg_kernels.h"

namespace fedrt::avx512 {
namespace {

// Sets of eight Philox blocks per step of the fused kernels (128 coordinates).
constexpr int kDitherSets = 4;
constexpr int kDitherVectors = 2 * kDitherSets;
constexpr uintptr_t kPrefetchBytes = 4096;

// DQSG symbols of sixteen coordinates: clamp(round(w / scale + u), -s, s) + s.
class QuantizeSixteen {
 public:
  QuantizeSixteen(float scale, int s)
      : scale_(_mm512_set1_ps(scale)), hi_(_mm512_set1_epi32(s)), lo_(_mm512_set1_epi32(-s)) {}
  __m128i operator()(__m512 w, __m512 u) const {
    const __m512 t = _mm512_add_ps(_mm512_div_ps(w, scale_), u);
    const __m512i q = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lo_), hi_), hi_));
  }

 private:
  __m512 scale_;
  __m512i hi_, lo_;
};

// Symbols i..i+15 minus `offset`, as floats (exact: small integers).
inline __m512 LoadLevels(const uint8_t* symbols, __m512i offset) {
  const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(symbols)));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(q, offset));
}

// The fused decoders: w' = (float(symbol - s) - u) * scale of sixteen
// coordinates at a time to emit(i, w'), the rest (dither in memory) to plain.
template <typename Emit, typename Plain>
inline void DitherDecoded(const RandomStream& dither, uint64_t first, const uint8_t* symbols, std::size_t n,
                          float scale, int s, Emit emit, Plain plain) {
  const __m512 scale_v = _mm512_set1_ps(scale);
  const __m512i offset = _mm512_set1_epi32(s);
  WithDither<kDitherSets>(
      dither, first, n,
      [&](std::size_t i, const __m512* u) {
        for (int v = 0; v < kDitherVectors; ++v) {
          const __m512 q = LoadLevels(symbols + i + 16 * v, offset);
          emit(i + 16 * static_cast<std::size_t>(v), _mm512_mul_ps(_mm512_sub_ps(q, u[v]), scale_v));
        }
      },
      plain);
}

}  // namespace

float MaxAbs(const float* w, std::size_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  // Four accumulators: 64 floats (four cache lines) per iteration, with the
  // lines 4 KB ahead prefetched (the vector is read once, from DRAM when
  // large; measured 10.6 -> 14 GB/s at 2^24 floats).
  __m512i best[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                     _mm512_setzero_si512()};
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(w + i) + kPrefetchBytes;
    for (int k = 0; k < 4; ++k) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * static_cast<uintptr_t>(k)), _MM_HINT_T0);

      best[k] = _mm512_max_epu32(best[k], _mm512_and_si512(_mm512_loadu_si512(w + i + 16 * k), abs_mask));
    }
  }
  for (; i + 16 <= n; i += 16) {
    best[0] = _mm512_max_epu32(best[0], _mm512_and_si512(_mm512_loadu_si512(w + i), abs_mask));
  }
  const uint32_t vector_bits =
      _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_max_epu32(best[0], best[1]), _mm512_max_epu32(best[2], best[3])));
  const float tail_max = scalar::MaxAbs(w + i, n - i);
  // Compare the bit patterns, as the reference does (a NaN must win too).
  uint32_t tail_bits;
  std::memcpy(&tail_bits, &tail_max, sizeof tail_bits);
  if (tail_bits > vector_bits) return tail_max;
  float vector_max;
  std::memcpy(&vector_max, &vector_bits, sizeof vector_max);
  return vector_max;
}

void DitherQuantize(const RandomStream& dither, uint64_t first, const float* w, std::size_t n, float scale, int s,
                    uint8_t* symbols) {
  const QuantizeSixteen sixteen(scale, s);
  WithDither<kDitherSets>(
      dither, first, n,
      [&](std::size_t i, const __m512* u) {
        // The input of a later step, 4 KB ahead (an address only: prefetches
        // past the end are harmless).
        const uintptr_t ahead = reinterpret_cast<uintptr_t>(w + i) + kPrefetchBytes;
        for (int line = 0; line < kDitherVectors; ++line) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * static_cast<uintptr_t>(line)), _MM_HINT_T0);
        }
        for (int v = 0; v < kDitherVectors; ++v) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(symbols + i + 16 * v),
                           sixteen(_mm512_loadu_ps(w + i + 16 * v), u[v]));
        }
      },
      [&](std::size_t i, std::size_t count, const float* u) {
        avx2::Quantize(w + i, u, count, scale, s, symbols + i);
      });
}

void DitherDequantize(const RandomStream& dither, uint64_t first, const uint8_t* symbols, std::size_t n, float scale,
                      int s, float* out) {
  DitherDecoded(
      dither, first, symbols, n, scale, s, [out](std::size_t i, __m512 value) { _mm512_storeu_ps(out + i, value); },
      [&](std::size_t i, std::size_t count, const float* u) {
        avx2::Dequantize(symbols + i, u, count, scale, s, out + i);
      });
}

void DitherDequantizeAccumulate(const RandomStream& dither, uint64_t first, const uint8_t* symbols, std::size_t n,
                                float scale, int s, float weight, float* acc) {
  const __m512 weight_v = _mm512_set1_ps(weight);
  DitherDecoded(
      dither, first, symbols, n, scale, s,
      [&](std::size_t i, __m512 value) {
        _mm512_storeu_ps(acc + i, _mm512_add_ps(_mm512_loadu_ps(acc + i), _mm512_mul_ps(weight_v, value)));
      },
      [&](std::size_t i, std::size_t count, const float* u) {
        avx2::DequantizeAccumulate(symbols + i, u, count, scale, s, weight, acc + i);
      });
}

}  // namespace fedrt::avx512
