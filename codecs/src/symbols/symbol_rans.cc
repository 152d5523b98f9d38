// Static-model rANS over byte symbols (scalar).
//
// Stream layout (all inside the symbol stream, after the codec's scales):
//   byte 0    scale bits L in 1..kRansMaxScaleBits (frequencies sum to 2^L),
//             or 0 for a stream of one repeated symbol: then byte 1 is that
//             symbol and the stream ends (2 bytes in all).
//   byte 1    `last`, the highest symbol present (< alphabet).
//   table     for symbols 0..last, its frequency as LEB128 (1 or 2 bytes);
//             a zero frequency is followed by one byte r: r further symbols
//             are also absent (runs of absent symbols cost 2 bytes).
//   4 bytes   the encoder's final state, little-endian (the decoder's start).
//   rest      renormalisation bytes in the order the decoder reads them.
//
// 32-bit state x in [2^23, 2^31), byte-wise renormalisation. The encoder
// starts from x = 2^23 and runs over the symbols backwards, so the decoder
// runs forwards and must end in exactly that state having consumed every
// byte: a stream that decodes anything else is corrupt.
#include <cstring>
#include <string>

#include "fedrt/codecs/payload.h"
#include "symbols/symbol_streams.h"

namespace fedrt::codec_internal {
namespace {

constexpr uint32_t kRansLow = 1u << 23;

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
  if (!put(static_cast<uint32_t>(scale_bits)) || !put(last)) return 0;
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
  const int bits = in[0];
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
  uint32_t freqs[256];
  QuantizeFrequencies(histogram, alphabet, count, scale_bits, freqs);
  uint32_t starts[256];
  uint32_t cumulative = 0;
  for (uint32_t s = 0; s < alphabet; ++s) {
    starts[s] = cumulative;
    cumulative += freqs[s];
  }
  const std::size_t table = WriteTable(freqs, last, scale_bits, out, limit);
  if (table == 0 || limit - table < 4) return 0;

  // Code backwards from out + limit; give up when the bytes would reach the
  // table (the stream would not be shorter than the caller's fallback).
  uint8_t* const floor = out + table + 4;
  uint8_t* ptr = out + limit;
  uint32_t x = kRansLow;
  for (std::size_t i = count; i-- > 0;) {
    const uint32_t s = symbols[i];
    const uint32_t f = freqs[s];
    const uint32_t x_max = f << (31 - scale_bits);
    while (x >= x_max) {
      if (ptr == floor) return 0;
      *--ptr = static_cast<uint8_t>(x);
      x >>= 8;
    }
    x = ((x / f) << scale_bits) + (x % f) + starts[s];
  }
  const std::size_t coded = static_cast<std::size_t>(out + limit - ptr);
  StoreLe32(out + table, x);
  std::memmove(out + table + 4, ptr, coded);
  return table + 4 + coded;
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
  if (size - at < 4) return Corrupt("rANS stream has no initial state");
  uint32_t x = LoadLe32(stream + at);
  at += 4;
  if (x < kRansLow || x >= (kRansLow << 8)) return Corrupt("rANS initial state out of range");

  uint32_t starts[256];
  uint8_t slot_symbol[1u << kRansMaxScaleBits];
  uint32_t cumulative = 0;
  for (uint32_t s = 0; s < 256; ++s) {
    starts[s] = cumulative;
    if (freqs[s] != 0) std::memset(slot_symbol + cumulative, static_cast<int>(s), freqs[s]);
    cumulative += freqs[s];
  }
  const uint32_t mask = (1u << scale_bits) - 1;
  for (std::size_t i = 0; i < count; ++i) {
    const uint32_t slot = x & mask;
    const uint32_t s = slot_symbol[slot];
    symbols[i] = static_cast<uint8_t>(s);
    x = freqs[s] * (x >> scale_bits) + slot - starts[s];
    while (x < kRansLow) {
      if (at == size) return Corrupt("rANS stream ends early at symbol " + std::to_string(i));
      x = (x << 8) | stream[at++];
    }
  }
  if (x != kRansLow) return Corrupt("rANS stream does not end in the initial state");
  if (at != size) return Corrupt("rANS stream has " + std::to_string(size - at) + " trailing bytes");
  return Status::Ok();
}

}  // namespace fedrt::codec_internal
