// Pieces every codec implementation shares: the common spec keys (ef, ec),
// payload checks against the decoder's expectations, and header filling.
// Internal to fedrt_codecs.
#ifndef FEDRT_CODECS_COMMON_CODEC_COMMON_H_
#define FEDRT_CODECS_COMMON_CODEC_COMMON_H_

#include <string>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "fedrt/codecs/philox.h"

namespace fedrt::codec_internal {

// Symbol coding requested with `ec=` (codecs/README.md, "Codec reference").
enum class SymbolCoding { kNone, kPack, kRans };
const char* SymbolCodingName(SymbolCoding coding);

// The keys every codec accepts.
struct CommonOptions {
  bool error_feedback = false;
  SymbolCoding coding = SymbolCoding::kRans;
};
// Reads `ef` and `ec` with the codec's defaults.
Result<CommonOptions> ParseCommonOptions(const CodecSpec& spec, bool default_error_feedback,
                                         SymbolCoding default_coding);
// ",ef=on,ec=rans": the canonical suffix for the spec string.
std::string CommonOptionsSuffix(const CommonOptions& options, bool has_symbols);

// Parses the payload and checks it is for this codec (id and exact canonical
// spec), has `d` coordinates and matches the context's round, tensor and sender.
Result<PayloadView> OpenPayload(const uint8_t* data, std::size_t size, CodecId codec,
                                const std::string& spec, const CodecContext& context, std::size_t d);

// A header for `codec` from the context, ready for FinishPayload.
PayloadHeader MakeHeader(CodecId codec, const CodecContext& context, std::size_t d, uint32_t bucket,
                         uint16_t flags, std::size_t body_size);

// Bytes before the body for this spec.
inline std::size_t BodyOffset(const std::string& spec) { return kPayloadHeaderSize + spec.size(); }

// The Philox stream of `purpose` for the transfer described by `context`.
inline RandomStream StreamFor(const CodecContext& context, RandomPurpose purpose) {
  RandomStream s;
  s.seed = context.session_seed;
  s.tensor_id = context.tensor_id;
  s.round = context.round;
  s.sender_id = context.sender_id;
  s.purpose = purpose;
  return s;
}

}  // namespace fedrt::codec_internal

#endif  // FEDRT_CODECS_COMMON_CODEC_COMMON_H_
