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

// Encodes a whole payload as the frames of message `m` (RoundInstructions,
// Update, RingChunk or GossipModel): chunk 0 carries every field of `m`, later
// chunks what the message's Encode keeps for continuations. The payload is
// copied once, into the frames. The frames are immutable and shareable: the
// aggregator encodes a model once and queues the same frames on every
// device's connection.
template <typename Message>
Result<std::vector<OutFrame>> EncodeChunked(Message m, const uint8_t* payload, uint64_t size,
                                            const FrameLimits& limits) {
  Result<ChunkPlan> plan = ChunkPlan::Make(size, limits.MaxChunkBytes());
  if (!plan.ok()) return plan.status();
  std::vector<OutFrame> frames;
  frames.reserve(plan->count());
  for (uint32_t i = 0; i < plan->count(); ++i) {
    m.payload = plan->Chunk(i, payload);
    Result<OutFrame> frame = Encode(m, limits);
    if (!frame.ok()) return frame.status();
    frames.push_back(std::move(*frame));
  }
  return frames;
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
