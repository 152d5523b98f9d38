#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "fedrt/transport/chunking.h"
#include "fedrt/transport/frame.h"
#include "fedrt/transport/messages.h"

namespace fedrt {
namespace transport {
namespace {

TEST_CASE("a chunk plan covers the payload exactly, for empty, exact and ragged sizes") {
  for (uint64_t total : {uint64_t{0}, uint64_t{1}, uint64_t{99}, uint64_t{100}, uint64_t{101}, uint64_t{1000}}) {
    Result<ChunkPlan> plan = ChunkPlan::Make(total, 100);
    REQUIRE(plan.ok());
    uint64_t covered = 0;
    ChunkSequence sequence(1000);
    for (uint32_t i = 0; i < plan->count(); ++i) {
      const ChunkView c = plan->Chunk(i, nullptr);
      CHECK(c.offset == covered);
      CHECK(c.size <= 100);
      covered += c.size;
      CHECK(sequence.Accept(c).ok());
    }
    CHECK(covered == total);
    CHECK(sequence.complete());
    CHECK(plan->count() == (total == 0 ? 1 : (total + 99) / 100));
  }
  CHECK_FALSE(ChunkPlan::Make(10, 0).ok());
  CHECK_FALSE(ChunkPlan::Make(uint64_t{1} << 40, 1).ok());
}

TEST_CASE("a payload far larger than a frame travels in chunks and is reassembled exactly") {
  FrameLimits limits;
  limits.max_frame_bytes = 256u << 10;
  std::vector<uint8_t> payload(3'000'017);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  Result<ChunkPlan> plan = ChunkPlan::Make(payload.size(), limits.MaxChunkBytes());
  REQUIRE(plan.ok());
  CHECK(plan->count() > 10);
  Reassembler reassembler(limits.max_payload_bytes);
  for (uint32_t i = 0; i < plan->count(); ++i) {
    UpdateMessage m;
    m.round_id = 4;
    m.codec_spec = "fp32";
    m.payload = plan->Chunk(i, payload.data());
    Result<OutFrame> out = Encode(m, limits);
    REQUIRE(out.ok());
    CHECK(out->body_size() <= limits.max_frame_bytes);
    std::vector<uint8_t> bytes(out->prefix(), out->prefix() + kFramePrefixBytes);
    bytes.insert(bytes.end(), out->body(), out->body() + out->body_size());
    Result<Frame> frame = ParseFrame(bytes.data(), bytes.size(), limits);
    REQUIRE(frame.ok());
    Result<UpdateMessage> got = DecodeUpdate(*frame, limits);
    REQUIRE(got.ok());
    CHECK(got->round_id == 4);
    REQUIRE(reassembler.Add(got->payload).ok());
    CHECK(reassembler.complete() == (i + 1 == plan->count()));
  }
  REQUIRE(reassembler.size() == payload.size());
  CHECK(std::memcmp(reassembler.data(), payload.data(), payload.size()) == 0);
  FrameBytes owned = reassembler.Release();
  CHECK(owned.size() == payload.size());
  CHECK_FALSE(reassembler.complete());
}

TEST_CASE("a chunked update keeps its fields in chunk 0 and reassembles exactly") {
  FrameLimits limits;
  limits.max_frame_bytes = kMinFrameBytes;
  std::vector<uint8_t> payload(200'003);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7u);
  UpdateMessage m;
  m.round_id = 5;
  m.num_samples = 321;
  m.training_loss = 1.25f;
  m.codec_spec = "dqsg:bits=2";
  Result<std::vector<OutFrame>> frames = EncodeChunked(m, payload.data(), payload.size(), limits);
  REQUIRE(frames.ok());
  REQUIRE(frames->size() > 3);
  Reassembler reassembler(payload.size());
  for (std::size_t i = 0; i < frames->size(); ++i) {
    const OutFrame& out = (*frames)[i];
    std::vector<uint8_t> bytes(out.prefix(), out.prefix() + kFramePrefixBytes);
    bytes.insert(bytes.end(), out.body(), out.body() + out.body_size());
    Result<Frame> frame = ParseFrame(bytes.data(), bytes.size(), limits);
    REQUIRE(frame.ok());
    Result<UpdateMessage> got = DecodeUpdate(*frame, limits);
    REQUIRE(got.ok());
    CHECK(got->round_id == 5);
    CHECK(got->codec_spec == (i == 0 ? "dqsg:bits=2" : ""));
    CHECK(got->num_samples == (i == 0 ? 321u : 0u));
    REQUIRE(reassembler.Add(got->payload).ok());
  }
  REQUIRE(reassembler.complete());
  CHECK(std::memcmp(reassembler.data(), payload.data(), payload.size()) == 0);
  m.codec_spec = "";  // chunk 0 must carry the codec
  CHECK_FALSE(EncodeChunked(m, payload.data(), payload.size(), limits).ok());
}

// Chunks of a 30-byte payload in 10-byte pieces.
struct Pieces {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(30, 1);
  ChunkView Chunk(uint32_t index) const {
    return ChunkView{index, 3, 30, uint64_t{index} * 10, bytes.data() + index * 10, 10};
  }
};

TEST_CASE("a chunk sequence rejects a duplicate chunk") {
  Pieces p;
  ChunkSequence s(1000);
  CHECK(s.Accept(p.Chunk(0)).ok());
  CHECK(s.Accept(p.Chunk(1)).ok());
  CHECK(s.Accept(p.Chunk(1)).code() == StatusCode::kCorrupt);
  CHECK(s.failed());
  CHECK_FALSE(s.Accept(p.Chunk(2)).ok());  // stays failed
  s.Reset();
  CHECK(s.Accept(p.Chunk(0)).ok());
}

TEST_CASE("a chunk sequence rejects a gap") {
  Pieces p;
  ChunkSequence s(1000);
  CHECK(s.Accept(p.Chunk(0)).ok());
  Status gap = s.Accept(p.Chunk(2));
  CHECK(gap.code() == StatusCode::kCorrupt);
  CHECK(gap.message().find("missing chunk 1") != std::string::npos);
}

TEST_CASE("a chunk sequence must start at chunk 0") {
  Pieces p;
  ChunkSequence s(1000);
  CHECK(s.Accept(p.Chunk(1)).code() == StatusCode::kCorrupt);
}

TEST_CASE("a chunk sequence rejects a change of count or total size") {
  Pieces p;
  ChunkSequence s(1000);
  CHECK(s.Accept(p.Chunk(0)).ok());
  ChunkView c = p.Chunk(1);
  c.count = 4;
  CHECK(s.Accept(c).code() == StatusCode::kCorrupt);
  ChunkSequence t(1000);
  CHECK(t.Accept(p.Chunk(0)).ok());
  c = p.Chunk(1);
  c.total_size = 40;
  CHECK(t.Accept(c).code() == StatusCode::kCorrupt);
}

TEST_CASE("a chunk sequence rejects an offset that skips or overlaps received bytes") {
  Pieces p;
  ChunkSequence s(1000);
  CHECK(s.Accept(p.Chunk(0)).ok());
  ChunkView c = p.Chunk(1);
  c.offset = 5;
  CHECK(s.Accept(c).code() == StatusCode::kCorrupt);
}

TEST_CASE("a chunk sequence rejects a last chunk that ends short and a payload that ends early") {
  Pieces p;
  ChunkSequence s(1000);
  CHECK(s.Accept(p.Chunk(0)).ok());
  CHECK(s.Accept(p.Chunk(1)).ok());
  ChunkView c = p.Chunk(2);
  c.size = 5;
  CHECK(s.Accept(c).code() == StatusCode::kCorrupt);
  ChunkSequence t(1000);
  c = p.Chunk(0);
  c.size = 30;  // whole payload in chunk 0 of 3
  CHECK(t.Accept(c).code() == StatusCode::kCorrupt);
}

TEST_CASE("a chunk sequence rejects chunks after the last one") {
  Pieces p;
  ChunkSequence s(1000);
  for (uint32_t i = 0; i < 3; ++i) CHECK(s.Accept(p.Chunk(i)).ok());
  CHECK(s.complete());
  CHECK(s.Accept(p.Chunk(0)).code() == StatusCode::kCorrupt);
}

TEST_CASE("a payload above the receiver limit is refused before anything is allocated") {
  Pieces p;
  Reassembler r(29);
  Status s = r.Add(p.Chunk(0));
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK(r.data() == nullptr);
}

TEST_CASE("an empty payload is one empty chunk") {
  Reassembler r(100);
  CHECK(r.Add(ChunkView{0, 1, 0, 0, nullptr, 0}).ok());
  CHECK(r.complete());
  CHECK(r.size() == 0);
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
