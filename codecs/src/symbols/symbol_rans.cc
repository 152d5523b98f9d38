// Static-model rANS over byte symbols: the stream format, the frequency
// table and dispatch to the interleaved coder kernels (rans_kernels.h).
//
// Stream layout (all inside the symbol stream, after the codec's scales):
//   byte 0    0x80 | L: the 16-way interleaved format, frequencies summing to
//             2^L, L in 1..kRansMaxScaleBits; or 0 for a stream of one
//             repeated symbol: then byte 1 is that symbol and the stream
//             ends (2 bytes in all). Bytes 1..12 named the single-state
//             format of earlier versions, which is refused by name.
//   byte 1    `last`, the highest symbol present (< alphabet).
//   table     for symbols 0..last, its frequency as LEB128 (1 or 2 bytes);
//             a zero frequency is followed by one byte r: r further symbols
//             are also absent (runs of absent symbols cost 2 bytes).
//   64 bytes  the encoder's final states, lanes 0..15, little-endian (the
//             decoder's start).
//   rest      16-bit little-endian renormalisation words in the order the
//             decoder reads them.
//
// Every state starts at 2^15 (kRansLow) in the encoder, so the decoder must
// end with every state there having consumed every byte: a stream that
// decodes anything else is corrupt.
#include <cstring>
#include <string>

#include "fedrt/codecs/payload.h"
#include "fedrt/platform/config.h"
#include "symbols/rans_kernels.h"
#include "symbols/symbol_streams.h"

