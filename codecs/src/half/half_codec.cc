// fp16 and bf16: every coordinate cast to a 16-bit float (round to nearest
// even, saturating at the format's largest finite value; see half_kernels.h).
// Body: d little-endian uint16 bit patterns. A decoder rejects Inf/NaN bit
// patterns (an encoder never writes them) as kCorrupt.
#include "half/half_codec.h"

#include <cstring>

#include "common/codec_common.h"
#include "half/half_kernels.h"

namespace fedrt {
namespace {

using namespace codec_internal;

// Values converted per stack chunk: bounds the stack use, no allocation.
constexpr std::size_t kChunk = 256;

void StoreHalvesLe(const uint16_t* halves, std::size_t n, uint8_t* p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  std::memcpy(p, halves, 2 * n);
#else
  for (std::size_t i = 0; i < n; ++i) {
    p[2 * i] = static_cast<uint8_t>(halves[i]);
    p[2 * i + 1] = static_cast<uint8_t>(halves[i] >> 8);
  }
#endif
}

void LoadHalvesLe(const uint8_t* p, std::size_t n, uint16_t* halves) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  std::memcpy(halves, p, 2 * n);
#else
  for (std::size_t i = 0; i < n; ++i) halves[i] = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
#endif
}

enum class HalfFormat { kFp16, kBf16 };

class HalfCodec final : public Codec {
 public:
  HalfCodec(HalfFormat format, CommonOptions options)
      : format_(format),
        options_(options) {
    spec_ += format == HalfFormat::kFp16 ? "fp16:" : "bf16:";
    AppendCommonOptions(options, false, &spec_);
  }

  CodecId id() const override { return format_ == HalfFormat::kFp16 ? CodecId::kFp16 : CodecId::kBf16; }
  const CodecSpecText& spec() const override { return spec_; }
  bool wants_error_feedback() const override { return options_.error_feedback; }

  std::size_t MaxEncodedSize(std::size_t d) const override { return BodyOffset(spec_) + 2 * d; }

  Result<std::size_t> Encode(const float* input, std::size_t d, const CodecContext& context, uint8_t* out,
                             std::size_t capacity) override {
    if (capacity < MaxEncodedSize(d)) return OutOfRange(Name() + ": output buffer too small");
    if (2 * uint64_t{d} > UINT32_MAX) return OutOfRange(Name() + ": vector too long for one payload");
    FEDRT_RETURN_IF_ERROR(CheckFinite(input, d));
    const FloatToHalfFn convert = ToHalf();
    uint8_t* body = out + BodyOffset(spec_);
    uint16_t halves[kChunk];
    for (std::size_t at = 0; at < d; at += kChunk) {
      const std::size_t n = d - at < kChunk ? d - at : kChunk;
      convert(input + at, n, halves);
      StoreHalvesLe(halves, n, body + 2 * at);
    }
    FinishPayload(MakeHeader(id(), context, d, 0, 0, 2 * d), spec_, out);
    return MaxEncodedSize(d);
  }

  Status Decode(const uint8_t* payload, std::size_t size, const CodecContext& context, float* out,
                std::size_t d, const float* /*side_info*/) const override {
    return DecodeChunks(payload, size, context, d, [out](const float* values, std::size_t at, std::size_t n) {
      std::memcpy(out + at, values, n * sizeof(float));
    });
  }

  Status DecodeAccumulate(const uint8_t* payload, std::size_t size, const CodecContext& context, float weight,
                          float* accumulator, std::size_t d, const float* /*side_info*/) const override {
    return DecodeChunks(payload, size, context, d,
                        [accumulator, weight](const float* values, std::size_t at, std::size_t n) {
                          float* acc = accumulator + at;
                          for (std::size_t i = 0; i < n; ++i) acc[i] += weight * values[i];
                        });
  }

 private:
  std::string Name() const { return format_ == HalfFormat::kFp16 ? "fp16" : "bf16"; }
  static const HalfKernels& Kernels() { return HalfKernelsFor(ActiveIsa()); }
  FloatToHalfFn ToHalf() const {
    return format_ == HalfFormat::kFp16 ? Kernels().float_to_fp16 : Kernels().float_to_bf16;
  }
  HalfToFloatFn ToFloat() const {
    return format_ == HalfFormat::kFp16 ? Kernels().fp16_to_float : Kernels().bf16_to_float;
  }

  // Validates the payload, then hands each converted chunk to `sink`. Nothing
  // is written through the sink before the whole body has been checked.
  template <typename Sink>
  Status DecodeChunks(const uint8_t* payload, std::size_t size, const CodecContext& context, std::size_t d,
                      Sink sink) const {
    auto view = OpenPayload(payload, size, id(), spec_, context, d);
    FEDRT_RETURN_IF_ERROR(view.status());
    if (view->body_size != 2 * uint64_t{d}) return Corrupt(Name() + ": body size does not match d");
    const bool fp16 = format_ == HalfFormat::kFp16;
    for (std::size_t i = 0; i < d; ++i) {
      const uint16_t h = static_cast<uint16_t>(view->body[2 * i] | (view->body[2 * i + 1] << 8));
      if (fp16 ? Fp16IsNonFinite(h) : Bf16IsNonFinite(h)) {
        return Corrupt(Name() + ": Inf or NaN at coordinate " + std::to_string(i));
      }
    }
    const HalfToFloatFn convert = ToFloat();
    uint16_t halves[kChunk];
    float values[kChunk];
    for (std::size_t at = 0; at < d; at += kChunk) {
      const std::size_t n = d - at < kChunk ? d - at : kChunk;
      LoadHalvesLe(view->body + 2 * at, n, halves);
      convert(halves, n, values);
      sink(values, at, n);
    }
    return Status::Ok();
  }

  HalfFormat format_;
  CommonOptions options_;
  CodecSpecText spec_;
};

Status MakeHalfCodec(HalfFormat format, const CodecSpec& spec, CodecSlot* slot) {
  FEDRT_RETURN_IF_ERROR(spec.CheckKeys({"ef", "ec"}));
  auto options = ParseCommonOptions(spec, false, SymbolCoding::kNone);
  FEDRT_RETURN_IF_ERROR(options.status());
  return Emplace<HalfCodec>(slot, format, *options);
}

}  // namespace

Status MakeFp16Codec(const CodecSpec& spec, CodecSlot* slot) { return MakeHalfCodec(HalfFormat::kFp16, spec, slot); }
Status MakeBf16Codec(const CodecSpec& spec, CodecSlot* slot) { return MakeHalfCodec(HalfFormat::kBf16, spec, slot); }

}  // namespace fedrt
