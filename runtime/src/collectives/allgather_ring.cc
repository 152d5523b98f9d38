// All-reduce by all-gather of compressed updates around the ring
// (collectives.h, AllGatherAllReduce). Each member encodes its own vector
// once (per tensor, with error feedback when the codec asks for it); the
// payloads travel p - 1 hops unchanged, chunk by chunk (ChunkPlan, checked
// with ChunkSequence), as RingChunk {phase all-gather, step = hop, segment =
// the ring position of the payload's author}; every member then decodes the
// p payloads in ring order into the sum, so all members end bit-identical.
// Why all-gather and not re-encoding per hop: docs/design/peer.md, "Compressed
// ring all-reduce" (measured in runtime_compressed_ring_choice_test).
//
// ALQ / AMQ: every member measures the level statistics of the vector it
// encodes; every refit=N runs the members all-gather those statistics the
// same way (RingChunk with codec field "levels"), merge them in ring order
// and fit the next table, the same bits everywhere (level_fit.h is
// deterministic), installed before the next Run encodes.

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "collectives/ring.h"
#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec_spec.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/collectives.h"
#include "fedrt/transport/chunking.h"

namespace fedrt {
namespace peer {
namespace {

using transport::RingPhase;

// The statistics a fit reads (count, sum, sum_sq; the norm-weighted model's
// largest buckets), little-endian as in memory on every fedrt target:
//   f64 count, f64 sum, f64 sum_sq, u32 n, n x {f32 norm, f64 count, f64 sum, f64 sum_sq}.
void PutLevelStatistics(const LevelStatistics& stats, bool buckets, std::vector<uint8_t>* out) {
  auto put = [out](const void* p, std::size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out->insert(out->end(), b, b + n);
  };
  out->clear();
  put(&stats.count, 8);
  put(&stats.sum, 8);
  put(&stats.sum_sq, 8);
  const uint32_t n = buckets ? static_cast<uint32_t>(stats.largest_buckets.size()) : 0;
  put(&n, 4);
  for (uint32_t i = 0; i < n; ++i) {
    const BucketMoments& m = stats.largest_buckets[i];
    put(&m.norm, 4);
    put(&m.count, 8);
    put(&m.sum, 8);
    put(&m.sum_sq, 8);
  }
}

Status GetLevelStatistics(const std::vector<uint8_t>& in, double max_count, LevelStatistics* stats) {
  std::size_t at = 0;
  auto get = [&](void* p, std::size_t n) {
    if (in.size() - at < n) return false;
    std::memcpy(p, in.data() + at, n);
    at += n;
    return true;
  };
  *stats = LevelStatistics();
  uint32_t n = 0;
  if (!get(&stats->count, 8) || !get(&stats->sum, 8) || !get(&stats->sum_sq, 8) || !get(&n, 4) ||
      n > kMaxMixtureBuckets) {
    return Corrupt("level statistics: truncated or too many buckets");
  }
  for (uint32_t i = 0; i < n; ++i) {
    BucketMoments m;
    if (!get(&m.norm, 4) || !get(&m.count, 8) || !get(&m.sum, 8) || !get(&m.sum_sq, 8)) {
      return Corrupt("level statistics: truncated");
    }
    stats->largest_buckets.push_back(m);
  }
  if (at != in.size()) return Corrupt("level statistics: trailing bytes");
  const Status valid = ValidateLevelStatistics(*stats, max_count);
  return valid.ok() ? valid : Corrupt("level statistics: " + valid.message());
}

constexpr const char* kLevelsTag = "levels";

}  // namespace

Result<std::string> AllGatherCodecSpec(const std::string& codec_spec) {
  Result<CodecSpec> parsed = CodecSpec::Parse(codec_spec);
  if (!parsed.ok()) return parsed.status();
  if (parsed->Has("ef")) return codec_spec;
  return codec_spec + (codec_spec.find(':') == std::string::npos ? ":" : ",") + "ef=on";
}

AllGatherAllReduce::AllGatherAllReduce(CollectiveContext& context) : context_(context) {}

AllGatherAllReduce::~AllGatherAllReduce() = default;

void AllGatherAllReduce::SetTensorTable(std::vector<std::size_t> tensor_sizes) {
  tensor_sizes_ = std::move(tensor_sizes);
  spec_.clear();  // rebuilt over the new table
}

const float* AllGatherAllReduce::residual() const {
  return feedback_ != nullptr ? feedback_->residual() : nullptr;
}

Status AllGatherAllReduce::Prepare(std::size_t n, const std::string& requested) {
  if (codec_ != nullptr && spec_ == requested && codec_->total() == n) return Status::Ok();
  Result<std::string> with_feedback = AllGatherCodecSpec(requested);
  if (!with_feedback.ok()) return with_feedback.status();
  const std::string& codec_spec = *with_feedback;
  codec_.reset();
  adaptive_.reset();
  inner_.Reset();
  feedback_.reset();
  spec_.clear();
  pending_levels_ = LevelStatistics();
  runs_since_refit_ = 0;
  std::vector<std::size_t> table = tensor_sizes_;
  std::size_t total = 0;
  for (std::size_t t : table) total += t;
  if (total != n) table = {n};  // no table, or another vector: one tensor
  const std::string name = codec_spec.substr(0, codec_spec.find(':'));
  if (name == "alq" || name == "amq") {
    auto made = MakeAdaptiveCodec(codec_spec);
    if (!made.ok()) return made.status();
    adaptive_ = std::move(*made);
    auto update = BorrowUpdateCodec(*adaptive_, table);
    if (!update.ok()) return update.status();
    codec_ = std::move(*update);
  } else {
    Result<CodecFootprint> footprint = CodecFootprintFor(codec_spec, n);
    if (footprint.ok()) {
      inner_storage_.resize((footprint->size + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
      inner_.Bind(reinterpret_cast<unsigned char*>(inner_storage_.data()),
                  inner_storage_.size() * sizeof(std::max_align_t), n);
    }
    auto made = inner_.Make(codec_spec, n);  // on the heap when it cannot be placed
    if (!made.ok()) return made.status();
    if ((*made)->needs_side_info()) {
      inner_.Reset();
      return InvalidArgument("codec '" + codec_spec + "' needs side information: it does not compose with ring reduction");
    }
    auto update = BorrowUpdateCodec(**made, table);
    if (!update.ok()) return update.status();
    codec_ = std::move(*update);
  }
  if (codec_->wants_error_feedback()) {
    feedback_ = std::make_unique<ErrorFeedback>(n);
    saved_residual_.assign(n, 0.0f);
  }
  spec_ = requested;
  return Status::Ok();
}

Status AllGatherAllReduce::Run(float* data, std::size_t n, const std::string& codec_spec) {
  auto call = internal::BeginRingCall(context_, &stats_);
  if (!call.ok()) return call.status();
  if (n == 0) return Status::Ok();
  FEDRT_RETURN_IF_ERROR(Prepare(n, codec_spec));
  const std::size_t p = call->p;
  const std::size_t r = context_.position();
  TensorSetCodec& codec = *codec_;
  const std::string_view spec = codec.spec().view();
  internal::ReleaseOnReturn release_on_return(context_, call->deadline);
  const std::size_t max_payload = codec.MaxEncodedSize(n);
  payloads_.resize(p);
  for (auto& payload : payloads_) payload.reserve(max_payload);
  CodecContext context;
  context.round = static_cast<uint32_t>(call->collective);

  // This member's payload (error feedback: of data plus the residual; the
  // residual is put back when the collective fails, so a repeated step
  // does not count it twice).
  std::vector<uint8_t>& own = payloads_[r];
  own.resize(max_payload);
  context.sender_id = context_.rank();
  LevelStatistics measured;
  if (adaptive_ != nullptr) {
    // The vector about to be encoded (with error feedback: plus the residual), tensor by tensor.
    const float* vector = data;
    if (feedback_ != nullptr) {
      measured_vector_.resize(n);
      for (std::size_t i = 0; i < n; ++i) measured_vector_[i] = data[i] + feedback_->residual()[i];
      vector = measured_vector_.data();
    }
    std::size_t offset = 0;
    for (std::size_t t : codec.tensor_sizes()) {
      Result<LevelStatistics> part = adaptive_->MeasureLevelStatistics(vector + offset, t);
      if (!part.ok()) return part.status();
      measured.Merge(*part);
      offset += t;
    }
  }
  if (feedback_ != nullptr) std::copy(feedback_->residual(), feedback_->residual() + n, saved_residual_.begin());
  Result<std::size_t> size = feedback_ != nullptr ? feedback_->Encode(codec, data, n, context, own.data(), own.size())
                                                  : codec.Encode(data, n, context, own.data(), own.size());
  if (!size.ok()) return size.status();
  own.resize(*size);
  Status result = Exchange(call->collective, call->deadline, spec, codec.MaxEncodedSize(n), &payloads_);
  if (result.ok()) {
    // The sum in ring order, the same float operations on every member.
    std::fill(data, data + n, 0.0f);
    // Several tensors: decoded into decoded_ and added, as TensorSetCodec's
    // DecodeAccumulate does (which allocates its vector per call); one
    // tensor: the inner codec's fused DecodeAccumulate. The same bits.
    const bool several = codec.tensor_sizes().size() > 1;
    if (several) decoded_.resize(n);
    for (std::size_t q = 0; q < p && result.ok(); ++q) {
      context.sender_id = context_.members()[q];
      if (several) {
        result = codec.Decode(payloads_[q].data(), payloads_[q].size(), context, decoded_.data(), n);
        if (result.ok()) {
          for (std::size_t i = 0; i < n; ++i) data[i] += 1.0f * decoded_[i];
        }
      } else {
        result = codec.DecodeAccumulate(payloads_[q].data(), payloads_[q].size(), context, 1.0f, data, n);
      }
      if (!result.ok() && q != r) result = context_.Named(context_.members()[q], result);
    }
  }
  if (!result.ok()) {
    if (feedback_ != nullptr) std::copy(saved_residual_.begin(), saved_residual_.end(), feedback_->mutable_residual());
    return result;
  }
  if (adaptive_ != nullptr) {
    pending_levels_.Merge(measured);
    if (++runs_since_refit_ >= adaptive_->refit_interval()) {
      FEDRT_RETURN_IF_ERROR(Refit(call->deadline, n));
    }
  }
  internal::EndRingCall(context_, *call, &stats_, &total_bytes_sent_);
  return Status::Ok();
}

// ALQ / AMQ: all-gathers the statistics since the last fit, merges them in
// ring order and installs the next table (the same on every member).
Status AllGatherAllReduce::Refit(Deadline deadline, std::size_t n) {
  const std::size_t p = context_.members().size();
  const std::size_t r = context_.position();
  const uint64_t collective = context_.NextCollectiveId();
  level_payloads_.resize(p);
  PutLevelStatistics(pending_levels_, adaptive_->level_model() == LevelModel::kNormWeighted, &level_payloads_[r]);
  const std::size_t max_size = 28 + kMaxMixtureBuckets * 28;
  FEDRT_RETURN_IF_ERROR(Exchange(collective, deadline, kLevelsTag, max_size, &level_payloads_));
  const double max_count = static_cast<double>(n) * static_cast<double>(runs_since_refit_);
  LevelStatistics merged;
  for (std::size_t q = 0; q < p; ++q) {
    LevelStatistics part;
    const uint32_t author = context_.members()[q];
    Status got = GetLevelStatistics(level_payloads_[q], max_count, &part);
    if (!got.ok()) return q == r ? got : context_.Fail(static_cast<int>(author), context_.Named(author, got));
    merged.Merge(part);
  }
  pending_levels_ = LevelStatistics();
  runs_since_refit_ = 0;
  if (merged.count == 0) return Status::Ok();  // all zeros: the table stays
  Result<LevelTable> table = FitLevelTable(*adaptive_, merged, adaptive_->level_table().version + 1);
  if (!table.ok()) return table.status();
  return adaptive_->SetLevelTable(*table);
}

const LevelTable* AllGatherAllReduce::level_table() const {
  return adaptive_ != nullptr ? &adaptive_->level_table() : nullptr;
}

// Hop t sends the payload of ring position (r - t) (its own at hop 0) and
// receives that of (r - t - 1), forwarding each chunk as it arrives.
Status AllGatherAllReduce::Exchange(uint64_t collective, Deadline deadline, std::string_view spec,
                                    std::size_t max_size, std::vector<std::vector<uint8_t>>* payloads) {
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
    const std::vector<uint8_t>& own = (*payloads)[r];
    Result<transport::ChunkPlan> plan = transport::ChunkPlan::Make(own.size(), max_chunk);
    if (!plan.ok()) return plan.status();
    for (uint32_t k = 0; k < plan->count(); ++k) {
      FEDRT_RETURN_IF_ERROR(send_chunk(0, r, plan->Chunk(k, own.data())));
    }
  }
  for (uint32_t t = 0; t + 1 < p; ++t) {
    const std::size_t author = (r + 2 * p - t - 1) % p;
    std::vector<uint8_t>& into = (*payloads)[author];
    into.clear();
    into.reserve(max_size);
    transport::ChunkSequence sequence(max_size);
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
