// Index coding for the sparsifiers (codecs/README.md): a sorted
// list of distinct coordinate indices, stored as gaps with whichever of three
// variable-length codes is smallest for this list. Internal to fedrt_codecs.
//
// Gaps: g_0 = idx_0, g_j = idx_j - idx_{j-1} - 1 (>= 0 because the indices
// strictly increase). Stream layout:
//   byte 0   method: 0 varint, 1 Elias-gamma, 2 Golomb-Rice
//   byte 1   Rice parameter p (0..31; must be 0 for the other methods)
//   bytes 2. the codes of g_0 .. g_{k-1}
// varint       LEB128: 7 bits per byte, low groups first, high bit = more.
// Elias-gamma  of m = g + 1: L = floor(log2 m) zero bits, a one bit, then the
//              L bits of m below its leading one (low bit first).
// Golomb-Rice  q = g >> p zero bits, a one bit, then the p low bits of g.
// Bit codes are written LSB first into bytes; the last byte is padded with
// zero bits. The Rice parameter comes from the mean gap:
// p = floor(log2(mean * ln 2)) clamped to 0..31, the usual choice for a
// geometric gap distribution. The encoder measures the exact size of all
// three codes and keeps the smallest (ties: varint, then gamma, then Rice).
//
// The decoder treats the stream as untrusted: method and parameter must be
// valid, every index must be < d, codes must not run past the stream or
// overflow, the padding must be zero and the stream must be consumed exactly.
// Strictly increasing indices follow from the gap form.
#ifndef FEDRT_CODECS_SPARSE_INDEX_CODING_H_
#define FEDRT_CODECS_SPARSE_INDEX_CODING_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/platform/status.h"

namespace fedrt::codec_internal {

enum class IndexMethod : uint8_t { kVarint = 0, kGamma = 1, kRice = 2 };

const char* IndexMethodName(IndexMethod method);

// Exact stream sizes in bytes (2 header bytes included) of each method.
struct IndexStreamSizes {
  std::size_t varint = 0;
  std::size_t gamma = 0;
  std::size_t rice = 0;
  uint8_t rice_parameter = 0;
};
IndexStreamSizes MeasureIndexStream(const uint32_t* indices, std::size_t count);

// Upper bound on the stream size of `count` indices below 2^32 (varint's
// worst case, 5 bytes an index, plus the header: the smallest code never
// exceeds it).
inline std::size_t MaxIndexStreamSize(std::size_t count) { return 2 + 5 * count; }

// Encodes indices[0..count) (strictly increasing; the caller guarantees it)
// into out[0..capacity). Returns the bytes written; *method tells which code won.
Result<std::size_t> EncodeIndices(const uint32_t* indices, std::size_t count, uint8_t* out,
                                  std::size_t capacity, IndexMethod* method = nullptr);

// Decodes exactly `count` indices, each < d, from stream[0..size), which must
// be consumed completely. kCorrupt for anything malformed.
Status DecodeIndices(const uint8_t* stream, std::size_t size, std::size_t count, uint64_t d,
                     uint32_t* indices);

// Reads a stream index by index (for decoders that scatter as they go).
// Validate the stream with DecodeIndices-like checks first when acting on a
// partly decoded stream would be harmful: ValidateIndices does that without
// writing anything.
class IndexStreamReader {
 public:
  // Checks the two header bytes. kCorrupt if the method or parameter is invalid.
  Status Open(const uint8_t* stream, std::size_t size, std::size_t count, uint64_t d);
  // The next index. kCorrupt on a malformed code or an index >= d.
  Status Next(uint32_t* index);
  // After `count` calls to Next: kCorrupt unless the stream was consumed
  // exactly (only zero padding bits left in the last byte).
  Status Finish() const;

 private:
  bool ReadBits(int n, uint64_t* value);
  bool CountZeros(uint64_t limit, uint64_t* zeros);

  const uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t byte_ = 0;  // varint: next byte; bit codes: bit position / 8
  uint64_t bit_ = 0;      // bit codes: next bit position
  uint64_t d_ = 0;
  uint64_t next_min_ = 0;  // smallest value the next index may take
  IndexMethod method_ = IndexMethod::kVarint;
  int parameter_ = 0;
};

// Decodes and checks the whole stream without output.
Status ValidateIndices(const uint8_t* stream, std::size_t size, std::size_t count, uint64_t d);

}  // namespace fedrt::codec_internal

#endif  // FEDRT_CODECS_SPARSE_INDEX_CODING_H_
