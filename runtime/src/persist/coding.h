// Little-endian byte coding for every file the runtime writes (model
// checkpoints, aggregator checkpoints, the device state): an appending Writer,
// a bounds-checked Reader, and the frame those files share:
//
//   8 bytes magic, u32 version, the format's fields, u32 CRC-32C of every
//   byte before it.
//
// Values: u8 to u64 and i32 / i64 (two's complement) little-endian, f32 and
// f64 as their IEEE-754 bits, float and double arrays as consecutive f32 /
// f64 (the format stores the count where it wants it), strings as a u32
// length and the bytes. The CRC is the codecs' Crc32c (Castagnoli): one CRC
// for payloads and files.
//
// Reading is a trust boundary. Every read checks the bytes left first and
// the first failure sticks: later reads give zeros and empty values, so a
// decoder reads a group of fields and checks ok() once, where its error
// message belongs. Counts are bounded by the bytes left before anything is
// allocated.
//
// Portable: no files and no OS calls (the firmware build compiles it);
// persist/file.h reads and writes the files. The Writer owns its bytes; a
// Reader borrows the caller's, which must outlive it.
//
// Thread-safety: values; one thread per object.
#ifndef FEDRT_RUNTIME_SRC_PERSIST_CODING_H_
#define FEDRT_RUNTIME_SRC_PERSIST_CODING_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt::persist {

inline constexpr std::size_t kMagicSize = 8;
// Magic, version and CRC: the smallest framed file.
inline constexpr std::size_t kFrameOverhead = kMagicSize + 4 + 4;

class Writer {
 public:
  Writer() = default;
  // Starts a framed file: the magic, then the version.
  Writer(const char (&magic)[kMagicSize], uint32_t version);

  void U8(uint8_t v) { bytes_.push_back(v); }
  void U16(uint16_t v);
  void U32(uint32_t v);
  void U64(uint64_t v);
  void I32(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F32(float v);
  void F64(double v);  // its bits as a u64
  void F32s(const float* values, std::size_t count);
  void F32s(const std::vector<float>& values) { F32s(values.data(), values.size()); }
  void F64s(const double* values, std::size_t count);  // consecutive F64
  // A u32 length, then the bytes.
  void String(const std::string& s);
  void Bytes(const void* data, std::size_t size);

  std::size_t size() const { return bytes_.size(); }
  // Appends the CRC-32C of every byte so far and hands the bytes over.
  std::vector<uint8_t> Finish() &&;
  // Hands the bytes over as they are: for formats with a checksum of their
  // own (ZIP's CRC-32 in .npz).
  std::vector<uint8_t> Take() && { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  Reader() = default;
  Reader(const uint8_t* data, std::size_t size) : p_(data), left_(size) {}

  bool ok() const { return ok_; }
  std::size_t left() const { return left_; }
  // Every read succeeded and every byte was read.
  bool AtEnd() const { return ok_ && left_ == 0; }
  // Marks the reader failed: a decoder's own check (a count out of range).
  void Fail() { ok_ = false; }

  uint8_t U8();
  uint16_t U16();
  uint32_t U32();
  uint64_t U64();
  int32_t I32() { return static_cast<int32_t>(U32()); }
  int64_t I64() { return static_cast<int64_t>(U64()); }
  float F32();
  double F64();
  // `count` floats into *out (resized); fails, allocating nothing, when fewer
  // than 4 * count bytes are left.
  void F32s(uint64_t count, std::vector<float>* out);
  // `count` doubles into out[0..count); fails, writing nothing, when fewer
  // than 8 * count bytes are left.
  void F64s(std::size_t count, double* out);
  // A u32 length and that many bytes; fails when the length exceeds
  // `max_size` or the bytes left.
  std::string String(std::size_t max_size);
  // `n` bytes in place; nullptr on failure.
  const uint8_t* Bytes(std::size_t n);

 private:
  const uint8_t* Take(std::size_t n);

  const uint8_t* p_ = nullptr;
  std::size_t left_ = 0;
  bool ok_ = true;
};

// Opens a framed file: checks that `data` starts with `magic` and holds at
// least kFrameOverhead bytes, then gives the version and a reader over the
// fields (after the version, before the CRC). kCorrupt otherwise, as
// "<name>: not <kind> (bad magic)" or "<name>: truncated". The CRC is not
// checked here: a format checks it after deciding which versions it reads.
Status OpenFrame(const uint8_t* data, std::size_t size, const char (&magic)[kMagicSize], const std::string& name,
                 const char* kind, uint32_t* version, Reader* fields);

// Whether the last 4 bytes are the CRC-32C of the bytes before them.
bool Crc32cTrailerMatches(const uint8_t* data, std::size_t size);

}  // namespace fedrt::persist

#endif  // FEDRT_RUNTIME_SRC_PERSIST_CODING_H_
