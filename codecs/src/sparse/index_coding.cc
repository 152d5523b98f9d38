// Gap coding of sorted index lists (see index_coding.h for the format).
#include "sparse/index_coding.h"

#include <string>

namespace fedrt::codec_internal {
namespace {

constexpr std::size_t kHeaderBytes = 2;

inline int FloorLog2(uint64_t v) {  // v >= 1
  return 63 - __builtin_clzll(v);
}

inline uint64_t Gap(const uint32_t* indices, std::size_t j) {
  return j == 0 ? indices[0] : uint64_t{indices[j]} - indices[j - 1] - 1;
}

inline std::size_t VarintBytes(uint64_t g) {
  std::size_t n = 1;
  while (g >= 0x80) {
    g >>= 7;
    ++n;
  }
  return n;
}

// LSB-first bit writer into a bounded byte buffer (capacity checked by the caller).
class BitWriter {
 public:
  explicit BitWriter(uint8_t* out) : out_(out) {}
  void Put(uint64_t bits, int n) {  // n <= 57
    acc_ |= bits << filled_;
    filled_ += n;
    while (filled_ >= 8) {
      out_[written_++] = static_cast<uint8_t>(acc_);
      acc_ >>= 8;
      filled_ -= 8;
    }
  }
  void PutZeros(uint64_t n) {
    while (n >= 32) {
      Put(0, 32);
      n -= 32;
    }
    Put(0, static_cast<int>(n));
  }
  std::size_t Flush() {
    if (filled_ > 0) out_[written_++] = static_cast<uint8_t>(acc_);
    acc_ = 0;
    filled_ = 0;
    return written_;
  }

