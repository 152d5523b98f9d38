// IWP-sparse all-reduce (collectives.h, IwpAllReduce): the step's leader
// sends its index set around the ring as one RingChunk of phase
// kIndexBroadcast (count, 4 bytes little-endian, then the compact index
// coding); everyone but the leader's left neighbour forwards it. Then every
// peer gathers its accumulator at those indices and a dense ring sums them.
#include <algorithm>

#include "collectives/ring.h"
#include "common/block_carver.h"
#include "fedrt/runtime/collectives.h"

namespace fedrt {
namespace peer {

namespace {

// The index broadcast's buffer (count, then the coded indices) and the
// gathered values, for models of d floats.
std::size_t IndexBytes(std::size_t d) { return AlignUp(4 + IwpMaxEncodedIndicesSize(d), kCollectiveAlignment); }

}  // namespace

IwpAllReduce::IwpAllReduce(CollectiveContext& context, RingAllReduce& sum) : context_(context), sum_(sum) {}

Result<std::size_t> IwpAllReduce::RequiredBytes(const CollectiveShape& shape) {
  return IndexBytes(shape.d) + shape.d * sizeof(float);
}

Status IwpAllReduce::Bind(void* memory, std::size_t size, const CollectiveShape& shape) {
  const std::size_t index_bytes = IndexBytes(shape.d);
  FEDRT_RETURN_IF_ERROR(internal::CheckCollectiveMemory(memory, size, index_bytes + shape.d * sizeof(float),
                                                        kCollectiveAlignment, "IwpAllReduce"));
  auto* base = static_cast<unsigned char*>(memory);
  encoded_.Bind(base, index_bytes);
  // Aligned: CheckCollectiveMemory checked the block, and IndexBytes rounds up.
  gathered_.Bind(static_cast<float*>(static_cast<void*>(base + index_bytes)), shape.d);
  return Status::Ok();
}

// The index broadcast to the right neighbour, copied into a frame slot (the
// frame outlives encoded_'s and the received frame's bytes).
Status IwpAllReduce::SendIndices(const transport::RingChunkMessage& m, Deadline deadline) {
  const uint32_t to = context_.right();
  auto slot = context_.FreeSlot(to, deadline, "the IWP index set");
  if (!slot.ok()) return slot.status();
  if (*slot == nullptr) return Status::Ok();  // the neighbour has left
  return context_.Send(to, Encode(m, context_.limits(), **slot, transport::PayloadMode::kCopy));
}

Status IwpAllReduce::Run(IwpAccumulator& accumulator, const float* weights, uint64_t seed, uint32_t step,
                         std::vector<uint32_t>* indices, std::vector<float>* sums) {
  const Deadline deadline = context_.StepDeadline();
  stats_ = AllReduceStats{};
  FEDRT_RETURN_IF_ERROR(internal::CheckRing(context_));
  const std::size_t p = context_.members().size();
  const std::size_t position = context_.position();
  const uint32_t rank = context_.rank();
  const std::size_t d = accumulator.size();
  sums->clear();
  const uint32_t leader = IwpLeader(seed, step, static_cast<uint32_t>(p));
  uint64_t sent = 0;
  if (leader == position) {
    IwpStepContext context;
    context.session_seed = seed;
    context.step = step;
    context.node_id = rank;
    accumulator.SelectIndices(weights, context, indices);
  }
  if (p > 1) {
    const uint64_t collective = context_.NextCollectiveId();
    if (leader == position) {
      const std::size_t count = indices->size();
      const std::size_t need = 4 + IwpMaxEncodedIndicesSize(count);
      uint8_t* const encoded = encoded_.size() < need ? encoded_.Resize(need) : encoded_.data();
      const uint32_t c32 = static_cast<uint32_t>(count);
      for (int i = 0; i < 4; ++i) encoded[i] = static_cast<uint8_t>(c32 >> (8 * i));
      auto size = EncodeIwpIndices(indices->data(), count, encoded + 4, encoded_.size() - 4);
      if (!size.ok()) return size.status();
      transport::RingChunkMessage m;
      m.collective_id = collective;
      m.phase = transport::RingPhase::kIndexBroadcast;
      m.source_rank = rank;
      m.payload.total_size = 4 + *size;
      m.payload.data = encoded;
      m.payload.size = 4 + *size;
      sent += m.payload.size;
      FEDRT_RETURN_IF_ERROR(SendIndices(m, deadline));
    } else {
      const uint32_t from = context_.left();
      auto frame = context_.Receive(from, deadline);
      if (!frame.ok()) return frame.status();
      auto m = transport::DecodeRingChunk(*frame, context_.limits());
      if (!m.ok()) return context_.Fail(static_cast<int>(from), context_.Named(from, m.status()));
      if (m->collective_id != collective || m->phase != transport::RingPhase::kIndexBroadcast ||
          m->payload.size < 4 || m->payload.count != 1) {
        return context_.Fail(static_cast<int>(from), context_.Named(from, Corrupt("unexpected index broadcast")));
      }
      const uint8_t* b = m->payload.data;
      const uint32_t count = uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
      if (count > d) {
        return context_.Fail(static_cast<int>(from), context_.Named(from, Corrupt("index set larger than the model")));
      }
      indices->resize(count);
      Status s = DecodeIwpIndices(b + 4, m->payload.size - 4, count, d, indices->data());
      if (!s.ok()) return context_.Fail(static_cast<int>(from), context_.Named(from, s));
      if ((position + 1) % p != leader) {
        transport::RingChunkMessage f = *m;
        f.source_rank = rank;
        sent += f.payload.size;
        FEDRT_RETURN_IF_ERROR(SendIndices(f, deadline));
      }
    }
  }
  sums->resize(indices->size());
  FEDRT_RETURN_IF_ERROR(accumulator.GatherAndZero(indices->data(), indices->size(), sums->data()));
  std::copy(sums->begin(), sums->end(), gathered_.Resize(sums->size()));
  // The ring, not the small vectors' way: IWP exists to send fewer bytes.
  Status s = sum_.RunFewestBytes(sums->data(), sums->size());
  stats_ = sum_.stats();
  stats_.bytes_sent += sent;
  total_bytes_sent_ += sent;
  if (!s.ok()) sums->assign(gathered_.begin(), gathered_.end());  // within sums' capacity  // what this peer gathered, for the caller to keep
  return s;
}

}  // namespace peer
}  // namespace fedrt
