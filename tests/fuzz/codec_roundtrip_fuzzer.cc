// Encodes arbitrary float vectors with every codec: encoding must either
// reject the input (NaN/Inf) or produce a payload within MaxEncodedSize that
// encodes identically twice and decodes successfully to finite values.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::vector<std::string> names = fedrt::CodecNames();
  const std::string& name = names[data[0] % names.size()];
  std::unique_ptr<fedrt::Codec> codec;
  for (const std::string& spec : {name, name + ":k=0.01", name + ":theta=0.5"}) {
    auto made = fedrt::MakeCodec(spec);
    if (made.ok()) {
      codec = std::move(*made);
      break;
    }
  }
  if (!codec) return 0;
  const size_t d = (size - 1) / 4;
  std::vector<float> input(d);
  if (d > 0) std::memcpy(input.data(), data + 1, 4 * d);
  std::vector<float> side(input);
  fedrt::CodecContext context;
  context.session_seed = 11;
  const size_t capacity = codec->MaxEncodedSize(d);
  std::vector<uint8_t> first(capacity), second(capacity);
  auto a = codec->Encode(input.data(), d, context, first.data(), capacity);
  auto b = codec->Encode(input.data(), d, context, second.data(), capacity);
  if (a.ok() != b.ok()) std::abort();
  if (!a.ok()) return 0;
  if (*a > capacity || *a != *b || std::memcmp(first.data(), second.data(), *a) != 0) std::abort();
  std::vector<float> out(d);
  if (!codec->Decode(first.data(), *a, context, out.data(), d, side.data()).ok()) std::abort();
  for (float v : out) {
    if (!std::isfinite(v)) std::abort();
  }
  return 0;
}
