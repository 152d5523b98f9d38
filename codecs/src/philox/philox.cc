// Philox streams: maps the specification's stream layout onto the block
// kernels. Whole blocks are written by the kernel straight into the caller's
// array; a block cut by the start or the end of the range goes through one
// block on the stack.
#include "fedrt/platform/config.h"
#include "philox/philox_kernels.h"

namespace fedrt {

PhiloxBlocksFn PhiloxBlocksFor(Isa isa) {
  switch (isa) {
#if FEDRT_HAVE_AVX2_KERNELS
    case Isa::kAvx2: return &avx2::PhiloxBlocks;
#endif
#if FEDRT_HAVE_AVX512_KERNELS
    case Isa::kAvx512: return &avx512::PhiloxBlocks;
#endif
#if FEDRT_HAVE_NEON_KERNELS
    case Isa::kNeon: return &neon::PhiloxBlocks;
#endif
    default: return &scalar::PhiloxBlocks;
  }
}

PhiloxDitherBlocksFn PhiloxDitherBlocksFor(Isa isa) {
  switch (isa) {
#if FEDRT_HAVE_AVX2_KERNELS
    case Isa::kAvx2: return &avx2::PhiloxDitherBlocks;
#endif
#if FEDRT_HAVE_AVX512_KERNELS
    case Isa::kAvx512: return &avx512::PhiloxDitherBlocks;
#endif
#if FEDRT_HAVE_NEON_KERNELS
    case Isa::kNeon: return &neon::PhiloxDitherBlocks;
#endif
    default: return &scalar::PhiloxDitherBlocks;
  }
}

namespace {

// Words [first, first + count) of the stream through `blocks_fn`, which
// writes T values (words or dither) block by block.
template <typename T, typename BlocksFn>
void StreamValues(const RandomStream& s, uint64_t first, std::size_t count, BlocksFn blocks_fn, T* out) {
  const PhiloxStreamCounter c = StreamCounter(s);
  // Block indices wrap modulo 2^32 like the counter word they are.
  const auto partial = [&](uint64_t block, std::size_t skip, std::size_t take) {
    T values[4];
    blocks_fn(c.key, static_cast<uint32_t>(block), c.c1, c.c2, c.c3, 1, values);
    for (std::size_t i = 0; i < take; ++i) out[i] = values[skip + i];
    out += take;
    count -= take;
  };
  if (count == 0) return;
  uint64_t block = first / 4;
  const std::size_t skip = static_cast<std::size_t>(first % 4);
  if (skip != 0) {
    partial(block++, skip, count < 4 - skip ? count : 4 - skip);
  }
  const std::size_t whole = count / 4;
  if (whole != 0) {
    blocks_fn(c.key, static_cast<uint32_t>(block), c.c1, c.c2, c.c3, whole, out);
    block += whole;
    out += 4 * whole;
    count -= 4 * whole;
  }
  if (count != 0) partial(block, 0, count);
}

}  // namespace

void PhiloxWords(const RandomStream& stream, uint64_t first, std::size_t count, uint32_t* out) {
  StreamValues(stream, first, count, PhiloxBlocksFor(ActiveIsa()), out);
}

void PhiloxDither(const RandomStream& stream, uint64_t first, std::size_t count, float* out) {
  StreamValues(stream, first, count, PhiloxDitherBlocksFor(ActiveIsa()), out);
}

void PhiloxDitherWith(PhiloxDitherBlocksFn blocks_fn, const RandomStream& stream, uint64_t first,
                      std::size_t count, float* out) {
  StreamValues(stream, first, count, blocks_fn, out);
}

}  // namespace fedrt
