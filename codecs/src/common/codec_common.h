// Pieces every codec implementation shares: the common spec keys (ef, ec),
// payload checks against the decoder's expectations, and header filling.
// Internal to fedrt_codecs.
#ifndef FEDRT_CODECS_COMMON_CODEC_COMMON_H_
#define FEDRT_CODECS_COMMON_CODEC_COMMON_H_

#include <cstddef>
#include <new>
#include <string>
#include <string_view>
#include <utility>

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
                                std::string_view spec, const CodecContext& context, std::size_t d);

// Appends ",ef=on,ec=rans" (CommonOptionsSuffix) to a codec's spec text.
void AppendCommonOptions(const CommonOptions& options, bool has_symbols, CodecSpecText* spec);
// Appends the decimal form of `value`.
void AppendInt(int64_t value, CodecSpecText* spec);

// Where a registry factory builds its codec: storage == nullptr puts it on
// the heap (MakeCodec), otherwise in storage[0..capacity) (ConstructCodec).
struct CodecSlot {
  void* storage = nullptr;
  std::size_t capacity = 0;
  std::size_t size = 0;  // sizeof the codec made
  Codec* made = nullptr;
};

// Largest codec object: the footprint query builds the codec in a stack
// buffer of this size to ask it for its working space.
inline constexpr std::size_t kMaxCodecObjectSize = 1024;

template <typename T, typename... Args>
Status Emplace(CodecSlot* slot, Args&&... args) {
  static_assert(sizeof(T) <= kMaxCodecObjectSize, "raise kMaxCodecObjectSize");
  static_assert(alignof(T) <= alignof(std::max_align_t), "codec storage is max_align_t aligned");
  slot->size = sizeof(T);
  if (slot->storage == nullptr) {
    slot->made = new T(std::forward<Args>(args)...);
    return Status::Ok();
  }
  if (slot->capacity < sizeof(T)) return OutOfRange("codec storage too small");
  slot->made = new (slot->storage) T(std::forward<Args>(args)...);
  return Status::Ok();
}

// Sets a codec's working space: the caller's (ConstructCodec) or, owned and
// freed with the codec, a heap codec's (MakeCodec).
struct CodecAccess {
  static void Bind(Codec* codec, void* workspace, std::size_t size, bool owned) {
    codec->workspace_ = workspace;
    codec->workspace_size_ = size;
    codec->owns_workspace_ = owned;
  }
};

// A header for `codec` from the context, ready for FinishPayload.
PayloadHeader MakeHeader(CodecId codec, const CodecContext& context, std::size_t d, uint32_t bucket,
                         uint16_t flags, std::size_t body_size);

// Bytes before the body for this spec.
inline std::size_t BodyOffset(std::string_view spec) { return kPayloadHeaderSize + spec.size(); }

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
