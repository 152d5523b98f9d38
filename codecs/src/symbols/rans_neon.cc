// Interleaved rANS, NEON decoder for AArch64 (rans_kernels.h): the sixteen
// states in four registers, one group of sixteen symbols (one per state) per
// step, decoding exactly what the scalar reference decodes.
//
// A slot's symbol (alphabets up to 16) is found by counting the symbols'
// starts at or below the slot (a compare each; an absent symbol's start
// equals the next one's, so counting it is harmless), and its frequency and
// start come from byte-table lookups (TBL over the tables as 16-bit entries:
// each 32-bit lane asks for bytes 2s, 2s + 1 and two out-of-range indices,
// which read as zero). The lanes whose state fell below 2^15 take the next
// words in lane order: the group's sixteen possible words are loaded once
// and each register's lanes pick theirs with one more TBL, its indices
// chosen by the lane mask and moved on by the words the lower lanes took.
// The loop stops where fewer than 32 stream bytes remain and at the last
// partial group; the scalar reference finishes (and does the bounds checks).
//
// Larger alphabets decode with the scalar reference (no gather on NEON), as
// do encoding and the histogram: the quantizers' alphabets are small, and
// the encoder's division by reciprocal needs 32x32 -> 64-bit products per
// lane, which take four multiplies per register here against the AVX2's two.
// ARMv7: the scalar reference throughout (TBL over 32 bytes and the
// across-lane sums are AArch64 instructions).
#include "symbols/rans_kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>

