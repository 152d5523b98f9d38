// Interleaved rANS, AVX2 (rans_kernels.h): the sixteen states in two
// registers, one group of sixteen symbols (one per state) per step; the two
// registers' steps are independent, so their latencies overlap.
//
// Encode (alphabets up to 16; larger ones run the scalar reference): the
// per-symbol constants are looked up with vpermd (two and a blend above 8
// symbols); the lanes that renormalise are those with x >= x_max, and their
// low 16 bits are compressed, in lane order, into the top of a register by a
// permutation chosen by the lane mask and stored as one 16-byte store ending
// at the write pointer (the bytes below the words are scratch that later
// words overwrite, so the loop stops 32 bytes above `floor`). The division
// is the reciprocal multiply of the reference on even and odd lanes. The
// encoder runs backwards, so the partial group at the end goes first, to the
// scalar reference.
//
// Decode (any alphabet): the symbol of each slot, with its frequency and
// start, comes from a gather from a slot table packing freq, slot - start and
// the symbol into one 32-bit word; for alphabets up to 8 (the quantizers'
// usual ones), from counting the symbols' starts at or below the slot (a few
// compares) and two vpermd lookups, which is shorter than a gather on the
// step's dependency chain. The lanes whose state fell below 2^15
// take the next words in lane order: eight words are loaded, widened, and
// spread to those lanes by a permutation chosen by the lane mask. The loop
// stops where fewer than 32 stream bytes remain and at the last partial group;
// the scalar reference finishes (and does the bounds checks there).
//
// Histogram (alphabets up to 16; larger ones run the reference): for each
// value, a byte compare per 32 symbols over an L1-sized block, summed with
// vpsadbw; any symbol outside the alphabet sends the count to the reference.
#include <immintrin.h>

#include "symbols/rans_kernels.h"

namespace fedrt::avx2 {
namespace {

// Lane permutations indexed by an 8-bit lane mask m (n = popcount(m)):
// spread[m] sends word k to the lane of m's k-th set bit (decoder);
// compress[m] sends the lane of m's k-th set bit to lane 8 - n + k (encoder).
struct LanePermutations {
  uint32_t spread[256][8];
  uint32_t compress[256][8];
  constexpr LanePermutations() : spread(), compress() {
    for (uint32_t m = 0; m < 256; ++m) {
      uint32_t n = 0;
      for (uint32_t j = 0; j < 8; ++j) n += (m >> j) & 1;
      uint32_t k = 0;
      for (uint32_t j = 0; j < 8; ++j) {
        if ((m >> j) & 1) {
          spread[m][j] = k;
          compress[m][8 - n + k] = j;
          ++k;
        }
      }
    }
  }
};

constexpr LanePermutations kPermutations;

__m256i LoadTable8(const uint32_t* values) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values)); }

// values[index] for index < 8 (kWide: < 16, `high` holding entries 8..15).
template <bool kWide>
__m256i Lookup(__m256i low, __m256i high, __m256i index) {
  const __m256i a = _mm256_permutevar8x32_epi32(low, index);
  if (!kWide) return a;
  const __m256i b = _mm256_permutevar8x32_epi32(high, index);
  // Bit 3 of the index to bit 31, which selects per 32-bit lane.
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b),
                                              _mm256_castsi256_ps(_mm256_slli_epi32(index, 28))));
}

// (x * r) >> 32 per unsigned 32-bit lane.
__m256i MulHigh(__m256i x, __m256i r) {
  const __m256i even = _mm256_srli_epi64(_mm256_mul_epu32(x, r), 32);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(r, 32));
  return _mm256_blend_epi32(even, odd, 0xAA);
}

