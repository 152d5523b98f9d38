// Philox streams: maps the specification's stream layout onto the block
// kernels and handles coordinates that do not start or end on a block.
#include "fedrt/platform/config.h"
#include "philox/philox_kernels.h"

namespace fedrt {

PhiloxBlocksFn PhiloxBlocksFor(Isa isa) {
  switch (isa) {
#if FEDRT_HAVE_AVX2_KERNELS
    case Isa::kAvx2: return &avx2::PhiloxBlocks;
#endif
#if FEDRT_HAVE_NEON_KERNELS
    case Isa::kNeon: return &neon::PhiloxBlocks;
#endif
    default: return &scalar::PhiloxBlocks;
  }
}

namespace {

// Words in one stack chunk: bounds the stack use of the bulk calls.
constexpr std::size_t kChunkBlocks = 256;

template <typename Sink>
void ForEachWordChunk(const RandomStream& s, uint64_t first, std::size_t count, Sink sink) {
  const PhiloxKey key = {static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32)};
  const uint32_t c3 = (s.sender_id << 8) | static_cast<uint32_t>(s.purpose);
  const PhiloxBlocksFn blocks_fn = PhiloxBlocksFor(ActiveIsa());
  uint32_t words[4 * kChunkBlocks];
  std::size_t done = 0;
  while (done < count) {
    const uint64_t index = first + done;
    const uint64_t block = index / 4;
    const std::size_t skip = static_cast<std::size_t>(index % 4);
    const std::size_t wanted = count - done;
    std::size_t blocks = (skip + wanted + 3) / 4;
    if (blocks > kChunkBlocks) blocks = kChunkBlocks;
    blocks_fn(key, static_cast<uint32_t>(block), s.tensor_id, s.round, c3, blocks, words);
    std::size_t take = 4 * blocks - skip;
    if (take > wanted) take = wanted;
    sink(words + skip, done, take);
    done += take;
  }
}

}  // namespace

void PhiloxWords(const RandomStream& stream, uint64_t first, std::size_t count, uint32_t* out) {
  ForEachWordChunk(stream, first, count, [out](const uint32_t* words, std::size_t at, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out[at + i] = words[i];
  });
}

void PhiloxDither(const RandomStream& stream, uint64_t first, std::size_t count, float* out) {
  ForEachWordChunk(stream, first, count, [out](const uint32_t* words, std::size_t at, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out[at + i] = UniformFromWord(words[i]) - 0.5f;
  });
}

}  // namespace fedrt
