// The payload header shared by every codec (codecs/README.md, "Payload format").
//
// Layout, little-endian, kPayloadHeaderSize = 48 bytes:
//   offset size field
//   0      4    magic "FRTC" (0x43545246 read as u32)
//   4      1    format version (kPayloadVersion)
//   5      1    codec id (CodecId)
//   6      2    flags (PayloadFlag bits)
//   8      8    d, the number of coordinates
//   16     4    bucket size b (0 = one bucket)
//   20     4    round
//   24     4    tensor id
//   28     4    sender id
//   32     4    spec size: bytes of the canonical codec spec that follow the header
//   36     4    body size: bytes of codec data after the spec
//   40     4    seed check: PayloadSeedCheck(session seed, round, tensor, sender)
//   44     4    CRC32C (Castagnoli) of header bytes 0..43, then spec, then body
// then the spec string (not NUL-terminated), then the body.
//
// The seed check lets a decoder tell a payload encoded under another session
// seed (whose dither and rounding streams it cannot reproduce: decoding would
// give plausible but wrong floats) from a good one: the codecs refuse such a
// payload with kFailedPrecondition naming the seed check. Version 1 payloads
// (44-byte header, no seed check; builds before it) are refused as
// kUnsupported naming both versions.
//
// The header carries the canonical spec so that a payload names its codec and
// every parameter: `fedrt codec decode` and an aggregator can check that a
// payload was made with the codec they expect.
//
// Thread-safety: pure functions.
#ifndef FEDRT_CODECS_PAYLOAD_H_
#define FEDRT_CODECS_PAYLOAD_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fedrt/platform/status.h"

namespace fedrt {

inline constexpr uint32_t kPayloadMagic = 0x43545246u;  // "FRTC" in memory order
inline constexpr uint8_t kPayloadVersion = 2;
inline constexpr std::size_t kPayloadHeaderSize = 48;
// Longest canonical spec a payload may carry.
inline constexpr std::size_t kMaxSpecSize = 256;

// Pinned: these numbers are on the wire.
enum class CodecId : uint8_t {
  kFp32 = 1,
  kFp16 = 2,
  kBf16 = 3,
  kQsgd = 4,
  kTernGrad = 5,
  kSign = 6,
  kDqsg = 7,
  kNdqsg = 8,
  kAlq = 9,
  kAmq = 10,
  kTopK = 11,
  kRandK = 12,
  kRTopK = 13,
  kMoniqua = 14,
};

// Flag bits. Codecs define the meaning of the symbol-coding bits for their body.
enum PayloadFlag : uint16_t {
  kFlagSymbolsRans = 1u << 0,    // symbols entropy coded (rANS, frequency table in body)
  kFlagSymbolsPacked = 1u << 1,  // symbols at a fixed number of bits each
  kFlagSymbolsBase3 = 1u << 2,   // 3-symbol alphabet packed 5 trits per byte
  kFlagErrorFeedback = 1u << 3,  // the sender used error feedback (informational)
  kFlagValuesFp16 = 1u << 4,     // sparsifier values sent as fp16
  kFlagIndicesImplicit = 1u << 5,// indices derived from the shared seed (random-k)
};

struct PayloadHeader {
  CodecId codec = CodecId::kFp32;
  uint16_t flags = 0;
  uint64_t d = 0;
  uint32_t bucket = 0;
  uint32_t round = 0;
  uint32_t tensor_id = 0;
  uint32_t sender_id = 0;
  uint32_t spec_size = 0;
  uint32_t body_size = 0;
  uint32_t seed_check = 0;
  uint32_t crc = 0;
};

// The seed check of a payload: the CRC32C of the session seed (u64), round,
// tensor id and sender id (u32 each), little-endian, 20 bytes in that order.
uint32_t PayloadSeedCheck(uint64_t session_seed, uint32_t round, uint32_t tensor_id, uint32_t sender_id);

// A validated view of a payload: header, spec and body inside the caller's
// bytes (valid while they are).
struct PayloadView {
  PayloadHeader header;
  std::string_view spec;  // inside the caller's bytes
  const uint8_t* body = nullptr;
  std::size_t body_size = 0;
};

// Checks magic, version, codec id, sizes (spec and body inside `size`, no
// trailing bytes) and the CRC. Errors are kCorrupt (or kUnsupported for a
// newer format version) with a message saying what is wrong.
Result<PayloadView> ParsePayload(const uint8_t* data, std::size_t size);

// Writes the header for `spec` + body already placed at
// out + kPayloadHeaderSize + spec.size(); computes the CRC over both.
// `out` must hold kPayloadHeaderSize + spec.size() + header.body_size bytes.
void FinishPayload(PayloadHeader header, std::string_view spec, uint8_t* out);

// CRC32C (Castagnoli polynomial, reflected, init and xor-out 0xFFFFFFFF).
uint32_t Crc32c(const uint8_t* data, std::size_t size, uint32_t crc = 0);

// Little-endian helpers for codec bodies (the wire is little-endian on every host).
inline void StoreLe32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}
inline uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
inline void StoreLe64(uint8_t* p, uint64_t v) {
  StoreLe32(p, static_cast<uint32_t>(v));
  StoreLe32(p + 4, static_cast<uint32_t>(v >> 32));
}
inline uint64_t LoadLe64(const uint8_t* p) {
  return static_cast<uint64_t>(LoadLe32(p)) | (static_cast<uint64_t>(LoadLe32(p + 4)) << 32);
}
void StoreFloatLe(uint8_t* p, float v);
float LoadFloatLe(const uint8_t* p);
// Bulk versions: a plain copy on little-endian hosts (all supported targets).
void StoreFloatsLe(const float* values, std::size_t count, uint8_t* p);
void LoadFloatsLe(const uint8_t* p, std::size_t count, float* values);

}  // namespace fedrt

#endif  // FEDRT_CODECS_PAYLOAD_H_
