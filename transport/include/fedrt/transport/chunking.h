// Chunking: a payload of any size travels as frames of bounded size.
//
// The sender splits a payload of total_size bytes with ChunkPlan into `count`
// chunks of at most FrameLimits::MaxChunkBytes() bytes. The receiver checks
// the sequence with ChunkSequence (to consume chunks in place, e.g. summing an
// update as it arrives) or with Reassembler (to collect the whole payload).
//
// Rules of one payload's chunk sequence, all checked before a byte is used:
//   - chunk 0 comes first; each next chunk has index = previous index + 1
//     (a repeated index is a duplicate, a larger one a gap: both rejected);
//   - count >= 1 and total_size are the same in every chunk, and
//     total_size <= the receiver's limit (checked before allocating);
//   - offset equals the number of bytes received so far, and the chunk ends
//     within total_size; only an empty payload has an empty chunk;
//   - the last chunk (index count - 1) ends exactly at total_size.
// After a rejection the sequence stays failed until Reset().
//
// Thread-safety: none; one sequence per payload stream, used by one thread.
#ifndef FEDRT_TRANSPORT_CHUNKING_H_
#define FEDRT_TRANSPORT_CHUNKING_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/transport/frame.h"
#include "fedrt/transport/messages.h"

namespace fedrt {
namespace transport {

// How a payload is cut into chunks.
class ChunkPlan {
 public:
  // kInvalidArgument when max_chunk_bytes is 0 or the payload needs more than
  // 2^32 - 1 chunks. An empty payload is one empty chunk.
  static Result<ChunkPlan> Make(uint64_t total_size, uint32_t max_chunk_bytes);

  uint32_t count() const { return count_; }
  uint64_t total_size() const { return total_size_; }
  // The chunk fields for `index` (< count()); `data` points at payload + offset
  // (payload may be null when a PayloadFill will write the bytes).
  ChunkView Chunk(uint32_t index, const uint8_t* payload) const;

 private:
  uint64_t total_size_ = 0;
  uint32_t max_chunk_bytes_ = 1;
  uint32_t count_ = 1;
};

// Calls emit(index, count, m) for every chunk of a payload of `size` bytes,
// with m.payload set to the chunk (the one loop behind both EncodeChunked).
template <typename Message, typename Emit>
Status ForEachChunk(Message& m, const uint8_t* payload, uint64_t size, const FrameLimits& limits, Emit emit) {
  Result<ChunkPlan> plan = ChunkPlan::Make(size, limits.MaxChunkBytes());
  if (!plan.ok()) return plan.status();
  for (uint32_t i = 0; i < plan->count(); ++i) {
    m.payload = plan->Chunk(i, payload);
    FEDRT_RETURN_IF_ERROR(emit(i, plan->count(), m));
  }
  return Status::Ok();
}

// Encodes a whole payload as the frames of message `m` (RoundInstructions,
// Update, RingChunk or GossipModel): chunk 0 carries every field of `m`, later
// chunks what the message's Encode keeps for continuations. The payload is
// copied once, into the frames. The frames are immutable and shareable: the
// aggregator encodes a model once and queues the same frames on every
// device's connection.
template <typename Message>
Result<std::vector<OutFrame>> EncodeChunked(Message m, const uint8_t* payload, uint64_t size,
                                            const FrameLimits& limits) {
  std::vector<OutFrame> frames;
  const Status done = ForEachChunk(m, payload, size, limits, [&](uint32_t i, uint32_t count, const Message& chunk) {
    if (i == 0) frames.reserve(count);
    Result<OutFrame> frame = Encode(chunk, limits);
    if (!frame.ok()) return frame.status();
    frames.push_back(std::move(*frame));
    return Status::Ok();
  });
  if (!done.ok()) return done;
  return frames;
}

// The same frames built in the caller's slots (slots[i] holds chunk i;
// frames[0 .. *count) receive them) with the payload borrowed: nothing is
// allocated or copied, and the payload must stay unchanged until no slot is
// busy(). kResourceExhausted when the payload needs more than `capacity`
// slots. For messages with a slot encoder (Update). `m` is the caller's (its
// payload field is overwritten): a message kept from round to round is not
// copied, nor are its vectors.
template <typename Message>
Status EncodeChunked(Message& m, const uint8_t* payload, uint64_t size, const FrameLimits& limits, FrameSlot* slots,
                     OutFrame* frames, std::size_t capacity, std::size_t* count) {
  return ForEachChunk(m, payload, size, limits, [&](uint32_t i, uint32_t total, const Message& chunk) {
    if (total > capacity) {
      return Status(StatusCode::kResourceExhausted, "a payload of " + std::to_string(size) + " bytes needs " +
                                                        std::to_string(total) + " frames, room for " +
                                                        std::to_string(capacity));
    }
    Result<OutFrame> frame = Encode(chunk, limits, slots[i], PayloadMode::kBorrow);
    if (!frame.ok()) return frame.status();
    frames[i] = std::move(*frame);
    *count = i + 1;
    return Status::Ok();
  });
}

// Validates one payload's chunks as they arrive, without storing them.
class ChunkSequence {
 public:
  explicit ChunkSequence(uint64_t max_total_bytes) : max_total_bytes_(max_total_bytes) {}

  // Accepts the next chunk, or returns kCorrupt (inconsistent, duplicate, gap)
  // or kResourceExhausted (total_size above the limit).
  Status Accept(const ChunkView& chunk);
  void Reset();

  bool started() const { return started_; }
  bool complete() const { return complete_; }
  bool failed() const { return failed_; }
  uint64_t total_size() const { return total_size_; }
  uint64_t received() const { return received_; }

 private:
  Status Fail(Status status);

  uint64_t max_total_bytes_;
  bool started_ = false;
  bool complete_ = false;
  bool failed_ = false;
  uint32_t count_ = 0;
  uint32_t next_index_ = 0;
  uint64_t total_size_ = 0;
  uint64_t received_ = 0;
};

// Collects one payload from its chunks into owned, aligned storage allocated
// once, at chunk 0, after total_size has been checked against the limit.
class Reassembler {
 public:
  explicit Reassembler(uint64_t max_total_bytes) : sequence_(max_total_bytes) {}

  // Validates the chunk (ChunkSequence rules) and copies its bytes in place.
  // kResourceExhausted also when the storage cannot be allocated.
  Status Add(const ChunkView& chunk);
  void Reset();

  bool complete() const { return sequence_.complete(); }
  // The payload; complete when complete() is true.
  const uint8_t* data() const { return bytes_.data(); }
  uint64_t size() const { return sequence_.total_size(); }
  // Hands over the storage (size() bytes) and resets.
  FrameBytes Release();

 private:
  ChunkSequence sequence_;
  FrameBytes bytes_;
};

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_CHUNKING_H_
