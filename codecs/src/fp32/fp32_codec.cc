// fp32: the identity codec (the uncompressed baseline). Body: d floats, little-endian.
#include "fp32/fp32_codec.h"

#include <cmath>
#include <cstdint>

#include "common/codec_common.h"

namespace fedrt {
namespace {

using namespace codec_internal;

class Fp32Codec final : public Codec {
 public:
  explicit Fp32Codec(CommonOptions options)
      : options_(options) {
    spec_ += "fp32:";
    AppendCommonOptions(options, false, &spec_);
  }

  CodecId id() const override { return CodecId::kFp32; }
  const CodecSpecText& spec() const override { return spec_; }
  bool wants_error_feedback() const override { return options_.error_feedback; }

  // Saturates rather than wraps where size_t is 32 bits (Encode then
  // refuses every buffer).
  std::size_t MaxEncodedSize(std::size_t d) const override {
    const uint64_t bound = uint64_t{BodyOffset(spec_)} + 4 * uint64_t{d};
    return bound > SIZE_MAX ? SIZE_MAX : static_cast<std::size_t>(bound);
  }

  Result<std::size_t> Encode(const float* input, std::size_t d, const CodecContext& context, uint8_t* out,
                             std::size_t capacity) override {
    if (capacity < MaxEncodedSize(d) || MaxEncodedSize(d) == SIZE_MAX) {
      return OutOfRange("fp32: output buffer too small");
    }
    if (4 * uint64_t{d} > UINT32_MAX) return OutOfRange("fp32: vector too long for one payload");
    FEDRT_RETURN_IF_ERROR(CheckFinite(input, d));
    uint8_t* body = out + BodyOffset(spec_);
    StoreFloatsLe(input, d, body);
    FinishPayload(MakeHeader(CodecId::kFp32, context, d, 0, 0, 4 * d), spec_, out);
    return MaxEncodedSize(d);
  }

  Status Decode(const uint8_t* payload, std::size_t size, const CodecContext& context, float* out,
                std::size_t d, const float* /*side_info*/) const override {
    auto view = OpenPayload(payload, size, CodecId::kFp32, spec_, context, d);
    FEDRT_RETURN_IF_ERROR(view.status());
    if (view->body_size != 4 * uint64_t{d}) return Corrupt("fp32: body size does not match d");
    LoadFloatsLe(view->body, d, out);
    // A finite encoder never produces NaN or Inf; one in a payload is an attack or a bug.
    return CheckFinite(out, d);
  }

  // Fused, so it needs no d-float scratch: the payload is validated whole
  // (CRC, sizes, finiteness) before the accumulator is touched.
  Status DecodeAccumulate(const uint8_t* payload, std::size_t size, const CodecContext& context, float weight,
                          float* accumulator, std::size_t d, const float* /*side_info*/) const override {
    auto view = OpenPayload(payload, size, CodecId::kFp32, spec_, context, d);
    FEDRT_RETURN_IF_ERROR(view.status());
    if (view->body_size != 4 * d) return Corrupt("fp32: body size does not match d");
    constexpr std::size_t kChunk = 256;
    float values[kChunk];
    for (std::size_t at = 0; at < d; at += kChunk) {
      const std::size_t n = d - at < kChunk ? d - at : kChunk;
      LoadFloatsLe(view->body + 4 * at, n, values);
      for (std::size_t i = 0; i < n; ++i) {
        if (!std::isfinite(values[i])) {
          return InvalidArgument("fp32: non-finite value at coordinate " + std::to_string(at + i));
        }
      }
    }
    for (std::size_t at = 0; at < d; at += kChunk) {
      const std::size_t n = d - at < kChunk ? d - at : kChunk;
      LoadFloatsLe(view->body + 4 * at, n, values);
      for (std::size_t i = 0; i < n; ++i) accumulator[at + i] += weight * values[i];
    }
    return Status::Ok();
  }

 private:
  CommonOptions options_;
  CodecSpecText spec_;
};

}  // namespace

Status MakeFp32Codec(const CodecSpec& spec, CodecSlot* slot) {
  FEDRT_RETURN_IF_ERROR(spec.CheckKeys({"ef", "ec"}));
  auto options = ParseCommonOptions(spec, false, SymbolCoding::kNone);
  FEDRT_RETURN_IF_ERROR(options.status());
  return Emplace<Fp32Codec>(slot, *options);
}

}  // namespace fedrt
