// Little-endian byte coding and the file frame (persist/coding.h). The byte
// order helpers and the CRC are the codecs' (codecs/payload.h), so payloads
// and files agree on both.
#include "persist/coding.h"

#include <cstring>

#include "fedrt/codecs/payload.h"

namespace fedrt::persist {

Writer::Writer(const char (&magic)[kMagicSize], uint32_t version) {
  Bytes(magic, kMagicSize);
  U32(version);
}

void Writer::U16(uint16_t v) {
  U8(static_cast<uint8_t>(v));
  U8(static_cast<uint8_t>(v >> 8));
}

void Writer::U32(uint32_t v) {
  uint8_t b[4];
  StoreLe32(b, v);
  Bytes(b, sizeof(b));
}

void Writer::U64(uint64_t v) {
  uint8_t b[8];
  StoreLe64(b, v);
  Bytes(b, sizeof(b));
}

void Writer::F32(float v) {
  uint8_t b[4];
  StoreFloatLe(b, v);
  Bytes(b, sizeof(b));
}

void Writer::F64(double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  U64(bits);
}

void Writer::F32s(const float* values, std::size_t count) {
  const std::size_t at = bytes_.size();
  bytes_.resize(at + 4 * count);
  StoreFloatsLe(values, count, bytes_.data() + at);
}

void Writer::F64s(const double* values, std::size_t count) {
  const std::size_t at = bytes_.size();
  bytes_.resize(at + 8 * count);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (count > 0) std::memcpy(bytes_.data() + at, values, 8 * count);
#else
  for (std::size_t i = 0; i < count; ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, &values[i], sizeof bits);
    StoreLe64(bytes_.data() + at + 8 * i, bits);
  }
#endif
}

void Writer::String(const std::string& s) {
  U32(static_cast<uint32_t>(s.size()));
  Bytes(s.data(), s.size());
}

// resize and memcpy rather than insert: GCC 12 warns wrongly
// (-Wstringop-overflow) about inserting a small array at the end.
void Writer::Bytes(const void* data, std::size_t size) {
  if (size == 0) return;
  const std::size_t at = bytes_.size();
  bytes_.resize(at + size);
  std::memcpy(bytes_.data() + at, data, size);
}

std::vector<uint8_t> Writer::Finish() && {
  U32(Crc32c(bytes_.data(), bytes_.size()));
  return std::move(bytes_);
}

const uint8_t* Reader::Take(std::size_t n) {
  if (!ok_ || n > left_) {
    ok_ = false;
    return nullptr;
  }
  const uint8_t* at = p_;
  p_ += n;
  left_ -= n;
  return at;
}

uint8_t Reader::U8() {
  const uint8_t* p = Take(1);
  return p != nullptr ? p[0] : 0;
}

uint16_t Reader::U16() {
  const uint8_t* p = Take(2);
  return p != nullptr ? static_cast<uint16_t>(p[0] | (p[1] << 8)) : uint16_t{0};
}

uint32_t Reader::U32() {
  const uint8_t* p = Take(4);
  return p != nullptr ? LoadLe32(p) : 0;
}

uint64_t Reader::U64() {
  const uint8_t* p = Take(8);
  return p != nullptr ? LoadLe64(p) : 0;
}

float Reader::F32() {
  const uint8_t* p = Take(4);
  return p != nullptr ? LoadFloatLe(p) : 0.0f;
}

double Reader::F64() {
  const uint64_t bits = U64();
  double v = 0;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

void Reader::F64s(std::size_t count, double* out) {
  // Compared with the bytes left before multiplying: 8 * count may overflow.
  if (!ok_ || count > left_ / 8) {
    ok_ = false;
    return;
  }
  const uint8_t* p = Take(8 * count);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (count > 0) std::memcpy(out, p, 8 * count);
#else
  for (std::size_t i = 0; i < count; ++i) {
    const uint64_t bits = LoadLe64(p + 8 * i);
    std::memcpy(&out[i], &bits, sizeof bits);
  }
#endif
}

void Reader::F32s(uint64_t count, std::vector<float>* out) {
  // Compared with the bytes left before multiplying: 4 * count may overflow.
  if (!ok_ || count > left_ / 4) {
    ok_ = false;
    out->clear();
    return;
  }
  const auto n = static_cast<std::size_t>(count);
  out->resize(n);
  LoadFloatsLe(Take(4 * n), n, out->data());
}

std::string Reader::String(std::size_t max_size) {
  const uint32_t n = U32();
  if (n > max_size) ok_ = false;
  const uint8_t* p = Take(n);
  return p != nullptr ? std::string(reinterpret_cast<const char*>(p), n) : std::string();
}

const uint8_t* Reader::Bytes(std::size_t n) { return Take(n); }

Status OpenFrame(const uint8_t* data, std::size_t size, const char (&magic)[kMagicSize], const std::string& name,
                 const char* kind, uint32_t* version, Reader* fields) {
  if (size < kMagicSize || std::memcmp(data, magic, kMagicSize) != 0) {
    return Corrupt(name + ": not " + kind + " (bad magic)");
  }
  if (size < kFrameOverhead) return Corrupt(name + ": truncated (" + std::to_string(size) + " bytes)");
  *version = LoadLe32(data + kMagicSize);
  *fields = Reader(data + kMagicSize + 4, size - kFrameOverhead);
  return Status::Ok();
}

bool Crc32cTrailerMatches(const uint8_t* data, std::size_t size) {
  return size >= 4 && Crc32c(data, size - 4) == LoadLe32(data + size - 4);
}

}  // namespace fedrt::persist
