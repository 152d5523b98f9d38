// Codecs in caller storage (CodecFootprintFor + ConstructCodec): the payload
// bytes equal a heap codec's, and construction, Encode, Decode and
// DecodeAccumulate make no heap allocation (counted with the replaced global
// operator new and, on glibc without a sanitizer, the malloc family).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "allocation_counter.h"
#include "doctest/doctest.h"
#include "fedrt/codecs/codec.h"

namespace fedrt {
namespace {

// Every codec the firmware uses, in the codings it can pick, plus the cheap others.
constexpr const char* kSpecs[] = {
    "fp32",           "fp16",          "bf16",         "dqsg",         "dqsg:s=3,b=256,ec=pack",
    "dqsg:ec=none",   "ndqsg",         "ndqsg:ec=pack", "ndqsg:rho=4,b=512,ec=none",
    "topk:k=0.01",    "topk:k=50,v=fp16", "rtopk:k=0.01", "randk:k=0.05,idx=list", "randk:k=0.05",
    "qsgd",           "qsgd:s=8,ec=pack", "qsgd:ec=none", "terngrad",     "sign",
};

std::vector<float> Input(std::size_t d, uint32_t seed) {
  std::vector<float> v(d);
  uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < d; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = (static_cast<float>(x >> 8) / 16777216.0f - 0.5f) * (1.0f + static_cast<float>(i % 7));
  }
  return v;
}

CodecContext Context() {
  CodecContext c;
  c.session_seed = 0xfeed;
  c.round = 4;
  c.tensor_id = 2;
  c.sender_id = 9;
  return c;
}

// Caller storage of max_align_t alignment.
struct Storage {
  explicit Storage(std::size_t bytes) : words((bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t)) {}
  void* data() { return words.data(); }
  std::vector<std::max_align_t> words;
};

TEST_CASE("a codec in caller storage encodes the heap codec's bytes and allocates nothing") {
  if (testing::CountsMalloc()) {
    MESSAGE("counting operator new and the malloc family");
  } else {
    MESSAGE("counting operator new only (the sanitizer owns malloc)");
  }
  // The counter sees a std::string's allocation.
  CHECK(testing::AllocationsDuring([] { std::string probe(100, 'x'); CHECK(probe.size() == 100); }) >= 1);
  const CodecContext context = Context();
  for (const char* spec : kSpecs) {
    // 3000: one bucket tail; 1 << 17: topk's sampled and one-pass selection.
    for (std::size_t d : {std::size_t{1}, std::size_t{3000}, std::size_t{1} << 17}) {
      const std::string name = spec;
      CAPTURE(name);
      CAPTURE(d);
      auto heap = MakeCodec(spec);
      REQUIRE(heap.ok());
      Result<CodecFootprint> footprint = CodecFootprintFor(spec, d);
      REQUIRE(footprint.ok());
      CHECK(footprint->alignment == alignof(std::max_align_t));
      Storage storage(footprint->size);
      const std::vector<float> input = Input(d, static_cast<uint32_t>(d));
      const std::size_t capacity = (*heap)->MaxEncodedSize(d);
      std::vector<uint8_t> expected(capacity), payload(capacity);
      auto expected_size = (*heap)->Encode(input.data(), d, context, expected.data(), capacity);
      REQUIRE(expected_size.ok());
      std::vector<float> side(d, 0.25f), decoded(d), accumulated(d, 1.0f), heap_accumulated(d, 1.0f);
      REQUIRE((*heap)->DecodeAccumulate(expected.data(), *expected_size, context, 0.5f, heap_accumulated.data(), d,
                                        side.data())
                  .ok());

      // Counted phase by phase, so a failure names the call that allocated.
      Codec* codec = nullptr;
      Result<std::size_t> size = 0;
      Status decode, accumulate;
      CHECK(testing::AllocationsDuring([&] {
              Result<Codec*> made = ConstructCodec(spec, d, storage.data(), footprint->size);
              if (made.ok()) codec = *made;
            }) == 0);
      REQUIRE(codec != nullptr);
      // A placed codec stages in its working space: it needs only room for
      // the payload itself (the device's payload buffer is this size).
      const std::size_t payload_bound = codec->MaxPayloadSize(d);
      CHECK(payload_bound == (*heap)->MaxPayloadSize(d));
      CHECK(codec->MaxEncodedSize(d) == payload_bound);
      CHECK(payload_bound <= capacity);
      CHECK(testing::AllocationsDuring(
                [&] { size = codec->Encode(input.data(), d, context, payload.data(), payload_bound); }) == 0);
      REQUIRE(size.ok());
      CHECK(testing::AllocationsDuring([&] {
              decode = codec->Decode(payload.data(), *size, context, decoded.data(), d, side.data());
            }) == 0);
      CHECK(testing::AllocationsDuring([&] {
              accumulate =
                  codec->DecodeAccumulate(payload.data(), *size, context, 0.5f, accumulated.data(), d, side.data());
            }) == 0);
      CHECK(codec->spec() == (*heap)->spec());
      REQUIRE(*size == *expected_size);
      CHECK(std::memcmp(payload.data(), expected.data(), *size) == 0);
      CHECK(decode.ok());
      CHECK(accumulate.ok());
      std::vector<float> heap_decoded(d);
      REQUIRE((*heap)->Decode(expected.data(), *expected_size, context, heap_decoded.data(), d, side.data()).ok());
      CHECK(std::memcmp(decoded.data(), heap_decoded.data(), 4 * d) == 0);
      CHECK(std::memcmp(accumulated.data(), heap_accumulated.data(), 4 * d) == 0);
      DestroyCodec(codec);
    }
  }
}

TEST_CASE("only a DQSG codec whose working space holds the vector encodes into MaxPayloadSize") {
  const std::size_t d = 3000;
  const std::vector<float> input = Input(d, 3);
  for (const char* spec : {"dqsg", "ndqsg", "dqsg:ec=none"}) {
    CAPTURE(std::string(spec));
    auto heap = MakeCodec(spec);
    REQUIRE(heap.ok());
    // DQSG stages d raw symbols: in the output buffer for a heap codec.
    REQUIRE((*heap)->MaxEncodedSize(d) == (*heap)->MaxPayloadSize(d) + d);
    std::vector<uint8_t> payload((*heap)->MaxEncodedSize(d));
    auto refused = (*heap)->Encode(input.data(), d, Context(), payload.data(), (*heap)->MaxPayloadSize(d));
    CHECK(refused.status().code() == StatusCode::kOutOfRange);
    // Placed for fewer coordinates: its working space cannot stage them either.
    Result<CodecFootprint> footprint = CodecFootprintFor(spec, d / 2);
    REQUIRE(footprint.ok());
    Storage storage(footprint->size);
    Result<Codec*> small = ConstructCodec(spec, d / 2, storage.data(), footprint->size);
    REQUIRE(small.ok());
    CHECK((*small)->Encode(input.data(), d, Context(), payload.data(), (*small)->MaxPayloadSize(d)).status().code() ==
          StatusCode::kOutOfRange);
    CHECK((*small)->MaxEncodedSize(d) == (*heap)->MaxEncodedSize(d));
    auto staged_in_output = (*small)->Encode(input.data(), d, Context(), payload.data(), payload.size());
    CHECK(staged_in_output.ok());
    DestroyCodec(*small);
  }
}

TEST_CASE("a codec in caller storage longer than max_d still works, allocating its scratch") {
  const std::size_t d = 5000;
  Result<CodecFootprint> footprint = CodecFootprintFor("dqsg:ec=none", 100);
  REQUIRE(footprint.ok());
  Storage storage(footprint->size);
  Result<Codec*> codec = ConstructCodec("dqsg:ec=none", 100, storage.data(), footprint->size);
  REQUIRE(codec.ok());
  const std::vector<float> input = Input(d, 7);
  std::vector<uint8_t> payload((*codec)->MaxEncodedSize(d));
  auto size = (*codec)->Encode(input.data(), d, Context(), payload.data(), payload.size());
  REQUIRE(size.ok());
  std::vector<float> out(d);
  CHECK((*codec)->Decode(payload.data(), *size, Context(), out.data(), d).ok());
  DestroyCodec(*codec);
}

TEST_CASE("constructing a codec in caller storage checks the storage and the spec") {
  Result<CodecFootprint> footprint = CodecFootprintFor("ndqsg", 1000);
  REQUIRE(footprint.ok());
  CHECK(footprint->size >= 1000);  // the symbols of a rANS decode
  Storage storage(footprint->size + 16);
  CHECK(ConstructCodec("ndqsg", 1000, storage.data(), footprint->size - 1).status().code() == StatusCode::kOutOfRange);
  CHECK(ConstructCodec("ndqsg", 1000, storage.data(), 8).status().code() == StatusCode::kOutOfRange);
  auto* misaligned = static_cast<unsigned char*>(storage.data()) + 4;
  CHECK(ConstructCodec("ndqsg", 1000, misaligned, footprint->size).status().code() == StatusCode::kInvalidArgument);
  CHECK(ConstructCodec("ndqsg", 1000, nullptr, footprint->size).status().code() == StatusCode::kInvalidArgument);
  CHECK(CodecFootprintFor("dqgs", 10).status().code() == StatusCode::kInvalidArgument);
  CHECK(CodecFootprintFor("dqsg:s=0", 10).status().code() == StatusCode::kInvalidArgument);
  CHECK(CodecFootprintFor(std::string(200, 'a'), 10).status().code() == StatusCode::kInvalidArgument);
  DestroyCodec(nullptr);
}

}  // namespace
}  // namespace fedrt
