// The C API's codecs: a handle over a fedrt::Codec, either on the heap
// (fedrt_codec_create: MakeCodec) or with the codec in the caller's memory
// (fedrt_codec_size + fedrt_codec_init: ConstructCodec). Every call after
// creation forwards to the C++ codec, which validates payloads itself.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "capi/capi_internal.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "fedrt/fedrt.h"

struct fedrt_codec {
  fedrt::Codec* codec = nullptr;
  std::unique_ptr<fedrt::Codec> owned;  // fedrt_codec_create; null in caller memory
  bool in_caller_memory = false;
  char name[16] = {};  // the registered name, from the canonical spec
};

namespace {

// The registered name: the canonical spec up to its ':' (names are short).
void SetName(fedrt_codec* handle) {
  const std::string_view spec = handle->codec->spec().view();
  const std::string_view name = spec.substr(0, spec.find(':'));
  const std::size_t n = name.size() < sizeof handle->name - 1 ? name.size() : sizeof handle->name - 1;
  std::memcpy(handle->name, name.data(), n);
  handle->name[n] = '\0';
}

// Caller memory: slack to align, the handle, then the codec's footprint.
constexpr std::size_t kAlign = alignof(std::max_align_t);
constexpr std::size_t kHandleBytes = (sizeof(fedrt_codec) + kAlign - 1) / kAlign * kAlign;

fedrt::CodecContext ToContext(const fedrt_codec_context& c) {
  fedrt::CodecContext context;
  context.session_seed = c.session_seed;
  context.round = c.round;
  context.tensor_id = c.tensor_id;
  context.sender_id = c.sender_id;
  return context;
}

}  // namespace

using fedrt::capi::Fail;
using fedrt::capi::FromStatus;

extern "C" {

fedrt_status fedrt_codec_create(const char* spec, fedrt_codec_t** codec) {
  FEDRT_C_REQUIRE(spec, "fedrt_codec_create");
  FEDRT_C_REQUIRE(codec, "fedrt_codec_create");
  fedrt::Result<std::unique_ptr<fedrt::Codec>> made = fedrt::MakeCodec(spec);
  if (!made.ok()) return Fail(made.status());
  fedrt_codec_t* handle = new (std::nothrow) fedrt_codec;
  if (handle == nullptr) {
    return Fail(fedrt::Status(fedrt::StatusCode::kResourceExhausted, "fedrt_codec_create: out of memory"));
  }
  handle->owned = std::move(made).value();
  handle->codec = handle->owned.get();
  SetName(handle);
  *codec = handle;
  return FEDRT_OK;
}

fedrt_status fedrt_codec_size(const char* spec, size_t max_d, size_t* bytes) {
  FEDRT_C_REQUIRE(spec, "fedrt_codec_size");
  FEDRT_C_REQUIRE(bytes, "fedrt_codec_size");
  fedrt::Result<fedrt::CodecFootprint> footprint = fedrt::CodecFootprintFor(spec, max_d);
  if (!footprint.ok()) return Fail(footprint.status());
  *bytes = (kAlign - 1) + kHandleBytes + footprint->size;
  return FEDRT_OK;
}

fedrt_status fedrt_codec_init(void* memory, size_t bytes, const char* spec, size_t max_d,
                              fedrt_codec_t** codec) {
  FEDRT_C_REQUIRE(memory, "fedrt_codec_init");
  FEDRT_C_REQUIRE(spec, "fedrt_codec_init");
  FEDRT_C_REQUIRE(codec, "fedrt_codec_init");
  const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(memory);
  const std::size_t skip = static_cast<std::size_t>((kAlign - start % kAlign) % kAlign);
  if (bytes < skip + kHandleBytes) {
    return Fail(fedrt::OutOfRange("fedrt_codec_init: " + std::to_string(bytes) + " bytes hold no codec"));
  }
  void* handle_at = static_cast<uint8_t*>(memory) + skip;
  void* codec_at = static_cast<uint8_t*>(handle_at) + kHandleBytes;
  fedrt::Result<fedrt::Codec*> made = fedrt::ConstructCodec(spec, max_d, codec_at, bytes - skip - kHandleBytes);
  if (!made.ok()) return Fail(made.status());
  fedrt_codec_t* handle = new (handle_at) fedrt_codec;
  handle->codec = *made;
  handle->in_caller_memory = true;
  SetName(handle);
  *codec = handle;
  return FEDRT_OK;
}

void fedrt_codec_destroy(fedrt_codec_t* codec) {
  if (codec == nullptr) return;
  if (!codec->in_caller_memory) {
    delete codec;
    return;
  }
  fedrt::DestroyCodec(codec->codec);
  codec->~fedrt_codec();
}

const char* fedrt_codec_spec(const fedrt_codec_t* codec) {
  return codec != nullptr ? codec->codec->spec().c_str() : nullptr;
}

const char* fedrt_codec_name(const fedrt_codec_t* codec) {
  return codec != nullptr ? codec->name : nullptr;
}

int fedrt_codec_needs_side_info(const fedrt_codec_t* codec) {
  return codec != nullptr && codec->codec->needs_side_info() ? 1 : 0;
}

size_t fedrt_codec_max_encoded_size(const fedrt_codec_t* codec, size_t d) {
  return codec != nullptr ? codec->codec->MaxEncodedSize(d) : 0;
}

fedrt_status fedrt_codec_encode(fedrt_codec_t* codec, const float* input, size_t d,
                                const fedrt_codec_context* context, uint8_t* out, size_t capacity,
                                size_t* written) {
  FEDRT_C_REQUIRE(codec, "fedrt_codec_encode");
  FEDRT_C_REQUIRE(input, "fedrt_codec_encode");
  FEDRT_C_REQUIRE(context, "fedrt_codec_encode");
  FEDRT_C_REQUIRE(out, "fedrt_codec_encode");
  FEDRT_C_REQUIRE(written, "fedrt_codec_encode");
  fedrt::Result<std::size_t> size = codec->codec->Encode(input, d, ToContext(*context), out, capacity);
  if (!size.ok()) return Fail(size.status());
  *written = *size;
  return FEDRT_OK;
}

fedrt_status fedrt_codec_decode(const fedrt_codec_t* codec, const uint8_t* payload, size_t size,
                                const fedrt_codec_context* context, const float* side_info, float* out,
                                size_t d) {
  FEDRT_C_REQUIRE(codec, "fedrt_codec_decode");
  FEDRT_C_REQUIRE(payload, "fedrt_codec_decode");
  FEDRT_C_REQUIRE(context, "fedrt_codec_decode");
  FEDRT_C_REQUIRE(out, "fedrt_codec_decode");
  return FromStatus(codec->codec->Decode(payload, size, ToContext(*context), out, d, side_info));
}

fedrt_status fedrt_codec_decode_accumulate(const fedrt_codec_t* codec, const uint8_t* payload, size_t size,
                                           const fedrt_codec_context* context, const float* side_info,
                                           float weight, float* accumulator, size_t d) {
  FEDRT_C_REQUIRE(codec, "fedrt_codec_decode_accumulate");
  FEDRT_C_REQUIRE(payload, "fedrt_codec_decode_accumulate");
  FEDRT_C_REQUIRE(context, "fedrt_codec_decode_accumulate");
  FEDRT_C_REQUIRE(accumulator, "fedrt_codec_decode_accumulate");
  return FromStatus(
      codec->codec->DecodeAccumulate(payload, size, ToContext(*context), weight, accumulator, d, side_info));
}

}  // extern "C"