template <bool kWide>
struct EncodeConstants {
  explicit EncodeConstants(const RansEncodeTable& t)
      : x_max_lo(LoadTable8(t.x_max)), x_max_hi(LoadTable8(t.x_max + 8)),
        rcp_lo(LoadTable8(t.reciprocal)), rcp_hi(LoadTable8(t.reciprocal + 8)),
        shift_lo(LoadTable8(t.shift)), shift_hi(LoadTable8(t.shift + 8)),
        bias_lo(LoadTable8(t.bias)), bias_hi(LoadTable8(t.bias + 8)),
        cmpl_lo(LoadTable8(t.complement)), cmpl_hi(LoadTable8(t.complement + 8)) {}
  __m256i x_max_lo, x_max_hi, rcp_lo, rcp_hi, shift_lo, shift_hi, bias_lo, bias_hi, cmpl_lo, cmpl_hi;
};

// One step of eight states: renormalise (words stored ending at *ptr) and code
// symbols[0..8).
template <bool kWide>
__m256i EncodeEight(const EncodeConstants<kWide>& c, __m256i x, const uint8_t* symbols, uint8_t** ptr) {
  const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(symbols)));
  const __m256i x_max = Lookup<kWide>(c.x_max_lo, c.x_max_hi, s);
  // x >= x_max, unsigned.
  const __m256i renorm = _mm256_cmpeq_epi32(_mm256_max_epu32(x, x_max), x);
  const int mask = _mm256_movemask_ps(_mm256_castsi256_ps(renorm));
  const __m256i order = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kPermutations.compress[mask]));
  const __m256i words = _mm256_and_si256(_mm256_permutevar8x32_epi32(x, order), _mm256_set1_epi32(0xFFFF));
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(*ptr - 16), packed);
  *ptr -= 2 * __builtin_popcount(static_cast<unsigned>(mask));
  x = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(x), _mm256_castsi256_ps(_mm256_srli_epi32(x, 16)),
                                           _mm256_castsi256_ps(renorm)));
  const __m256i q = _mm256_srlv_epi32(MulHigh(x, Lookup<kWide>(c.rcp_lo, c.rcp_hi, s)),
                                      Lookup<kWide>(c.shift_lo, c.shift_hi, s));
  return _mm256_add_epi32(_mm256_add_epi32(x, Lookup<kWide>(c.bias_lo, c.bias_hi, s)),
                          _mm256_mullo_epi32(q, Lookup<kWide>(c.cmpl_lo, c.cmpl_hi, s)));
}

template <bool kWide>
uint8_t* EncodeGroups(const uint8_t* symbols, std::size_t groups, const RansEncodeTable& t, uint8_t* floor,
                      uint8_t* end, uint32_t* states) {
  const EncodeConstants<kWide> c(t);
  __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(states));
  __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(states + 8));
  uint8_t* ptr = end;
  std::size_t g = groups;
  // Lanes 15..8 write their words before (above) lanes 7..0's.
  for (; g > 0 && ptr - floor >= 32; --g) {
    high = EncodeEight(c, high, symbols + kRansLanes * (g - 1) + 8, &ptr);
    low = EncodeEight(c, low, symbols + kRansLanes * (g - 1), &ptr);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(states), low);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(states + 8), high);
  // Too close to `floor` for whole stores: the reference finishes (and says
  // whether the words fit).
  if (g > 0) return scalar::RansEncodeLanes(symbols, kRansLanes * g, 0, t, floor, ptr, states);
  return ptr;
}

// Alphabets up to 8: the tables as vectors, and each start from symbol 1 on
// broadcast (a slot at or above start[s] has a symbol of at least s; an
// absent symbol's start equals the next one's, so counting it is harmless).
struct SmallAlphabet {
  explicit SmallAlphabet(const RansDecodeTable& t) : symbols(t.alphabet) {
    uint32_t freq8[8] = {}, start8[8] = {};
    for (uint32_t s = 0; s < t.alphabet; ++s) freq8[s] = t.freq[s], start8[s] = t.start[s];
    freq = LoadTable8(freq8);
    start = LoadTable8(start8);
    for (uint32_t s = 1; s < 8; ++s) above[s] = _mm256_set1_epi32(static_cast<int>(start8[s]) - 1);
  }
  uint32_t symbols;
  __m256i freq, start;
  __m256i above[8];  // start[s] - 1, for slot > start[s] - 1 (slots and starts are < 2^12)
};