namespace fedrt::neon {
namespace {

// For a 4-bit lane mask m: the TBL byte indices that give lane j (set in m,
// the k-th set lane) word k of the loaded words, zero-extended: bytes 2k,
// 2k + 1, then two out-of-range indices. Unset lanes read zero.
struct SpreadTable {
  uint8_t bytes[16][16];
  constexpr SpreadTable() : bytes() {
    for (uint32_t m = 0; m < 16; ++m) {
      uint32_t k = 0;
      for (uint32_t j = 0; j < 4; ++j) {
        const bool set = (m >> j) & 1;
        bytes[m][4 * j + 0] = set ? static_cast<uint8_t>(2 * k) : 0xFF;
        bytes[m][4 * j + 1] = set ? static_cast<uint8_t>(2 * k + 1) : 0xFF;
        bytes[m][4 * j + 2] = 0xFF;
        bytes[m][4 * j + 3] = 0xFF;
        k += set ? 1 : 0;
      }
    }
  }
};

constexpr SpreadTable kSpread;

// The decode table for alphabets up to 16, as NEON lookups.
struct SmallAlphabet {
  explicit SmallAlphabet(const RansDecodeTable& t) : symbols(t.alphabet) {
    uint16_t freq16[16] = {}, start16[16] = {};
    for (uint32_t s = 0; s < t.alphabet; ++s) {
      freq16[s] = static_cast<uint16_t>(t.freq[s]);
      start16[s] = static_cast<uint16_t>(t.start[s]);
    }
    freq = {vreinterpretq_u8_u16(vld1q_u16(freq16)), vreinterpretq_u8_u16(vld1q_u16(freq16 + 8))};
    start = {vreinterpretq_u8_u16(vld1q_u16(start16)), vreinterpretq_u8_u16(vld1q_u16(start16 + 8))};
    for (uint32_t s = 1; s < symbols; ++s) at_least[s] = vdupq_n_u32(t.start[s]);
  }
  uint32_t symbols;
  uint8x16x2_t freq, start;  // 16-bit entries (< 2^12), symbol s at bytes 2s, 2s + 1
  uint32x4_t at_least[16];   // start[s], for slot >= start[s]
};

// table[s] per 32-bit lane, s < 16.
inline uint32x4_t Lookup16(const uint8x16x2_t& table, uint32x4_t s) {
  const uint32x4_t index = vmlaq_n_u32(vdupq_n_u32(0xFFFF0100u), s, 0x0202u);
  return vreinterpretq_u32_u8(vqtbl2q_u8(table, vreinterpretq_u8_u32(index)));
}

// One step of four states: their symbols into *symbol, then the lanes that
// need it refilled with words *base, *base + 1, ... of `words` (the group's
// sixteen); adds the number taken to *base.
inline uint32x4_t DecodeFour(const SmallAlphabet& a, uint32x4_t x, uint32x4_t mask, int32x4_t shift,
                             const uint8x16x2_t& words, uint32_t* base, uint32x4_t* symbol) {
  const uint32x4_t lane_bits = {1, 2, 4, 8};
  const uint32x4_t slot = vandq_u32(x, mask);
  uint32x4_t s = vdupq_n_u32(0);
  for (uint32_t k = 1; k < a.symbols; ++k) s = vsubq_u32(s, vcgeq_u32(slot, a.at_least[k]));
  *symbol = s;
  x = vmlaq_u32(vsubq_u32(slot, Lookup16(a.start, s)), Lookup16(a.freq, s), vshlq_u32(x, shift));
  const uint32x4_t renorm = vcltq_u32(x, vdupq_n_u32(kRansLow));
  const uint32_t lanes = vaddvq_u32(vandq_u32(renorm, lane_bits));
  // Word k of the group is bytes 2k, 2k + 1: move the indices on by *base words.
  const uint8x16_t order = vaddq_u8(vld1q_u8(kSpread.bytes[lanes]),
                                    vreinterpretq_u8_u32(vdupq_n_u32(0x0202u * *base)));
  const uint32x4_t refill = vreinterpretq_u32_u8(vqtbl2q_u8(words, order));
  *base += static_cast<uint32_t>(__builtin_popcount(lanes));
  return vbslq_u32(renorm, vorrq_u32(vshlq_n_u32(x, 16), refill), x);
}

}  // namespace

std::size_t RansDecodeLanes(const uint8_t* stream, std::size_t size, std::size_t* at, std::size_t count,
                            const RansDecodeTable& table, uint32_t* states, uint8_t* symbols) {
  if (table.alphabet > 16) return scalar::RansDecodeLanes(stream, size, at, count, table, states, symbols);
  const SmallAlphabet a(table);
  const uint32x4_t mask = vdupq_n_u32((1u << table.scale_bits) - 1);
  const int32x4_t shift = vdupq_n_s32(-table.scale_bits);
  uint32x4_t x0 = vld1q_u32(states), x1 = vld1q_u32(states + 4);
  uint32x4_t x2 = vld1q_u32(states + 8), x3 = vld1q_u32(states + 12);
  std::size_t pos = *at;
  std::size_t i = 0;
  for (; count - i >= kRansLanes && size - pos >= 32; i += kRansLanes) {
    const uint8x16x2_t words = {vld1q_u8(stream + pos), vld1q_u8(stream + pos + 16)};
    uint32_t taken = 0;
    uint32x4_t s0, s1, s2, s3;
    x0 = DecodeFour(a, x0, mask, shift, words, &taken, &s0);
    x1 = DecodeFour(a, x1, mask, shift, words, &taken, &s1);
    x2 = DecodeFour(a, x2, mask, shift, words, &taken, &s2);
    x3 = DecodeFour(a, x3, mask, shift, words, &taken, &s3);
    const uint16x8_t low = vcombine_u16(vmovn_u32(s0), vmovn_u32(s1));
    const uint16x8_t high = vcombine_u16(vmovn_u32(s2), vmovn_u32(s3));
    vst1q_u8(symbols + i, vcombine_u8(vmovn_u16(low), vmovn_u16(high)));
    pos += 2 * static_cast<std::size_t>(taken);
  }
  vst1q_u32(states, x0);
  vst1q_u32(states + 4, x1);
  vst1q_u32(states + 8, x2);
  vst1q_u32(states + 12, x3);
  *at = pos;
  return i + scalar::RansDecodeLanes(stream, size, at, count - i, table, states, symbols + i);
}

}  // namespace fedrt::neon
#endif  // __aarch64__
