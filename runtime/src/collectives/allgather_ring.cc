// All-reduce by all-gather of compressed updates around the ring
// (collectives.h, AllGatherAllReduce). Each member encodes its own vector
// once (per tensor, with error feedback when the codec asks for it); the
// payloads travel p - 1 hops unchanged, chunk by chunk (ChunkPlan, checked
// with ChunkSequence), as RingChunk {phase all-gather, step = hop, segment =
// the ring position of the payload's author}; every member then decodes the
// p payloads in ring order into the sum, so all members end bit-identical.
// Why all-gather and not re-encoding per hop: runtime/README.md, "Compressed
// ring all-reduce" (measured in runtime_compressed_ring_choice_test).

#include <algorithm>
#include <string>
#include <utility>

#include "collectives/ring.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/collectives.h"
#include "fedrt/transport/chunking.h"

namespace fedrt {
namespace peer {

using transport::RingPhase;

AllGatherAllReduce::AllGatherAllReduce(CollectiveContext& context) : context_(context) {}

AllGatherAllReduce::~AllGatherAllReduce() = default;

void AllGatherAllReduce::SetTensorTable(std::vector<std::size_t> tensor_sizes) {
  tensor_sizes_ = std::move(tensor_sizes);
  spec_.clear();  // rebuilt over the new table
}

const float* AllGatherAllReduce::residual() const {
  return feedback_ != nullptr ? feedback_->residual() : nullptr;
}

Status AllGatherAllReduce::Prepare(std::size_t n, const std::string& codec_spec) {
  if (codec_ != nullptr && spec_ == codec_spec && codec_->total() == n) return Status::Ok();
  codec_.reset();
  feedback_.reset();
  spec_.clear();
  auto made = MakeCodec(codec_spec);
  if (!made.ok()) return made.status();
  if ((*made)->needs_side_info()) {
    return InvalidArgument("codec '" + codec_spec + "' needs side information: it does not compose with ring reduction");
  }
  std::vector<std::size_t> table = tensor_sizes_;
  std::size_t total = 0;
  for (std::size_t t : table) total += t;
  if (total != n) table = {n};  // no table, or another vector: one tensor
  auto update = MakeUpdateCodec(std::move(*made), table);
  if (!update.ok()) return update.status();
  codec_ = std::move(*update);
  if (codec_->wants_error_feedback()) {
    feedback_ = std::make_unique<ErrorFeedback>(n);
    saved_feedback_ = std::make_unique<ErrorFeedback>(n);
  }
  spec_ = codec_spec;
  return Status::Ok();
}

Status AllGatherAllReduce::Run(float* data, std::size_t n, const std::string& codec_spec) {
  const uint64_t start = context_.clock().NowNanos();
  const Deadline deadline = context_.StepDeadline();
  stats_ = AllReduceStats{};
  const uint64_t collective = context_.NextCollectiveId();
  FEDRT_RETURN_IF_ERROR(internal::CheckRing(context_));
  if (n == 0) return Status::Ok();
  FEDRT_RETURN_IF_ERROR(Prepare(n, codec_spec));
  const std::size_t p = context_.members().size();
  const std::size_t r = context_.position();
  TensorSetCodec& codec = *codec_;
  const std::string spec = codec.spec();
  internal::ReleaseOnReturn release_on_return(context_, deadline);
  const std::size_t max_payload = codec.MaxEncodedSize(n);
  payloads_.resize(p);
  for (auto& payload : payloads_) payload.reserve(max_payload);
  CodecContext context;
  context.round = static_cast<uint32_t>(collective);

  // This member's payload (error feedback: of data plus the residual; the
  // residual is put back when the collective fails, so a repeated step
  // does not count it twice).
  std::vector<uint8_t>& own = payloads_[r];
  own.resize(max_payload);
  context.sender_id = context_.rank();
  if (feedback_ != nullptr) *saved_feedback_ = *feedback_;
  Result<std::size_t> size = feedback_ != nullptr ? feedback_->Encode(codec, data, n, context, own.data(), own.size())
                                                  : codec.Encode(data, n, context, own.data(), own.size());
  if (!size.ok()) return size.status();
  own.resize(*size);
  Status result = Exchange(collective, deadline, spec);
  if (result.ok()) {
    // The sum in ring order, the same float operations on every member.
    std::fill(data, data + n, 0.0f);
    for (std::size_t q = 0; q < p && result.ok(); ++q) {
      context.sender_id = context_.members()[q];
      result = codec.DecodeAccumulate(payloads_[q].data(), payloads_[q].size(), context, 1.0f, data, n);
      if (!result.ok() && q != r) result = context_.Named(context_.members()[q], result);
    }
  }
  if (!result.ok()) {
    if (feedback_ != nullptr) *feedback_ = *saved_feedback_;
    return result;
  }
  stats_.seconds = static_cast<double>(context_.clock().NowNanos() - start) * 1e-9;
  total_bytes_sent_ += stats_.bytes_sent;
  return Status::Ok();
}

// Hop t sends the payload of ring position (r - t) (its own at hop 0) and
// receives that of (r - t - 1), forwarding each chunk as it arrives.
Status AllGatherAllReduce::Exchange(uint64_t collective, Deadline deadline, const std::string& spec) {
  const std::size_t p = context_.members().size();
  const std::size_t r = context_.position();
  const uint32_t from = context_.left();
  const uint32_t max_chunk = context_.limits().MaxChunkBytes() - 4096;  // room for the fields and the spec
  auto send_chunk = [&](uint32_t hop, std::size_t author, const transport::ChunkView& chunk) -> Status {
    transport::RingChunkMessage m;
    m.collective_id = collective;
    m.step = hop;
    m.phase = RingPhase::kAllGather;
    m.source_rank = context_.rank();
    m.segment = static_cast<uint32_t>(author);
    m.codec_spec = spec;
    m.payload = chunk;
    stats_.bytes_sent += chunk.size;
    return internal::SendChunk(context_, deadline, m, transport::PayloadMode::kCopy);
  };
  if (p == 1) return Status::Ok();
  {
    const std::vector<uint8_t>& own = payloads_[r];
    Result<transport::ChunkPlan> plan = transport::ChunkPlan::Make(own.size(), max_chunk);
    if (!plan.ok()) return plan.status();
    for (uint32_t k = 0; k < plan->count(); ++k) {
      FEDRT_RETURN_IF_ERROR(send_chunk(0, r, plan->Chunk(k, own.data())));
    }
  }
  for (uint32_t t = 0; t + 1 < p; ++t) {
    const std::size_t author = (r + 2 * p - t - 1) % p;
    std::vector<uint8_t>& into = payloads_[author];
    into.clear();
    transport::ChunkSequence sequence(codec_->MaxEncodedSize(codec_->total()));
    do {
      auto received = context_.Receive(from, deadline);
      if (!received.ok()) return received.status();
      transport::Frame frame = std::move(*received);
      auto m = transport::DecodeRingChunk(frame, context_.limits());
      if (!m.ok()) return context_.Fail(static_cast<int>(from), context_.Named(from, m.status()));
      if (m->collective_id != collective || m->phase != RingPhase::kAllGather || m->step != t ||
          m->segment != author || m->source_rank != from) {
        return context_.Fail(static_cast<int>(from),
                             context_.Named(from, Corrupt("unexpected ring chunk (collective " +
                                                          std::to_string(m->collective_id) + ", step " +
                                                          std::to_string(m->step) + ", segment " +
                                                          std::to_string(m->segment) + ")")));
      }
      if (m->codec_spec != spec) {
        return context_.Fail(static_cast<int>(from), context_.Named(from, Corrupt("ring chunk with another codec")));
      }
      Status accepted = sequence.Accept(m->payload);
      if (!accepted.ok()) return context_.Fail(static_cast<int>(from), context_.Named(from, accepted));
      into.insert(into.end(), m->payload.data, m->payload.data + m->payload.size);
      if (t + 2 < p) {
        transport::ChunkView chunk = m->payload;
        chunk.data = into.data() + chunk.offset;
        FEDRT_RETURN_IF_ERROR(send_chunk(t + 1, author, chunk));
      }
    } while (!sequence.complete());
  }
  return Status::Ok();
}

}  // namespace peer
}  // namespace fedrt
