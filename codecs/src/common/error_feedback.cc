// Error feedback wrapper (fedrt/codecs/error_feedback.h).
#include "fedrt/codecs/error_feedback.h"

#include <algorithm>
#include <string>

namespace fedrt {

ErrorFeedback::ErrorFeedback(std::size_t d) : residual_(d, 0.0f), sum_(d, 0.0f) {}

void ErrorFeedback::Reset() { std::fill(residual_.begin(), residual_.end(), 0.0f); }

Result<std::size_t> ErrorFeedback::Encode(Codec& codec, const float* g, std::size_t d, const CodecContext& context,
                                          uint8_t* out, std::size_t capacity, const float* side_info) {
  if (d != residual_.size()) {
    return InvalidArgument("error feedback holds " + std::to_string(residual_.size()) + " coordinates, got " +
                           std::to_string(d));
  }
  float* p = sum_.data();
  for (std::size_t i = 0; i < d; ++i) p[i] = g[i] + residual_[i];
  auto size = codec.Encode(p, d, context, out, capacity);
  FEDRT_RETURN_IF_ERROR(size.status());
  // Decode into the residual's storage, then e = p - decoded in place.
  float* decoded = residual_.data();
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