// Each lane's symbol, frequency and slot - start, from `slot`.
struct SlotEntry {
  __m256i symbol, freq, offset;
};
template <bool kSmall>
inline SlotEntry LookUpSlots(const uint32_t* slots, const SmallAlphabet* small, __m256i slot) {
  const __m256i low12 = _mm256_set1_epi32(0xFFF);
  if (!kSmall) {
    const __m256i entry = _mm256_i32gather_epi32(reinterpret_cast<const int*>(slots), slot, 4);
    return {_mm256_srli_epi32(entry, 24), _mm256_and_si256(entry, low12),
            _mm256_and_si256(_mm256_srli_epi32(entry, 12), low12)};
  }
  __m256i symbol = _mm256_setzero_si256();
  for (uint32_t s = 1; s < small->symbols; ++s) {
    symbol = _mm256_sub_epi32(symbol, _mm256_cmpgt_epi32(slot, small->above[s]));
  }
  return {symbol, _mm256_permutevar8x32_epi32(small->freq, symbol),
          _mm256_sub_epi32(slot, _mm256_permutevar8x32_epi32(small->start, symbol))};
}

// One step of eight states: decode into out[0..8), then refill the lanes
// that need it with words base, base + 1, ... of the sixteen in `words`
// (words[0] holds 0..7, words[1] 8..15); adds the number taken to *base.
template <bool kSmall>
inline __m256i DecodeEight(const uint32_t* slots, const SmallAlphabet* small, __m256i x, __m256i mask,
                           __m128i shift, const __m256i* words, int* base, uint8_t* out) {
  // Byte 0 of each 32-bit lane to bytes 0..3 of each 128-bit half.
  const __m256i first_bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                               0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const SlotEntry e = LookUpSlots<kSmall>(slots, small, _mm256_and_si256(x, mask));
  x = _mm256_add_epi32(_mm256_mullo_epi32(e.freq, _mm256_srl_epi32(x, shift)), e.offset);
  const __m256i sym = _mm256_shuffle_epi8(e.symbol, first_bytes);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out),
                   _mm_unpacklo_epi32(_mm256_castsi256_si128(sym), _mm256_extracti128_si256(sym, 1)));
  const __m256i renorm = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(kRansLow)), x);  // x < 2^31 always
  const int lanes = _mm256_movemask_ps(_mm256_castsi256_ps(renorm));
  // Word indices base + k: a 16-entry lookup in the two registers.
  const __m256i order = _mm256_add_epi32(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kPermutations.spread[lanes])), _mm256_set1_epi32(*base));
  const __m256i refill = Lookup<true>(words[0], words[1], order);
  *base += __builtin_popcount(static_cast<unsigned>(lanes));
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(x),
                                              _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(x, 16), refill)),
                                              _mm256_castsi256_ps(renorm)));
}

// The vector loop: whole groups while 32 stream bytes remain; returns the
// symbols decoded and leaves states and *at where it stopped.
template <bool kSmall>
std::size_t DecodeGroups(const uint8_t* stream, std::size_t size, std::size_t* at, std::size_t count,
                         const uint32_t* slots, const SmallAlphabet* small, int bits, uint32_t* states,
                         uint8_t* symbols) {
  const __m256i mask = _mm256_set1_epi32(static_cast<int>((1u << bits) - 1));
  const __m128i shift = _mm_cvtsi32_si128(bits);
  __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(states));
  __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(states + 8));
  std::size_t pos = *at;
  std::size_t i = 0;
  // The sixteen words a group can take are loaded once, so the high lanes'
  // refill waits only for the count the low lanes took, not for a load.
  for (; count - i >= kRansLanes && size - pos >= 32; i += kRansLanes) {
    const __m256i words[2] = {
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(stream + pos))),
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(stream + pos + 16)))};
    int taken = 0;
    low = DecodeEight<kSmall>(slots, small, low, mask, shift, words, &taken, symbols + i);
    high = DecodeEight<kSmall>(slots, small, high, mask, shift, words, &taken, symbols + i + 8);
    pos += 2 * static_cast<std::size_t>(taken);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(states), low);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(states + 8), high);
  *at = pos;
  return i;
}