 private:
  uint8_t* out_;
  std::size_t written_ = 0;
  uint64_t acc_ = 0;
  int filled_ = 0;
};

}  // namespace

const char* IndexMethodName(IndexMethod method) {
  switch (method) {
    case IndexMethod::kVarint: return "varint";
    case IndexMethod::kGamma: return "gamma";
    case IndexMethod::kRice: return "rice";
  }
  return "?";
}

IndexStreamSizes MeasureIndexStream(const uint32_t* indices, std::size_t count) {
  IndexStreamSizes sizes;
  if (count == 0) {
    sizes.varint = sizes.gamma = sizes.rice = kHeaderBytes;
    return sizes;
  }
  // Rice parameter from the mean gap, in integers so every platform agrees:
  // t = floor(sum * ln2 / count) with ln2 ~ 2839 / 4096; p = floor(log2 t).
  const uint64_t gap_sum = uint64_t{indices[count - 1]} + 1 - count;
  const uint64_t t = (gap_sum * 2839u) / (uint64_t{4096} * count);
  const int p = t == 0 ? 0 : (FloorLog2(t) > 31 ? 31 : FloorLog2(t));
  uint64_t varint = 0, gamma_bits = 0, rice_bits = 0;
  for (std::size_t j = 0; j < count; ++j) {
    const uint64_t g = Gap(indices, j);
    varint += VarintBytes(g);
    gamma_bits += 2 * static_cast<uint64_t>(FloorLog2(g + 1)) + 1;
    rice_bits += (g >> p) + 1 + static_cast<uint64_t>(p);
  }
  // Sizes of at most 2^32 indices fit size_t on every platform that can hold the list.
  sizes.varint = static_cast<std::size_t>(kHeaderBytes + varint);
  sizes.gamma = static_cast<std::size_t>(kHeaderBytes + (gamma_bits + 7) / 8);
  sizes.rice = static_cast<std::size_t>(kHeaderBytes + (rice_bits + 7) / 8);
  sizes.rice_parameter = static_cast<uint8_t>(p);
  return sizes;
}

Result<std::size_t> EncodeIndices(const uint32_t* indices, std::size_t count, uint8_t* out,
                                  std::size_t capacity, IndexMethod* method_out) {
  const IndexStreamSizes sizes = MeasureIndexStream(indices, count);
  IndexMethod method = IndexMethod::kVarint;
  std::size_t size = sizes.varint;
  if (sizes.gamma < size) {
    method = IndexMethod::kGamma;
    size = sizes.gamma;
  }
  if (sizes.rice < size) {
    method = IndexMethod::kRice;
    size = sizes.rice;
  }
  if (size > capacity) return OutOfRange("index stream: output buffer too small");
  if (method_out != nullptr) *method_out = method;
  out[0] = static_cast<uint8_t>(method);
  out[1] = method == IndexMethod::kRice ? sizes.rice_parameter : 0;
  uint8_t* body = out + kHeaderBytes;
  if (method == IndexMethod::kVarint) {
    std::size_t at = 0;
    for (std::size_t j = 0; j < count; ++j) {
      uint64_t g = Gap(indices, j);
      while (g >= 0x80) {
        body[at++] = static_cast<uint8_t>(g | 0x80);
        g >>= 7;
      }
      body[at++] = static_cast<uint8_t>(g);
    }
    return kHeaderBytes + at;
  }
  BitWriter writer(body);
  const int p = sizes.rice_parameter;
  for (std::size_t j = 0; j < count; ++j) {
    const uint64_t g = Gap(indices, j);
    if (method == IndexMethod::kGamma) {
      const uint64_t m = g + 1;
      const int l = FloorLog2(m);
      writer.PutZeros(static_cast<uint64_t>(l));
      writer.Put(1, 1);
      writer.Put(m & ((uint64_t{1} << l) - 1), l);
    } else {
      writer.PutZeros(g >> p);
      writer.Put(1, 1);
      writer.Put(g & ((uint64_t{1} << p) - 1), p);
    }
  }
  return kHeaderBytes + writer.Flush();
}

Status IndexStreamReader::Open(const uint8_t* stream, std::size_t size, std::size_t count, uint64_t d) {
  if (size < kHeaderBytes) return Corrupt("index stream shorter than its header");
  if (count > d) return Corrupt("index stream: more indices than coordinates");
  if (d > (uint64_t{1} << 32)) return Corrupt("index stream: d above 2^32");
  if (stream[0] > static_cast<uint8_t>(IndexMethod::kRice)) {
    return Corrupt("index stream: unknown method " + std::to_string(stream[0]));
  }
  method_ = static_cast<IndexMethod>(stream[0]);
  parameter_ = stream[1];
  if (method_ == IndexMethod::kRice ? parameter_ > 31 : parameter_ != 0) {
    return Corrupt("index stream: bad parameter " + std::to_string(parameter_));
  }
  data_ = stream + kHeaderBytes;
  size_ = size - kHeaderBytes;
  byte_ = 0;
  bit_ = 0;
  d_ = d;
  next_min_ = 0;
  return Status::Ok();
}

bool IndexStreamReader::ReadBits(int n, uint64_t* value) {  // n <= 32
  if (bit_ + static_cast<uint64_t>(n) > 8 * uint64_t{size_}) return false;
  uint64_t v = 0;
  for (int got = 0; got < n;) {
    const std::size_t byte = static_cast<std::size_t>(bit_ >> 3);
    const int offset = static_cast<int>(bit_ & 7);
    int take = 8 - offset;
    if (take > n - got) take = n - got;
    const uint64_t bits = (uint64_t{data_[byte]} >> offset) & ((1u << take) - 1);
    v |= bits << got;
    got += take;
    bit_ += static_cast<uint64_t>(take);
  }
  *value = v;
  return true;
}

// Counts zero bits up to and including the terminating one bit; fails when
// the stream ends first or more than `limit` zeros come.
bool IndexStreamReader::CountZeros(uint64_t limit, uint64_t* zeros) {
  uint64_t n = 0;
  const uint64_t end = 8 * uint64_t{size_};
  while (bit_ < end) {
    const std::size_t byte = static_cast<std::size_t>(bit_ >> 3);
    const int offset = static_cast<int>(bit_ & 7);
    const uint32_t rest = static_cast<uint32_t>(data_[byte]) >> offset;
    if (rest != 0) {
      const int tz = __builtin_ctz(rest);
      n += static_cast<uint64_t>(tz);
      if (n > limit) return false;
      bit_ += static_cast<uint64_t>(tz) + 1;
      *zeros = n;
      return true;
    }
    n += static_cast<uint64_t>(8 - offset);
    if (n > limit) return false;
    bit_ += static_cast<uint64_t>(8 - offset);
  }
  return false;
}

Status IndexStreamReader::Next(uint32_t* index) {
  uint64_t gap = 0;
  if (method_ == IndexMethod::kVarint) {
    int shift = 0;
    for (;;) {
      if (byte_ >= size_) return Corrupt("index stream ends inside a varint");
      const uint8_t b = data_[byte_++];
      if (shift > 0 && b == 0) return Corrupt("index stream: over-long varint");
      gap |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) break;
      shift += 7;
      if (shift > 28) return Corrupt("index stream: varint longer than 5 bytes");
    }
  } else if (method_ == IndexMethod::kGamma) {
    uint64_t l = 0;
    if (!CountZeros(32, &l)) return Corrupt("index stream: bad Elias-gamma prefix");
    uint64_t low = 0;
    if (!ReadBits(static_cast<int>(l), &low)) return Corrupt("index stream ends inside a gamma code");
    gap = ((uint64_t{1} << l) | low) - 1;
  } else {
    uint64_t q = 0;
    // Any valid gap is < d, so q <= (d - 1) >> p bounds the zero run.
    if (!CountZeros(d_ >> parameter_, &q)) return Corrupt("index stream: bad Rice quotient");
    uint64_t low = 0;
    if (!ReadBits(parameter_, &low)) return Corrupt("index stream ends inside a Rice code");
    gap = (q << parameter_) | low;
  }
  const uint64_t value = next_min_ + gap;
  if (gap >= d_ || value >= d_) return Corrupt("index stream: index out of range");
  *index = static_cast<uint32_t>(value);
  next_min_ = value + 1;
  return Status::Ok();
}

Status IndexStreamReader::Finish() const {
  if (method_ == IndexMethod::kVarint) {
    if (byte_ != size_) return Corrupt("index stream has trailing bytes");
    return Status::Ok();
  }
  const uint64_t used_bytes = (bit_ + 7) / 8;
  if (used_bytes != size_) return Corrupt("index stream has trailing bytes");
  if ((bit_ & 7) != 0 && (data_[size_ - 1] >> (bit_ & 7)) != 0) {
    return Corrupt("index stream: non-zero padding");
  }
  return Status::Ok();
}

Status ValidateIndices(const uint8_t* stream, std::size_t size, std::size_t count, uint64_t d) {
  IndexStreamReader reader;
  FEDRT_RETURN_IF_ERROR(reader.Open(stream, size, count, d));
  uint32_t index = 0;
  for (std::size_t j = 0; j < count; ++j) FEDRT_RETURN_IF_ERROR(reader.Next(&index));
  return reader.Finish();
}

Status DecodeIndices(const uint8_t* stream, std::size_t size, std::size_t count, uint64_t d,
                     uint32_t* indices) {
  IndexStreamReader reader;
  FEDRT_RETURN_IF_ERROR(reader.Open(stream, size, count, d));
  for (std::size_t j = 0; j < count; ++j) FEDRT_RETURN_IF_ERROR(reader.Next(&indices[j]));
  return reader.Finish();
}

}  // namespace fedrt::codec_internal
