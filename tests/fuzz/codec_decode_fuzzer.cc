// Feeds arbitrary bytes to every codec's decoder, alone and inside a
// multi-tensor (FRTT) framing. The rest of the input after the first byte is
// the payload. When the first byte's top bit is set, the payload's CRCs are
// recomputed first (a plain payload's, or a tensor set's table CRC and each
// part's) so mutations reach the body decoders instead of dying at a CRC
// check. The codec is the one the payload (or its first part) names when that
// spec is valid, else the first byte picks one; a tensor set is decoded with
// the table it announces. A decoder may reject the bytes, but must never read
// or write out of bounds (ASan), hit undefined behaviour (UBSan), return
// success with non-finite values, or touch the accumulator when it fails
// (DecodeAccumulate of a tensor set).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/codecs/tensor_set.h"

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

constexpr std::size_t kMaxD = std::size_t{1} << 20;  // keeps allocations small
constexpr uint32_t kMaxTensors = 64;

// The payload's seed check for seed 0 (the context decoding uses) and its
// CRC, so decoding gets past both.
void FixPayloadCrc(uint8_t* payload, std::size_t size) {
  if (size < fedrt::kPayloadHeaderSize) return;
  fedrt::StoreLe32(payload + 40, fedrt::PayloadSeedCheck(0, fedrt::LoadLe32(payload + 20), fedrt::LoadLe32(payload + 24),
                                                         fedrt::LoadLe32(payload + 28)));
  constexpr std::size_t kCrcAt = fedrt::kPayloadHeaderSize - 4;
  const uint32_t crc = fedrt::Crc32c(payload + fedrt::kPayloadHeaderSize, size - fedrt::kPayloadHeaderSize,
                                     fedrt::Crc32c(payload, kCrcAt));
  fedrt::StoreLe32(payload + kCrcAt, crc);
}

// The tensor sizes a tensor-set payload announces (empty: not one, or too
// large to fuzz), with its CRCs fixed when asked.
std::vector<std::size_t> TensorTable(std::vector<uint8_t>& bytes, bool fix_crc) {
  if (bytes.size() < fedrt::kTensorSetHeaderSize || fedrt::LoadLe32(bytes.data()) != fedrt::kTensorSetMagic) return {};
  const uint32_t n = fedrt::LoadLe32(bytes.data() + 8);
  if (n < 2 || n > kMaxTensors) return {};
  const std::size_t framing = fedrt::kTensorSetHeaderSize + fedrt::kTensorSetEntrySize * n;
  if (bytes.size() < framing) return {};
  std::vector<std::size_t> sizes;
  std::size_t total = 0;
  for (uint32_t t = 0; t < n; ++t) {
    const uint64_t d = fedrt::LoadLe64(bytes.data() + fedrt::kTensorSetHeaderSize + fedrt::kTensorSetEntrySize * t);
    if (d == 0 || d > kMaxD || total + d > kMaxD) return {};
    total += static_cast<std::size_t>(d);
    sizes.push_back(static_cast<std::size_t>(d));
  }
  if (fix_crc) {
    uint32_t crc = fedrt::Crc32c(bytes.data(), 12);
    crc = fedrt::Crc32c(bytes.data() + fedrt::kTensorSetHeaderSize, fedrt::kTensorSetEntrySize * n, crc);
    fedrt::StoreLe32(bytes.data() + 12, crc);
    std::size_t at = framing;
    for (uint32_t t = 0; t < n; ++t) {
      const uint32_t part =
          fedrt::LoadLe32(bytes.data() + fedrt::kTensorSetHeaderSize + fedrt::kTensorSetEntrySize * t + 8);
      if (part > bytes.size() - at) break;
      FixPayloadCrc(bytes.data() + at, part);
      at += part;
    }
  }
  return sizes;
}

void CheckFiniteOrAbort(const std::vector<float>& values) {
  for (float v : values) {
    if (!std::isfinite(v)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || Codecs().empty()) return 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  const bool fix_crc = (data[0] & 0x80) != 0;
  const std::vector<std::size_t> table = TensorTable(bytes, fix_crc);
  if (table.empty() && fix_crc) FixPayloadCrc(bytes.data(), bytes.size());
  const uint8_t* payload = bytes.data();
  const size_t payload_size = bytes.size();
  fedrt::Codec* codec_ptr = Codecs()[data[0] % Codecs().size()].get();
  std::unique_ptr<fedrt::Codec> named;
  // Decode with the payload's own claims where they parse (a tensor set:
  // those of its first part), so the fuzzer gets past the header checks and
  // into the body.
  size_t d = 64;
  fedrt::CodecContext context;
  const std::size_t first_part = table.empty() ? 0 : fedrt::kTensorSetHeaderSize + fedrt::kTensorSetEntrySize * table.size();
  auto view = fedrt::ParsePayload(payload + first_part, payload_size - first_part);
  if (view.ok()) {
    if (table.empty() && view->header.d > kMaxD) return 0;
    if (table.empty()) d = static_cast<size_t>(view->header.d);
    context.round = view->header.round;
    context.tensor_id = view->header.tensor_id;
    context.sender_id = view->header.sender_id;
    auto made = fedrt::MakeCodec(std::string(view->spec));
    if (made.ok()) {
      named = std::move(*made);
      codec_ptr = named.get();
    }
  }
  std::unique_ptr<fedrt::TensorSetCodec> set;
  if (!table.empty()) {
    auto borrowed = fedrt::TensorSetCodec::Borrow(*codec_ptr, table);
    if (!borrowed.ok()) return 0;
    set = std::move(*borrowed);
    d = set->total();
  }
  fedrt::Codec& codec = set ? static_cast<fedrt::Codec&>(*set) : *codec_ptr;
  std::vector<float> out(d), side(d, 0.25f), accumulator(d, 0.0f);
  if (codec.Decode(payload, payload_size, context, out.data(), d, side.data()).ok()) CheckFiniteOrAbort(out);
  const bool accumulated =
      codec.DecodeAccumulate(payload, payload_size, context, 0.5f, accumulator.data(), d, side.data()).ok();
  if (set && !accumulated) {
    for (float v : accumulator) {
      if (v != 0.0f) std::abort();  // a tensor set decodes every part before it adds any
    }
  }
  return 0;
}
