// Philox4x32-10: the counter-based generator behind every random number a
// codec draws (dither, stochastic rounding, random subsets, leader choice).
//
// Counter-based means coordinate i's random word is a pure function of
// (session seed, tensor, round, sender, purpose, i): a sender and a receiver
// that share the seed draw the same dither without sending it, in any order,
// in SIMD. The stream layout is part of the payload format (codecs/README.md, "Randomness"):
//   key     = {lo32(seed), hi32(seed)}
//   counter = {i / 4, tensor_id, round, (sender_id << 8) | purpose}
//   word i  = lane i % 4 of philox(counter, key)
//
// All functions are pure and thread-safe. The bulk functions dispatch to the
// scalar, AVX2 or NEON kernel (fedrt/platform/cpu.h); all give the same words.
#ifndef FEDRT_CODECS_PHILOX_H_
#define FEDRT_CODECS_PHILOX_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace fedrt {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// One Philox4x32-10 block (the reference, used for known-answer tests).
PhiloxCounter Philox4x32(PhiloxCounter counter, PhiloxKey key);

// Independent streams drawn from one session seed.
enum class RandomPurpose : uint8_t {
  kDither = 1,
  kStochasticRounding = 2,
  kRandomSubset = 3,
  kLeaderChoice = 4,
  kGaussianNoise = 5,  // the aggregator's DP noise (runtime/privacy.h), keyed by a seed devices do not know
};

struct RandomStream {
  uint64_t seed = 0;
  uint32_t tensor_id = 0;
  uint32_t round = 0;
  uint32_t sender_id = 0;  // only the low 24 bits take part (the counter packs purpose below it)
  RandomPurpose purpose = RandomPurpose::kDither;
};

// The 32-bit words of coordinates [first, first + count) of the stream.
void PhiloxWords(const RandomStream& stream, uint64_t first, std::size_t count, uint32_t* out);

// u01(r) = float(r >> 8) * 2^-24, in [0, 1): exact, the same on every ISA.
inline float UniformFromWord(uint32_t word) {
  return static_cast<float>(word >> 8) * 0x1p-24f;
}

// Dither values u01(r) - 1/2 in [-1/2, 1/2) for coordinates [first, first + count).
void PhiloxDither(const RandomStream& stream, uint64_t first, std::size_t count, float* out);

}  // namespace fedrt

#endif  // FEDRT_CODECS_PHILOX_H_