// Counts of value v in an L1-sized block for v < alphabet.
void CountBlock(const uint8_t* symbols, std::size_t count, uint32_t alphabet, uint64_t* histogram) {
  std::size_t vectors = count / 32;
  for (uint32_t v = 0; v < alphabet; ++v) {
    const __m256i value = _mm256_set1_epi8(static_cast<char>(v));
    __m256i bytes = _mm256_setzero_si256();  // at most 255 per byte: blocks of 255 vectors
    for (std::size_t k = 0; k < vectors; ++k) {
      const __m256i in = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(symbols + 32 * k));
      bytes = _mm256_sub_epi8(bytes, _mm256_cmpeq_epi8(in, value));
    }
    const __m256i sums = _mm256_sad_epu8(bytes, _mm256_setzero_si256());
    const __m128i half = _mm_add_epi64(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
    histogram[v] += static_cast<uint64_t>(_mm_cvtsi128_si64(half)) +
                    static_cast<uint64_t>(_mm_extract_epi64(half, 1));
  }
  for (std::size_t i = 32 * vectors; i < count; ++i) ++histogram[symbols[i]];
}

}  // namespace

void RansHistogram(const uint8_t* symbols, std::size_t count, uint32_t alphabet, uint64_t* histogram) {
  if (alphabet > 16) return scalar::RansHistogram(symbols, count, alphabet, histogram);
  for (int s = 0; s < 256; ++s) histogram[s] = 0;
  constexpr std::size_t kBlock = 255 * 32;
  for (std::size_t i = 0; i < count; i += kBlock) {
    CountBlock(symbols + i, count - i < kBlock ? count - i : kBlock, alphabet, histogram);
  }
  uint64_t counted = 0;
  for (uint32_t v = 0; v < alphabet; ++v) counted += histogram[v];
  // Some symbol is outside the alphabet: the reference names every count.
  if (counted != count) scalar::RansHistogram(symbols, count, alphabet, histogram);
}

uint8_t* RansEncodeLanes(const uint8_t* symbols, std::size_t count, uint32_t alphabet, const RansEncodeTable& table,
                         uint8_t* floor, uint8_t* end, uint32_t* states) {
  if (alphabet > 16) return scalar::RansEncodeLanes(symbols, count, alphabet, table, floor, end, states);
  const std::size_t groups = count / kRansLanes;
  uint8_t* ptr = scalar::RansEncodeLanes(symbols + kRansLanes * groups, count % kRansLanes, alphabet, table, floor,
                                         end, states);
  if (ptr == nullptr) return nullptr;
  return alphabet > 8 ? EncodeGroups<true>(symbols, groups, table, floor, ptr, states)
                      : EncodeGroups<false>(symbols, groups, table, floor, ptr, states);
}

std::size_t RansDecodeLanes(const uint8_t* stream, std::size_t size, std::size_t* at, std::size_t count,
                            const RansDecodeTable& table, uint32_t* states, uint8_t* symbols) {
  std::size_t i = 0;
  if (table.alphabet <= 8) {
    const SmallAlphabet small(table);
    i = DecodeGroups<true>(stream, size, at, count, nullptr, &small, table.scale_bits, states, symbols);
  } else {
    // freq (< 2^12) | (slot - start) << 12 | symbol << 24 for every slot.
    alignas(32) uint32_t slots[1u << codec_internal::kRansMaxScaleBits];
    for (uint32_t s = 0; s < table.alphabet; ++s) {
      for (uint32_t k = 0; k < table.freq[s]; ++k) slots[table.start[s] + k] = table.freq[s] | k << 12 | s << 24;
    }
    i = DecodeGroups<false>(stream, size, at, count, slots, nullptr, table.scale_bits, states, symbols);
  }
  return i + scalar::RansDecodeLanes(stream, size, at, count - i, table, states, symbols + i);
}

}  // namespace fedrt::avx2
