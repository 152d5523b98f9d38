// The C API's codecs: a handle owning the fedrt::Codec that MakeCodec made.
// The codec stays on the heap (the factories allocate it); every call after
// creation forwards to the C++ codec, which validates payloads itself.
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "capi/capi_internal.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "fedrt/fedrt.h"

struct fedrt_codec {
  std::unique_ptr<fedrt::Codec> codec;
  std::string name;  // the registered name, from the canonical spec
};

namespace {

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
  fedrt::Result<fedrt::CodecSpec> canonical = fedrt::CodecSpec::Parse((*made)->spec());
  if (!canonical.ok()) return Fail(canonical.status());
  fedrt_codec_t* handle = new (std::nothrow) fedrt_codec{std::move(made).value(), std::string(canonical->name())};
  if (handle == nullptr) {
    return Fail(fedrt::Status(fedrt::StatusCode::kResourceExhausted, "fedrt_codec_create: out of memory"));
  }
  *codec = handle;
  return FEDRT_OK;
}

void fedrt_codec_destroy(fedrt_codec_t* codec) { delete codec; }

const char* fedrt_codec_spec(const fedrt_codec_t* codec) {
  return codec != nullptr ? codec->codec->spec().c_str() : nullptr;
}

const char* fedrt_codec_name(const fedrt_codec_t* codec) {
  return codec != nullptr ? codec->name.c_str() : nullptr;
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
