// Payload header, CRC32C and little-endian float helpers.
#include "fedrt/codecs/payload.h"

#include <cstring>

#include "crc/crc32c_kernels.h"
#include "fedrt/platform/concat.h"

namespace fedrt {
namespace {

constexpr uint8_t kMaxCodecId = static_cast<uint8_t>(CodecId::kMoniqua);
// Where the header's CRC sits: it covers the header bytes before it.
constexpr std::size_t kCrcOffset = kPayloadHeaderSize - 4;

}  // namespace

uint32_t Crc32c(const uint8_t* data, std::size_t size, uint32_t crc) {
  if (size == 0) return crc;
  return ~Crc32cUpdateFor(ActiveIsa())(~crc, data, size);
}

void StoreFloatLe(uint8_t* p, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  StoreLe32(p, bits);
}

float LoadFloatLe(const uint8_t* p) {
  const uint32_t bits = LoadLe32(p);
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

void StoreFloatsLe(const float* values, std::size_t count, uint8_t* p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (count > 0) std::memcpy(p, values, 4 * count);
#else
  for (std::size_t i = 0; i < count; ++i) StoreFloatLe(p + 4 * i, values[i]);
#endif
}

void LoadFloatsLe(const uint8_t* p, std::size_t count, float* values) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (count > 0) std::memcpy(values, p, 4 * count);
#else
  for (std::size_t i = 0; i < count; ++i) values[i] = LoadFloatLe(p + 4 * i);
#endif
}

uint32_t PayloadSeedCheck(uint64_t session_seed, uint32_t round, uint32_t tensor_id, uint32_t sender_id) {
  uint8_t bytes[20];
  StoreLe64(bytes, session_seed);
  StoreLe32(bytes + 8, round);
  StoreLe32(bytes + 12, tensor_id);
  StoreLe32(bytes + 16, sender_id);
  return Crc32c(bytes, sizeof(bytes));
}

void FinishPayload(PayloadHeader header, std::string_view spec, uint8_t* out) {
  header.spec_size = static_cast<uint32_t>(spec.size());
  // memmove: the spec may be a view of this very payload (re-sealing a
  // parsed payload after an edit).
  std::memmove(out + kPayloadHeaderSize, spec.data(), spec.size());
  StoreLe32(out + 0, kPayloadMagic);
  out[4] = kPayloadVersion;
  out[5] = static_cast<uint8_t>(header.codec);
  out[6] = static_cast<uint8_t>(header.flags);
  out[7] = static_cast<uint8_t>(header.flags >> 8);
  StoreLe64(out + 8, header.d);
  StoreLe32(out + 16, header.bucket);
  StoreLe32(out + 20, header.round);
  StoreLe32(out + 24, header.tensor_id);
  StoreLe32(out + 28, header.sender_id);
  StoreLe32(out + 32, header.spec_size);
  StoreLe32(out + 36, header.body_size);
  StoreLe32(out + 40, header.seed_check);
  // The CRC covers the header too: a flipped flag or bucket size is caught
  // like a flipped body byte.
  header.crc = Crc32c(out + kPayloadHeaderSize, spec.size() + header.body_size, Crc32c(out, kCrcOffset));
  StoreLe32(out + kCrcOffset, header.crc);
}

Result<PayloadView> ParsePayload(const uint8_t* data, std::size_t size) {
  if (data == nullptr || size < kPayloadHeaderSize) {
    return Corrupt(Concat({"payload of ", size, " bytes is shorter than the ", kPayloadHeaderSize, "-byte header"}));
  }
  if (LoadLe32(data) != kPayloadMagic) return Corrupt("payload does not start with the FRTC magic");
  if (data[4] == 1) {
    return Status(StatusCode::kUnsupported,
                  Concat({"payload format version 1 (an earlier build, without the seed check); this build reads "
                          "version ",
                          kPayloadVersion, ": update the sender"}));
  }
  if (data[4] != kPayloadVersion) {
    return Status(StatusCode::kUnsupported, Concat({"payload format version ", data[4], " (this build reads version ",
                                                    kPayloadVersion, ")"}));
  }
  if (data[5] == 0 || data[5] > kMaxCodecId) {
    return Corrupt(Concat({"payload names unknown codec id ", data[5]}));
  }
  PayloadView view;
  PayloadHeader& h = view.header;
  h.codec = static_cast<CodecId>(data[5]);
  h.flags = static_cast<uint16_t>(data[6] | (data[7] << 8));
  h.d = LoadLe64(data + 8);
  h.bucket = LoadLe32(data + 16);
  h.round = LoadLe32(data + 20);
  h.tensor_id = LoadLe32(data + 24);
  h.sender_id = LoadLe32(data + 28);
  h.spec_size = LoadLe32(data + 32);
  h.body_size = LoadLe32(data + 36);
  h.seed_check = LoadLe32(data + 40);
  h.crc = LoadLe32(data + kCrcOffset);
  if (h.spec_size == 0 || h.spec_size > kMaxSpecSize) {
    return Corrupt(Concat({"payload spec size ", h.spec_size, " is outside 1..", kMaxSpecSize}));
  }
  // 64-bit arithmetic: both sizes are at most 2^32 - 1, so the sum cannot wrap.
  const uint64_t expected = uint64_t{kPayloadHeaderSize} + h.spec_size + h.body_size;
  if (expected != size) {
    return Corrupt(Concat({"payload is ", size, " bytes but its header says ", expected}));
  }
  const uint32_t crc =
      Crc32c(data + kPayloadHeaderSize, h.spec_size + std::size_t{h.body_size}, Crc32c(data, kCrcOffset));
  if (crc != h.crc) return Corrupt("payload CRC32C mismatch (corrupted in transit?)");
  view.spec = std::string_view(reinterpret_cast<const char*>(data + kPayloadHeaderSize), h.spec_size);
  view.body = data + kPayloadHeaderSize + h.spec_size;
  view.body_size = h.body_size;
  return view;
}

}  // namespace fedrt
