// Error feedback wrapper (fedrt/codecs/error_feedback.h).
#include "fedrt/codecs/error_feedback.h"
#include "fedrt/platform/concat.h"

#include <algorithm>
#include <string>

namespace fedrt {

ErrorFeedback::ErrorFeedback(std::size_t d)
    : owned_(2 * d, 0.0f), residual_(owned_.data()), sum_(owned_.data() + d), d_(d) {}

ErrorFeedback::ErrorFeedback(float* residual, std::size_t d) : residual_(residual), sum_(nullptr), d_(d) { Reset(); }

void ErrorFeedback::Reset() { std::fill(residual_, residual_ + d_, 0.0f); }

namespace {
Status WrongLength(std::size_t held, std::size_t d) {
  return InvalidArgument(Concat({"error feedback holds ", held, " coordinates, got ", d}));
}
}  // namespace

Result<std::size_t> ErrorFeedback::Encode(Codec& codec, const float* g, std::size_t d, const CodecContext& context,
                                          uint8_t* out, std::size_t capacity, const float* side_info) {
  if (d != d_) return WrongLength(d_, d);
  if (sum_ == nullptr) {
    return Status(StatusCode::kFailedPrecondition, "error feedback on caller memory encodes with EncodeSum");
  }
  for (std::size_t i = 0; i < d; ++i) sum_[i] = g[i] + residual_[i];
  return EncodeSum(codec, sum_, d, context, out, capacity, side_info);
}

Result<std::size_t> ErrorFeedback::EncodeSum(Codec& codec, const float* p, std::size_t d, const CodecContext& context,
                                             uint8_t* out, std::size_t capacity, const float* side_info) {
  if (d != d_) return WrongLength(d_, d);
  auto size = codec.Encode(p, d, context, out, capacity);
  FEDRT_RETURN_IF_ERROR(size.status());
  // Decode into the residual's storage, then e = p - decoded in place.
  float* decoded = residual_;
  const float* y = codec.needs_side_info() && side_info == nullptr ? p : side_info;
  const Status status = codec.Decode(out, *size, context, decoded, d, y);
  if (!status.ok()) {
    // Only a bug (or unusable side information) gets here: the payload was just
    // made by this codec. The residual is lost; start again from zero.
    Reset();
    return status;
  }
  for (std::size_t i = 0; i < d; ++i) decoded[i] = p[i] - decoded[i];
  return *size;
}

}  // namespace fedrt
