// Feeds arbitrary bytes to every codec's decoder. The rest of the input after
// the first byte is the payload. When the first byte's top bit is set, the
// payload's CRC is recomputed first so mutations reach the body decoders
// instead of dying at the CRC check. The codec is the one the payload names
// when that spec is valid, else the first byte picks one. A decoder may reject the bytes, but must
// never read or write out of bounds (ASan), hit undefined behaviour (UBSan),
// or return success with non-finite values.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"

namespace {

// Canonical codecs, created once: the fuzzer spends its time in decoders.
std::vector<std::unique_ptr<fedrt::Codec>>& Codecs() {
  static auto* codecs = [] {
    auto* list = new std::vector<std::unique_ptr<fedrt::Codec>>();
    for (const std::string& name : fedrt::CodecNames()) {
      // Codecs that need keys get a typical value.
      for (const std::string& spec : {name, name + ":k=0.01", name + ":theta=0.5"}) {
        auto codec = fedrt::MakeCodec(spec);
        if (codec.ok()) {
          list->push_back(std::move(*codec));
          break;
        }
      }
    }
    return list;
  }();
  return *codecs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || Codecs().empty()) return 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if ((data[0] & 0x80) != 0 && bytes.size() >= fedrt::kPayloadHeaderSize) {
    // The seed check of seed 0 (the context below), so decoding gets past it.
    fedrt::StoreLe32(bytes.data() + 40, fedrt::PayloadSeedCheck(0, fedrt::LoadLe32(bytes.data() + 20),
                                                                fedrt::LoadLe32(bytes.data() + 24),
                                                                fedrt::LoadLe32(bytes.data() + 28)));
    constexpr std::size_t kCrcAt = fedrt::kPayloadHeaderSize - 4;
    const uint32_t crc = fedrt::Crc32c(bytes.data() + fedrt::kPayloadHeaderSize,
                                       bytes.size() - fedrt::kPayloadHeaderSize, fedrt::Crc32c(bytes.data(), kCrcAt));
    fedrt::StoreLe32(bytes.data() + kCrcAt, crc);
  }
  const uint8_t* payload = bytes.data();
  const size_t payload_size = bytes.size();
  fedrt::Codec* codec_ptr = Codecs()[data[0] % Codecs().size()].get();
  std::unique_ptr<fedrt::Codec> named;
  // Decode with the payload's own claims where they parse, so the fuzzer gets
  // past the header checks and into the body.
  size_t d = 64;
  fedrt::CodecContext context;
  auto view = fedrt::ParsePayload(payload, payload_size);
  if (view.ok()) {
    if (view->header.d > (1u << 20)) return 0;  // keep allocations small
    d = static_cast<size_t>(view->header.d);
    context.round = view->header.round;
    context.tensor_id = view->header.tensor_id;
    context.sender_id = view->header.sender_id;
    auto made = fedrt::MakeCodec(std::string(view->spec));
    if (made.ok()) {
      named = std::move(*made);
      codec_ptr = named.get();
    }
  }
  fedrt::Codec& codec = *codec_ptr;
  std::vector<float> out(d), side(d, 0.25f), accumulator(d, 0.0f);
  if (codec.Decode(payload, payload_size, context, out.data(), d, side.data()).ok()) {
    for (float v : out) {
      if (!std::isfinite(v)) std::abort();
    }
  }
  (void)codec.DecodeAccumulate(payload, payload_size, context, 0.5f, accumulator.data(), d, side.data());
  return 0;
}
