// AVX2 reduction kernels: 32 floats per iteration (four independent 8-lane
// additions, unaligned loads and stores). VADDPS rounds each lane exactly as
// the scalar addition; MXCSR keeps its default (no FTZ/DAZ), so subnormals
// are exact too. Tails (< 32, then < 8 values): 8-lane steps, then scalar.
#include <immintrin.h>

#include "reduce/reduce_kernels.h"

namespace fedrt::avx2 {

void AddFloats(const float* in, std::size_t n, float* inout) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 a0 = _mm256_add_ps(_mm256_loadu_ps(inout + i), _mm256_loadu_ps(in + i));
    const __m256 a1 = _mm256_add_ps(_mm256_loadu_ps(inout + i + 8), _mm256_loadu_ps(in + i + 8));
    const __m256 a2 = _mm256_add_ps(_mm256_loadu_ps(inout + i + 16), _mm256_loadu_ps(in + i + 16));
    const __m256 a3 = _mm256_add_ps(_mm256_loadu_ps(inout + i + 24), _mm256_loadu_ps(in + i + 24));
    _mm256_storeu_ps(inout + i, a0);
    _mm256_storeu_ps(inout + i + 8, a1);
    _mm256_storeu_ps(inout + i + 16, a2);
    _mm256_storeu_ps(inout + i + 24, a3);
  }
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(inout + i, _mm256_add_ps(_mm256_loadu_ps(inout + i), _mm256_loadu_ps(in + i)));
  }
  scalar::AddFloats(in + i, n - i, inout + i);
}

}  // namespace fedrt::avx2
