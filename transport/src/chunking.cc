// Chunk plans for senders and chunk-sequence validation for receivers
// (rules in chunking.h).
#include "fedrt/transport/chunking.h"
#include "fedrt/platform/concat.h"

#include <cstring>
#include <string>

namespace fedrt {
namespace transport {

Result<ChunkPlan> ChunkPlan::Make(uint64_t total_size, uint32_t max_chunk_bytes) {
  if (max_chunk_bytes == 0) return InvalidArgument("chunk size must be positive");
  const uint64_t count = total_size == 0 ? 1 : (total_size - 1) / max_chunk_bytes + 1;
  if (count > UINT32_MAX) return InvalidArgument("payload needs more than 2^32 - 1 chunks");
  ChunkPlan plan;
  plan.total_size_ = total_size;
  plan.max_chunk_bytes_ = max_chunk_bytes;
  plan.count_ = static_cast<uint32_t>(count);
  return plan;
}

ChunkView ChunkPlan::Chunk(uint32_t index, const uint8_t* payload) const {
  ChunkView c;
  c.index = index;
  c.count = count_;
  c.total_size = total_size_;
  c.offset = uint64_t{index} * max_chunk_bytes_;
  const uint64_t left = c.offset < total_size_ ? total_size_ - c.offset : 0;
  c.size = static_cast<std::size_t>(left < max_chunk_bytes_ ? left : max_chunk_bytes_);
  c.data = payload != nullptr ? payload + c.offset : nullptr;
  return c;
}

Status ChunkSequence::Fail(Status status) {
  failed_ = true;
  return status;
}

Status ChunkSequence::Accept(const ChunkView& c) {
  if (failed_) return Corrupt("chunk sequence already failed");
  if (complete_) return Fail(Corrupt(Concat({"chunk ", c.index, " after the last chunk"})));
  if (c.count == 0 || c.index >= c.count) return Fail(Corrupt("chunk index outside its count"));
  if (!started_) {
    if (c.index != 0) return Fail(Corrupt(Concat({"payload starts at chunk ", c.index})));
    if (c.total_size > max_total_bytes_) {
      return Fail(Status(StatusCode::kResourceExhausted,
                         Concat({"payload of ", c.total_size, " bytes exceeds the limit of ", max_total_bytes_})));
    }
    started_ = true;
    count_ = c.count;
    total_size_ = c.total_size;
  } else {
    if (c.index < next_index_) return Fail(Corrupt(Concat({"duplicate chunk ", c.index})));
    if (c.index > next_index_) {
      return Fail(Corrupt(Concat({"missing chunk ", next_index_, " (got ", c.index, ")"})));
    }
    if (c.count != count_ || c.total_size != total_size_) {
      return Fail(Corrupt(Concat({"chunk ", c.index, " changes the chunk count or payload size"})));
    }
  }
  if (c.offset != received_) {
    return Fail(Corrupt(Concat({"chunk ", c.index, " at offset ", c.offset, ", expected ", received_})));
  }
  if (c.size > total_size_ - received_) return Fail(Corrupt("chunk ends past the payload size"));
  if (c.size == 0 && total_size_ != 0) return Fail(Corrupt("empty chunk in a non-empty payload"));
  received_ += c.size;
  next_index_ = c.index + 1;
  const bool last = c.index + 1 == count_;
  if (last && received_ != total_size_) {
    return Fail(Corrupt(Concat({"last chunk ends at ", received_, " of ", total_size_, " bytes"})));
  }
  if (!last && received_ == total_size_) return Fail(Corrupt("payload complete before its last chunk"));
  complete_ = last;
  return Status::Ok();
}

void ChunkSequence::Reset() {
  started_ = complete_ = failed_ = false;
  count_ = next_index_ = 0;
  total_size_ = received_ = 0;
}

Status Reassembler::Add(const ChunkView& c) {
  const uint64_t offset = sequence_.received();
  const bool first = !sequence_.started();
  FEDRT_RETURN_IF_ERROR(sequence_.Accept(c));
  if (first) {
    if (c.total_size > SIZE_MAX) return Status(StatusCode::kResourceExhausted, "payload too large");
    Result<FrameBytes> storage = FrameBytes::Allocate(static_cast<std::size_t>(c.total_size));
    if (!storage.ok()) return storage.status();
    bytes_ = std::move(*storage);
  }
  if (c.size != 0) std::memcpy(bytes_.data() + offset, c.data, c.size);
  return Status::Ok();
}

void Reassembler::Reset() {
  sequence_.Reset();
  bytes_ = FrameBytes();
}

FrameBytes Reassembler::Release() {
  FrameBytes out = std::move(bytes_);
  sequence_.Reset();
  bytes_ = FrameBytes();
  return out;
}

}  // namespace transport
}  // namespace fedrt