namespace fedrt::codec_internal {
namespace {

constexpr uint8_t kInterleavedFormat = 0x80;
constexpr std::size_t kStatesSize = 4 * kRansLanes;

int CeilLog2(uint64_t v) {
  int bits = 0;
  while (bits < 64 && (uint64_t{1} << bits) < v) ++bits;
  return bits;
}

// Precision: enough to represent the counts exactly when the stream is short,
// at most kRansMaxScaleBits, at least enough for one slot per present symbol.
int ChooseScaleBits(uint64_t count, uint32_t present) {
  int bits = CeilLog2(count);
  if (bits > kRansMaxScaleBits) bits = kRansMaxScaleBits;
  const int needed = CeilLog2(present);
  if (bits < needed) bits = needed;
  return bits < 1 ? 1 : bits;
}

// Returns the table size, or 0 if it does not fit in `limit`.
std::size_t WriteTable(const uint32_t* freqs, uint32_t last, int scale_bits, uint8_t* out, std::size_t limit) {
  std::size_t at = 0;
  auto put = [&](uint32_t byte) {
    if (at >= limit) return false;
    out[at++] = static_cast<uint8_t>(byte);
    return true;
  };
  if (!put(kInterleavedFormat | static_cast<uint32_t>(scale_bits)) || !put(last)) return 0;
  for (uint32_t s = 0; s <= last;) {
    const uint32_t f = freqs[s];
    if (f == 0) {
      uint32_t run = 0;
      while (s + 1 + run <= last && freqs[s + 1 + run] == 0 && run < 255) ++run;
      if (!put(0) || !put(run)) return 0;
      s += 1 + run;
      continue;
    }
    if (f < 0x80) {
      if (!put(f)) return 0;
    } else if (!put(0x80 | (f & 0x7F)) || !put(f >> 7)) {
      return 0;
    }
    ++s;
  }
  return at;
}

// Reads and validates the table; fills freqs[0..256) and returns the bytes used.
Result<std::size_t> ReadTable(const uint8_t* in, std::size_t size, uint32_t alphabet, int* scale_bits,
                              uint32_t* freqs) {
  if (size < 2) return Corrupt("rANS stream shorter than its table header");
  if (in[0] >= 1 && in[0] <= kRansMaxScaleBits) {
    return Corrupt("rANS stream in the single-state format of earlier fedrt versions (first byte " +
                   std::to_string(in[0]) + "); this version reads only the 16-way interleaved format");
  }
  if ((in[0] & kInterleavedFormat) == 0) {
    return Corrupt("rANS stream format byte " + std::to_string(in[0]) + " is not known");
  }
  const int bits = in[0] & ~kInterleavedFormat;
  if (bits < 1 || bits > kRansMaxScaleBits) {
    return Corrupt("rANS scale of " + std::to_string(bits) + " bits is not in 1.." +
                   std::to_string(kRansMaxScaleBits));
  }
  const uint32_t last = in[1];
  if (last >= alphabet) {
    return Corrupt("rANS table names symbol " + std::to_string(last) + ", alphabet is " + std::to_string(alphabet));
  }
  const uint32_t total = 1u << bits;
  std::memset(freqs, 0, 256 * sizeof(uint32_t));
  std::size_t at = 2;
  uint32_t sum = 0, present = 0;
  for (uint32_t s = 0; s <= last;) {
    if (at >= size) return Corrupt("rANS frequency table is truncated");
    uint32_t f = in[at++];
    if (f == 0) {
      if (at >= size) return Corrupt("rANS frequency table is truncated");
      const uint32_t run = in[at++];
      if (s + run > last) return Corrupt("rANS table run of absent symbols passes the last symbol");
      s += 1 + run;
      continue;
    }
    if (f & 0x80) {
      if (at >= size) return Corrupt("rANS frequency table is truncated");
      const uint32_t high = in[at++];
      if (high == 0 || high >= 0x80) return Corrupt("rANS frequency is not a canonical 2-byte LEB128");
      f = (f & 0x7F) | (high << 7);
    }
    if (f > total - sum) return Corrupt("rANS frequencies sum to more than 2^" + std::to_string(bits));
    freqs[s++] = f;
    sum += f;
    ++present;
  }
  if (freqs[last] == 0) return Corrupt("rANS table's last symbol is absent");
  if (sum != total) {
    return Corrupt("rANS frequencies sum to " + std::to_string(sum) + ", not 2^" + std::to_string(bits));
  }
  if (present < 2) return Corrupt("rANS table with one symbol (that stream has its own form)");
  *scale_bits = bits;
  return at;
}

void SetEncoderSymbol(uint32_t s, uint32_t start, uint32_t freq, int scale_bits, RansEncodeTable* t) {
  t->x_max[s] = freq << (31 - scale_bits);
  t->complement[s] = (1u << scale_bits) - freq;
  if (freq < 2) {
    t->reciprocal[s] = ~0u;
    t->shift[s] = 0;
    t->bias[s] = start + (1u << scale_bits) - 1;
  } else {
    uint32_t shift = 0;
    while (freq > (1u << shift)) ++shift;
    t->reciprocal[s] = static_cast<uint32_t>(((uint64_t{1} << (shift + 31)) + freq - 1) / freq);
    t->shift[s] = shift - 1;
    t->bias[s] = start;
  }
}

// Cheap upper estimate of the coded size in bits: sum of count * (L - log2 f)
// with log2 by linear interpolation between powers of two (never above the
// true log2, so the estimate errs high by at most 0.09 bits a symbol). Plain
// IEEE double operations, the same on every platform.
double EstimatedBits(const uint64_t* histogram, const uint32_t* freqs, uint32_t alphabet, int scale_bits) {
  double bits = 0;
  for (uint32_t s = 0; s < alphabet; ++s) {
    if (histogram[s] == 0) continue;
    int e = 0;
    while ((2u << e) <= freqs[s]) ++e;
    const double log2f = e + static_cast<double>(freqs[s] - (1u << e)) / static_cast<double>(1u << e);
    bits += static_cast<double>(histogram[s]) * (scale_bits - log2f);
  }
  return bits;
}

}  // namespace

void QuantizeFrequencies(const uint64_t* histogram, uint32_t alphabet, uint64_t count, int scale_bits,
                         uint32_t* freqs) {
  const uint32_t total = 1u << scale_bits;
  // Round to nearest, present symbols at least 1. Plain IEEE double
  // operations only, so every platform computes the same table.
  int64_t sum = 0;
  for (uint32_t s = 0; s < alphabet; ++s) {
    freqs[s] = 0;
    if (histogram[s] == 0) continue;
    const double scaled = static_cast<double>(histogram[s]) * static_cast<double>(total) / static_cast<double>(count);
    uint32_t f = static_cast<uint32_t>(scaled + 0.5);
    freqs[s] = f < 1 ? 1 : f;
    sum += freqs[s];
  }
  // Fix the sum greedily: each step moves one slot where it costs the fewest
  // bits, using count / (f -+ 1/2) as the marginal cost of a slot (ties to the
  // lowest symbol).
  while (sum > total) {
    uint32_t best = alphabet;
    double best_cost = 0;
    for (uint32_t s = 0; s < alphabet; ++s) {
      if (freqs[s] <= 1) continue;
      const double cost = static_cast<double>(histogram[s]) / (static_cast<double>(freqs[s]) - 0.5);
      if (best == alphabet || cost < best_cost) best = s, best_cost = cost;
    }
    --freqs[best];
    --sum;
  }
  while (sum < total) {
    uint32_t best = alphabet;
    double best_gain = 0;
    for (uint32_t s = 0; s < alphabet; ++s) {
      if (histogram[s] == 0) continue;
      const double gain = static_cast<double>(histogram[s]) / (static_cast<double>(freqs[s]) + 0.5);
      if (best == alphabet || gain > best_gain) best = s, best_gain = gain;
    }
    ++freqs[best];
    ++sum;
  }
}

std::size_t RansEncode(const uint8_t* symbols, std::size_t count, uint32_t alphabet, const uint64_t* histogram,
                       uint8_t* out, std::size_t limit) {
  uint32_t present = 0, last = 0;
  for (uint32_t s = 0; s < alphabet; ++s) {
    if (histogram[s] != 0) ++present, last = s;
  }
  if (present == 0) return 0;
  if (present == 1) {
    if (limit < 2) return 0;
    out[0] = 0;
    out[1] = static_cast<uint8_t>(last);
    return 2;
  }
  const int scale_bits = ChooseScaleBits(count, present);
  RansEncodeTable coder;
  // The frequencies live in coder.x_max until the coder's entries replace
  // them below (entry s reads only freqs[s]): 1 KiB less of stack, which a
  // microcontroller's RAM budget counts.
  uint32_t* const freqs = coder.x_max;
  QuantizeFrequencies(histogram, alphabet, count, scale_bits, freqs);
  const std::size_t table = WriteTable(freqs, last, scale_bits, out, limit);
  if (table == 0 || limit - table < kStatesSize) return 0;
  if (EstimatedBits(histogram, freqs, alphabet, scale_bits) >= 8.0 * static_cast<double>(limit)) return 0;
  coder.scale_bits = scale_bits;
  uint32_t start = 0;  // the symbol's first slot: the sum of the frequencies below it
  for (uint32_t s = 0; s < 256; ++s) {
    // Absent symbols get harmless constants (a vector lookup may read them).
    const uint32_t freq = s < alphabet ? freqs[s] : 0;  // read before SetEncoderSymbol overwrites it
    if (freq != 0) {
      SetEncoderSymbol(s, start, freq, scale_bits, &coder);
      start += freq;
    } else {
      SetEncoderSymbol(s, 0, 1, scale_bits, &coder);
    }
  }

  // Code backwards from out + limit; give up when the words would reach the
  // table (the stream would not be shorter than the caller's fallback).
  uint8_t* const floor = out + table + kStatesSize;
  uint32_t states[kRansLanes];
  for (uint32_t& x : states) x = kRansLow;
  const uint8_t* words =
      RansKernelsFor(ActiveIsa()).encode(symbols, count, alphabet, coder, floor, out + limit, states);
  if (words == nullptr) return 0;
  const std::size_t coded = static_cast<std::size_t>(out + limit - words);
  for (int j = 0; j < kRansLanes; ++j) StoreLe32(out + table + 4 * j, states[j]);
  std::memmove(out + table + kStatesSize, words, coded);
  return table + kStatesSize + coded;
}

Status RansDecode(const uint8_t* stream, std::size_t size, std::size_t count, uint32_t alphabet,
                  uint8_t* symbols) {
  if (size >= 1 && stream[0] == 0) {
    if (size != 2) return Corrupt("single-symbol rANS stream must be 2 bytes, has " + std::to_string(size));
    if (stream[1] >= alphabet) return Corrupt("single-symbol rANS stream names a symbol outside the alphabet");
    if (count == 0) return Corrupt("single-symbol rANS stream for zero symbols");
    std::memset(symbols, stream[1], count);
    return Status::Ok();
  }
  uint32_t freqs[256];
  int scale_bits = 0;
  auto table = ReadTable(stream, size, alphabet, &scale_bits, freqs);
  FEDRT_RETURN_IF_ERROR(table.status());
  if (count == 0) return Corrupt("rANS stream for zero symbols");
  std::size_t at = *table;
  if (size - at < kStatesSize) return Corrupt("rANS stream has no initial states");
  uint32_t states[kRansLanes];
  for (int j = 0; j < kRansLanes; ++j) {
    states[j] = LoadLe32(stream + at + 4 * j);
    if (states[j] < kRansLow || states[j] >= (kRansLow << 16)) {
      return Corrupt("rANS initial state of lane " + std::to_string(j) + " out of range");
    }
  }
  at += kStatesSize;
  if ((size - at) % 2 != 0) return Corrupt("rANS stream has an odd number of word bytes");

  RansDecodeTable decoder;
  decoder.scale_bits = scale_bits;
  uint32_t cumulative = 0;
  for (uint32_t s = 0; s < 256; ++s) {
    decoder.freq[s] = freqs[s];
    decoder.start[s] = cumulative;
    if (freqs[s] != 0) {
      std::memset(decoder.slot_symbol + cumulative, static_cast<int>(s), freqs[s]);
      decoder.alphabet = s + 1;
    }
    cumulative += freqs[s];
  }
  const std::size_t decoded = RansKernelsFor(ActiveIsa()).decode(stream, size, &at, count, decoder, states, symbols);
  if (decoded != count) return Corrupt("rANS stream ends early at symbol " + std::to_string(decoded));
  for (int j = 0; j < kRansLanes; ++j) {
    if (states[j] != kRansLow) return Corrupt("rANS stream does not end in the initial states");
  }
  if (at != size) return Corrupt("rANS stream has " + std::to_string(size - at) + " trailing bytes");
  return Status::Ok();
}

}  // namespace fedrt::codec_internal

namespace fedrt {

const RansKernels& RansKernelsFor(Isa requested) {
  static const RansKernels kScalar = {&scalar::RansHistogram, &scalar::RansEncodeLanes, &scalar::RansDecodeLanes};
  switch (Avx2ForAvx512(requested)) {
#if FEDRT_HAVE_AVX2_KERNELS
    case Isa::kAvx2: {
      static const RansKernels kAvx2 = {&avx2::RansHistogram, &avx2::RansEncodeLanes, &avx2::RansDecodeLanes};
      return kAvx2;
    }
#endif
#if FEDRT_HAVE_NEON_KERNELS && defined(__aarch64__)
    case Isa::kNeon: {
      static const RansKernels kNeon = {&scalar::RansHistogram, &scalar::RansEncodeLanes, &neon::RansDecodeLanes};
      return kNeon;
    }
#endif
    default: return kScalar;
  }
}

}  // namespace fedrt
