// NEON fixed-length packing (pack_kernels.h), 16 symbols per iteration;
// integer instructions present on ARMv7 NEON only, so one file serves AArch64
// and ARMv7. The steps are those of pack_avx2.cc: bytes merged pairwise into
// 16-, 32- and 64-bit lanes (lo | hi << b, << 2b, << 4b), after which each
// 64-bit lane holds eight symbols in its low b bytes; two 8-byte stores write
// them (the second overlapping the first's unused bytes). Unpack reverses the
// steps from two 8-byte loads. Those 8-byte accesses cover up to 7 bytes past
// the iteration's own, so the vector loops stop when fewer than b + 8 bytes of
// stream remain and the scalar reference finishes. Base 3: the 64-bit arithmetic and table of
// pack_kernels.h, the last 16 symbols by the reference. b = 8 is a copy.
#include <arm_neon.h>

#include <cstring>

#include "symbols/pack_kernels.h"
#include "symbols/symbol_streams.h"

namespace fedrt::neon {

void PackSymbols(const uint8_t* symbols, std::size_t count, uint32_t alphabet, uint8_t* out) {
  const int b = codec_internal::PackedBits(alphabet);
  if (alphabet == 3) {
    std::size_t g = 0;
    for (; 5 * g + 16 <= count; ++g) {
      uint64_t word;
      std::memcpy(&word, symbols + 5 * g, 8);
      out[g] = Base3Byte(word);
    }
    scalar::PackSymbols(symbols + 5 * g, count - 5 * g, alphabet, out + g);
    return;
  }
  if (b == 8 || b == 0) {
    scalar::PackSymbols(symbols, count, alphabet, out);
    return;
  }
  const int16x8_t s1 = vdupq_n_s16(static_cast<int16_t>(b));
  const int32x4_t s2 = vdupq_n_s32(2 * b);
  const int64x2_t s4 = vdupq_n_s64(4 * b);
  std::size_t i = 0;
  uint8_t* dst = out;
  // The second store reaches dst + b + 8: stay inside the stream.
  const uint8_t* end = out + codec_internal::PackedStreamSize(count, alphabet);
  for (; i + 16 <= count && end - dst >= b + 8; i += 16) {
    const uint16x8_t x8 = vreinterpretq_u16_u8(vld1q_u8(symbols + i));
    const uint16x8_t x16 = vorrq_u16(vandq_u16(x8, vdupq_n_u16(0x00FF)), vshlq_u16(vshrq_n_u16(x8, 8), s1));
    const uint32x4_t y = vreinterpretq_u32_u16(x16);
    const uint32x4_t x32 = vorrq_u32(vandq_u32(y, vdupq_n_u32(0xFFFF)), vshlq_u32(vshrq_n_u32(y, 16), s2));
    const uint64x2_t z = vreinterpretq_u64_u32(x32);
    const uint64x2_t x64 =
        vorrq_u64(vandq_u64(z, vdupq_n_u64(0xFFFFFFFFu)), vshlq_u64(vshrq_n_u64(z, 32), s4));
    const uint64_t lo = vgetq_lane_u64(x64, 0), hi = vgetq_lane_u64(x64, 1);
    std::memcpy(dst, &lo, 8);
    std::memcpy(dst + b, &hi, 8);
    dst += 2 * b;
  }
  scalar::PackSymbols(symbols + i, count - i, alphabet, dst);
}

uint32_t UnpackSymbols(const uint8_t* stream, std::size_t count, uint32_t alphabet, uint8_t* symbols) {
  const int b = codec_internal::PackedBits(alphabet);
  if (alphabet == 3) return UnpackBase3ByTable(stream, count, symbols);
  if (b == 8 || b == 0) return scalar::UnpackSymbols(stream, count, alphabet, symbols);
  const int16x8_t r1 = vdupq_n_s16(static_cast<int16_t>(-b));
  const int32x4_t r2 = vdupq_n_s32(-2 * b);
  const int64x2_t r4 = vdupq_n_s64(-4 * b);
  const uint64_t keep = (uint64_t{1} << (8 * b)) - 1;
  uint8x16_t largest = vdupq_n_u8(0);
  std::size_t i = 0;
  const uint8_t* src = stream;
  // The second load reaches src + b + 8: stay inside the stream.
  const uint8_t* end = stream + codec_internal::PackedStreamSize(count, alphabet);
  for (; i + 16 <= count && end - src >= b + 8; i += 16) {
    uint64_t lo, hi;
    std::memcpy(&lo, src, 8);
    std::memcpy(&hi, src + b, 8);
    const uint64x2_t x64 = vcombine_u64(vcreate_u64(lo & keep), vcreate_u64(hi & keep));
    const uint64x2_t z = vorrq_u64(vandq_u64(x64, vdupq_n_u64((uint64_t{1} << (4 * b)) - 1)),
                                   vshlq_n_u64(vshlq_u64(x64, r4), 32));
    const uint32x4_t y = vreinterpretq_u32_u64(z);
    const uint32x4_t x32 = vorrq_u32(vandq_u32(y, vdupq_n_u32((1u << (2 * b)) - 1)), vshlq_n_u32(vshlq_u32(y, r2), 16));
    const uint16x8_t w = vreinterpretq_u16_u32(x32);
    const uint16x8_t x16 =
        vorrq_u16(vandq_u16(w, vdupq_n_u16(static_cast<uint16_t>((1u << b) - 1))), vshlq_n_u16(vshlq_u16(w, r1), 8));
    const uint8x16_t bytes = vreinterpretq_u8_u16(x16);
    largest = vmaxq_u8(largest, bytes);
    vst1q_u8(symbols + i, bytes);
    src += 2 * b;
  }
  uint8_t lanes[16];
  vst1q_u8(lanes, largest);
  uint32_t head = 0;
  for (uint8_t v : lanes) head = v > head ? v : head;
  const uint32_t rest = scalar::UnpackSymbols(src, count - i, alphabet, symbols + i);
  return rest > head ? rest : head;
}

}  // namespace fedrt::neon
