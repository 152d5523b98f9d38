// Dispatch for the DQSG / NDQSG kernel family.
#include "dqsg/dqsg_kernels.h"
#include "fedrt/platform/config.h"
#include "philox/philox_kernels.h"

namespace fedrt {
namespace {

// The dither_* kernels of an ISA without a fused variant: its Philox dither
// kernel writes a stack buffer, fn(j, m, u) uses coordinates j .. j + m.
template <typename Fn>
void InDitherChunks(PhiloxDitherBlocksFn blocks_fn, const RandomStream& dither, uint64_t first, std::size_t n,
                    Fn fn) {
  constexpr std::size_t kChunk = 512;  // the codecs call with at most this many
  float u[kChunk];
  for (std::size_t j = 0; j < n; j += kChunk) {
    const std::size_t m = n - j < kChunk ? n - j : kChunk;
    PhiloxDitherWith(blocks_fn, dither, first + j, m, u);
    fn(j, m, static_cast<const float*>(u));
  }
}

template <const PhiloxDitherBlocksFn* kBlocks, const DqsgKernels* kPlain>
struct DitherThen {
  static void Quantize(const RandomStream& dither, uint64_t first, const float* w, std::size_t n, float scale, int s,
                       uint8_t* symbols) {
    InDitherChunks(*kBlocks, dither, first, n, [&](std::size_t j, std::size_t m, const float* u) {
      kPlain->quantize(w + j, u, m, scale, s, symbols + j);
    });
  }
  static void Dequantize(const RandomStream& dither, uint64_t first, const uint8_t* symbols, std::size_t n,
                         float scale, int s, float* out) {
    InDitherChunks(*kBlocks, dither, first, n, [&](std::size_t j, std::size_t m, const float* u) {
      kPlain->dequantize(symbols + j, u, m, scale, s, out + j);
    });
  }
  static void DequantizeAccumulate(const RandomStream& dither, uint64_t first, const uint8_t* symbols, std::size_t n,
                                   float scale, int s, float weight, float* acc) {
    InDitherChunks(*kBlocks, dither, first, n, [&](std::size_t j, std::size_t m, const float* u) {
      kPlain->dequantize_accumulate(symbols + j, u, m, scale, s, weight, acc + j);
    });
  }
};

#define FEDRT_DQSG_PLAIN_KERNELS(ns) \
  &ns::MaxAbs, &ns::Quantize, &ns::Dequantize, &ns::DequantizeAccumulate, &ns::NestedQuantize, &ns::NestedDequantize

// An ISA without fused dither kernels: its plain kernels after its Philox dither kernel.
#define FEDRT_DQSG_DITHER_THEN(ns, blocks, plain)                                                  \
  {                                                                                                \
    FEDRT_DQSG_PLAIN_KERNELS(ns), &DitherThen<&blocks, &plain>::Quantize,                          \
        &DitherThen<&blocks, &plain>::Dequantize, &DitherThen<&blocks, &plain>::DequantizeAccumulate \
  }

const PhiloxDitherBlocksFn kScalarDither = &scalar::PhiloxDitherBlocks;
extern const DqsgKernels kScalar;
const DqsgKernels kScalar = FEDRT_DQSG_DITHER_THEN(scalar, kScalarDither, kScalar);

#if FEDRT_HAVE_AVX2_KERNELS
const DqsgKernels kAvx2 = {FEDRT_DQSG_PLAIN_KERNELS(avx2), &avx2::DitherQuantize, &avx2::DitherDequantize,
                           &avx2::DitherDequantizeAccumulate};
#endif
#if FEDRT_HAVE_AVX512_KERNELS
// AVX-512: its max_abs and fused dither kernels, the AVX2 kernels for the rest.
const DqsgKernels kAvx512 = {&avx512::MaxAbs,
                             &avx2::Quantize,
                             &avx2::Dequantize,
                             &avx2::DequantizeAccumulate,
                             &avx2::NestedQuantize,
                             &avx2::NestedDequantize,
                             &avx512::DitherQuantize,
                             &avx512::DitherDequantize,
                             &avx512::DitherDequantizeAccumulate};
#endif
#if FEDRT_HAVE_NEON_KERNELS
const PhiloxDitherBlocksFn kNeonDither = &neon::PhiloxDitherBlocks;
extern const DqsgKernels kNeon;
const DqsgKernels kNeon = FEDRT_DQSG_DITHER_THEN(neon, kNeonDither, kNeon);
#endif

#undef FEDRT_DQSG_DITHER_THEN
#undef FEDRT_DQSG_PLAIN_KERNELS

}  // namespace

const DqsgKernels& DqsgKernelsFor(Isa isa) {
  switch (isa) {
#if FEDRT_HAVE_AVX2_KERNELS
    case Isa::kAvx2: return kAvx2;
#endif
#if FEDRT_HAVE_AVX512_KERNELS
    case Isa::kAvx512: return kAvx512;
#endif
#if FEDRT_HAVE_NEON_KERNELS
    case Isa::kNeon: return kNeon;
#endif
    default: return kScalar;
  }
}

}  // namespace fedrt
