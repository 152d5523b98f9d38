#include "common/codec_common.h"
#include "fedrt/platform/concat.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace fedrt {

Status Codec::DecodeAccumulate(const uint8_t* payload, std::size_t size, const CodecContext& context,
                               float weight, float* accumulator, std::size_t d,
                               const float* side_info) const {
  std::vector<float> heap;
  float* decoded = static_cast<float*>(Workspace(d * sizeof(float)));
  if (decoded == nullptr) {
    heap.resize(d);
    decoded = heap.data();
  }
  FEDRT_RETURN_IF_ERROR(Decode(payload, size, context, decoded, d, side_info));
  for (std::size_t i = 0; i < d; ++i) accumulator[i] += weight * decoded[i];
  return Status::Ok();
}

Codec::~Codec() {
  if (owns_workspace_) ::operator delete(workspace_);
}

CodecSpecText& CodecSpecText::operator+=(std::string_view part) {
  const std::size_t n = part.size() < kMaxCodecSpecSize - size_ ? part.size() : kMaxCodecSpecSize - size_;
  std::memcpy(text_ + size_, part.data(), n);
  size_ += n;
  text_[size_] = '\0';
  return *this;
}

Status CheckFinite(const float* values, std::size_t d) {
  // Branch-free scan first (the compiler vectorizes it): a float is NaN or Inf
  // exactly when its exponent bits are all ones. Only on a hit is the index looked up.
  uint32_t any_bad = 0;
  for (std::size_t i = 0; i < d; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    any_bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  if (any_bad == 0) return Status::Ok();
  for (std::size_t i = 0; i < d; ++i) {
    if (!std::isfinite(values[i])) {
      return InvalidArgument(Concat({std::isnan(values[i]) ? "NaN" : "Inf", " at coordinate ", i, " of ", d}));
    }
  }
  return Status::Ok();
}

CodecStats MakeCodecStats(std::size_t payload_bytes, std::size_t d) {
  CodecStats stats;
  stats.payload_bytes = payload_bytes;
  stats.bits_per_coordinate = d == 0 ? 0.0 : 8.0 * static_cast<double>(payload_bytes) / static_cast<double>(d);
  return stats;
}

namespace codec_internal {

const char* SymbolCodingName(SymbolCoding coding) {
  switch (coding) {
    case SymbolCoding::kNone: return "none";
    case SymbolCoding::kPack: return "pack";
    case SymbolCoding::kRans: return "rans";
  }
  return "?";
}

Result<CommonOptions> ParseCommonOptions(const CodecSpec& spec, bool default_error_feedback,
                                         SymbolCoding default_coding) {
  CommonOptions options;
  auto ef = spec.GetChoice("ef", default_error_feedback ? "on" : "off", {"on", "off"});
  FEDRT_RETURN_IF_ERROR(ef.status());
  options.error_feedback = *ef == "on";
  auto ec = spec.GetChoice("ec", SymbolCodingName(default_coding), {"none", "pack", "rans"});
  FEDRT_RETURN_IF_ERROR(ec.status());
  options.coding = *ec == "none" ? SymbolCoding::kNone : *ec == "pack" ? SymbolCoding::kPack : SymbolCoding::kRans;
  return options;
}

std::string CommonOptionsSuffix(const CommonOptions& options, bool has_symbols) {
  std::string suffix = std::string("ef=") + (options.error_feedback ? "on" : "off");
  if (has_symbols) suffix += std::string(",ec=") + SymbolCodingName(options.coding);
  return suffix;
}

void AppendCommonOptions(const CommonOptions& options, bool has_symbols, CodecSpecText* spec) {
  *spec += options.error_feedback ? "ef=on" : "ef=off";
  if (has_symbols) {
    *spec += ",ec=";
    *spec += SymbolCodingName(options.coding);
  }
}

void AppendInt(int64_t value, CodecSpecText* spec) {
  char digits[24];
  const int n = std::snprintf(digits, sizeof digits, "%lld", static_cast<long long>(value));
  *spec += std::string_view(digits, static_cast<std::size_t>(n));
}

Result<PayloadView> OpenPayload(const uint8_t* data, std::size_t size, CodecId codec,
                                std::string_view spec, const CodecContext& context, std::size_t d) {
  auto view = ParsePayload(data, size);
  FEDRT_RETURN_IF_ERROR(view.status());
  const PayloadHeader& h = view->header;
  if (h.codec != codec || view->spec != spec) {
    return InvalidArgument("payload was encoded with '" + std::string(view->spec) + "', this decoder is '" +
                           std::string(spec) + "'");
  }
  if (h.d != d) {
    return InvalidArgument(Concat({"payload has ", h.d, " coordinates, expected ", d}));
  }
  if (h.round != context.round || h.tensor_id != context.tensor_id || h.sender_id != context.sender_id) {
    return Status(StatusCode::kFailedPrecondition,
                  Concat({"payload is for round ", h.round, ", tensor ", h.tensor_id, ", sender ", h.sender_id,
                          "; expected round ", context.round, ", tensor ", context.tensor_id,
                          ", sender ", context.sender_id}));
  }
  const uint32_t check = PayloadSeedCheck(context.session_seed, context.round, context.tensor_id, context.sender_id);
  if (h.seed_check != check) {
    // Decoding would run other dither and rounding streams: plausible, wrong floats.
    char text[96];
    std::snprintf(text, sizeof text, "payload seed check %08x, this decoder's %08x", static_cast<unsigned>(h.seed_check),
                  static_cast<unsigned>(check));
    return Status(StatusCode::kFailedPrecondition,
                  std::string("payload was encoded under another session seed (") + text +
                      "): sender and receiver must agree on the seed");
  }
  return view;
}

PayloadHeader MakeHeader(CodecId codec, const CodecContext& context, std::size_t d, uint32_t bucket,
                         uint16_t flags, std::size_t body_size) {
  PayloadHeader h;
  h.codec = codec;
  h.flags = flags;
  h.d = d;
  h.bucket = bucket;
  h.round = context.round;
  h.tensor_id = context.tensor_id;
  h.sender_id = context.sender_id;
  h.seed_check = PayloadSeedCheck(context.session_seed, context.round, context.tensor_id, context.sender_id);
  h.body_size = static_cast<uint32_t>(body_size);
  return h;
}

}  // namespace codec_internal
}  // namespace fedrt
