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
#include "common/block_carver.h"
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
// The largest payload: the pooled moments and kMaxMixtureBuckets buckets.
constexpr std::size_t kLevelPayloadBytes = 28 + kMaxMixtureBuckets * 28;

// Into out[0 .. kLevelPayloadBytes); returns the bytes.
std::size_t PutLevelStatistics(const LevelStatistics& stats, bool buckets, uint8_t* out) {
  std::size_t at = 0;
  auto put = [&](const void* p, std::size_t n) {
    std::memcpy(out + at, p, n);
    at += n;
  };
  put(&stats.count, 8);
  put(&stats.sum, 8);
  put(&stats.sum_sq, 8);
  // The fit reads at most kMaxMixtureBuckets (levels.h keeps no more).
  const uint32_t n = buckets ? static_cast<uint32_t>(std::min(stats.largest_buckets.size(), kMaxMixtureBuckets)) : 0;
  put(&n, 4);
  for (uint32_t i = 0; i < n; ++i) {
    const BucketMoments& m = stats.largest_buckets[i];
    put(&m.norm, 4);
    put(&m.count, 8);
    put(&m.sum, 8);
    put(&m.sum_sq, 8);
  }
  return at;
}

Status GetLevelStatistics(const uint8_t* in, std::size_t size, double max_count, LevelStatistics* stats) {
  std::size_t at = 0;
  auto get = [&](void* p, std::size_t n) {
    if (size - at < n) return false;
    std::memcpy(p, in + at, n);
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
  if (at != size) return Corrupt("level statistics: trailing bytes");
  const Status valid = ValidateLevelStatistics(*stats, max_count);
  return valid.ok() ? valid : Corrupt("level statistics: " + valid.message());
}

constexpr const char* kLevelsTag = "levels";

// AllGatherCodecSpec into *out (its capacity reserved: no allocation).
Status PutAllGatherSpec(const std::string& codec_spec, std::string* out) {
  Result<CodecSpec> parsed = CodecSpec::Parse(codec_spec);
  if (!parsed.ok()) return parsed.status();
  out->assign(codec_spec);
  if (!parsed->Has("ef")) out->append(codec_spec.find(':') == std::string::npos ? ":ef=on" : ",ef=on");
  return Status::Ok();
}

// What a Run keeps for the shape (AllGatherAllReduce::RequiredBytes).
struct AllGatherSizes {
  std::size_t codec = 0;   // the codec in place (0: it cannot be placed)
  std::size_t stride = 0;  // a payload's bound
  std::size_t members = 0;
  std::size_t d = 0;
  bool feedback = false;   // the residual, its saved copy and the encoded sum
  bool several = false;    // the decoded vector
  bool levels = false;     // ALQ / AMQ's level-statistics payloads
};

Result<AllGatherSizes> MeasureAllGather(const CollectiveShape& shape) {
  AllGatherSizes sizes;
  if (shape.d == 0 || shape.codec.empty()) return sizes;
  std::string spec;
  FEDRT_RETURN_IF_ERROR(PutAllGatherSpec(shape.codec, &spec));
  Result<std::unique_ptr<Codec>> probe = MakeCodec(spec);
  if (!probe.ok()) return probe.status();
  // A codec that cannot be placed (none in the registry today) is made on the heap.
  Result<std::size_t> storage = internal::CodecHolder::StorageBytes(spec, shape.d);
  sizes.codec = storage.ok() ? *storage : 0;
  std::size_t total = 0;
  for (std::size_t t : shape.tensor_sizes) total += t;
  const std::vector<std::size_t> table =
      UpdateTensorSizes(**probe, total == shape.d ? shape.tensor_sizes : std::vector<std::size_t>{shape.d});
  Result<std::unique_ptr<TensorSetCodec>> tensors = TensorSetCodec::Borrow(**probe, table);
  if (!tensors.ok()) return tensors.status();
  // A codec placed with working space for d stages there: the payload's
  // bound is what it encodes into (Run's MaxEncodedSize).
  sizes.stride = (*tensors)->MaxPayloadSize(shape.d);
  sizes.members = shape.members;
  sizes.d = shape.d;
  sizes.feedback = (*probe)->wants_error_feedback();
  sizes.several = table.size() > 1;
  sizes.levels = AsAdaptiveCodec(probe->get()) != nullptr;
  return sizes;
}

// The block's pieces in order (null base: measuring); returns the bytes.
struct AllGatherLayout {
  unsigned char* codec = nullptr;
  uint8_t* payloads = nullptr;
  std::size_t* payload_sizes = nullptr;
  uint8_t* level_payloads = nullptr;
  std::size_t* level_sizes = nullptr;
  float* residual = nullptr;
  float* saved_residual = nullptr;
  float* sum = nullptr;
  float* decoded = nullptr;
};

std::size_t CarveAllGather(unsigned char* base, const AllGatherSizes& z, AllGatherLayout* l) {
  Carver carve(base);
  const std::size_t a = kCollectiveAlignment;
  const std::size_t feedback = z.feedback ? z.d : 0;
  const std::size_t levels = z.levels ? z.members : 0;
  l->codec = carve.Take<unsigned char>(z.codec, a);
  l->payloads = carve.Take<uint8_t>(z.members * z.stride, a);
  l->payload_sizes = carve.Take<std::size_t>(z.members);
  l->level_payloads = carve.Take<uint8_t>(levels * kLevelPayloadBytes, a);
  l->level_sizes = carve.Take<std::size_t>(levels);
  l->residual = carve.Take<float>(feedback, a);
  l->saved_residual = carve.Take<float>(feedback, a);
  l->sum = carve.Take<float>(feedback, a);
  l->decoded = carve.Take<float>(z.several ? z.d : 0, a);
  return AlignUp(carve.used(), a);
}

}  // namespace

Result<std::string> AllGatherCodecSpec(const std::string& codec_spec) {
  std::string spec;
  FEDRT_RETURN_IF_ERROR(PutAllGatherSpec(codec_spec, &spec));
  return spec;
}

AllGatherAllReduce::AllGatherAllReduce(CollectiveContext& context) : context_(context) {
  spec_.reserve(kMaxCodecSpecSize);
  encoded_spec_.reserve(kMaxCodecSpecSize + sizeof(",ef=on"));
}

AllGatherAllReduce::~AllGatherAllReduce() = default;

Result<std::size_t> AllGatherAllReduce::RequiredBytes(const CollectiveShape& shape) {
  Result<AllGatherSizes> sizes = MeasureAllGather(shape);
  if (!sizes.ok()) return sizes.status();
  AllGatherLayout layout;
  return CarveAllGather(nullptr, *sizes, &layout);
}

Status AllGatherAllReduce::Bind(void* memory, std::size_t size, const CollectiveShape& shape) {
  Result<AllGatherSizes> sizes = MeasureAllGather(shape);
  if (!sizes.ok()) return sizes.status();
  AllGatherLayout l;
  const std::size_t needed = CarveAllGather(nullptr, *sizes, &l);
  FEDRT_RETURN_IF_ERROR(
      internal::CheckCollectiveMemory(memory, size, needed, kCollectiveAlignment, "AllGatherAllReduce"));
  CarveAllGather(static_cast<unsigned char*>(memory), *sizes, &l);
  const AllGatherSizes& z = *sizes;
  // Whatever was made is made again, in the block, by the next Run.
  codec_ = nullptr;
  spec_.clear();
  feedback_.reset();
  adaptive_ = nullptr;
  inner_.Reset();
  bound_codec_ = z.codec > 0 ? l.codec : nullptr;
  bound_codec_size_ = z.codec;
  bound_d_ = z.d;
  const std::size_t feedback = z.feedback ? z.d : 0;
  const std::size_t levels = z.levels ? z.members : 0;
  payloads_.Bind(l.payloads, z.members * z.stride);
  payload_sizes_.Bind(l.payload_sizes, z.members);
  level_payloads_.Bind(l.level_payloads, levels * kLevelPayloadBytes);
  level_sizes_.Bind(l.level_sizes, levels);
  residual_.Bind(l.residual, feedback);
  saved_residual_.Bind(l.saved_residual, feedback);
  sum_.Bind(l.sum, feedback);
  decoded_.Bind(l.decoded, z.several ? z.d : 0);
  // The one-vector wrapper for the shape's length, made now rather than at the first Run.
  if (z.d > 0 && (whole_ == nullptr || whole_->total() != z.d)) {
    Result<std::unique_ptr<TensorSetCodec>> whole = TensorSetCodec::Unbound({z.d});
    if (!whole.ok()) return whole.status();
    whole_ = std::move(*whole);
  }
  return Status::Ok();
}

void AllGatherAllReduce::SetTensorTable(std::vector<std::size_t> tensor_sizes) {
  tensor_sizes_ = std::move(tensor_sizes);
  // The wrapper is made here, once (Prepare points it at each new codec);
  // a table it refuses is refused by the Run that would use it.
  per_tensor_.reset();
  if (!tensor_sizes_.empty()) {
    Result<std::unique_ptr<TensorSetCodec>> unbound = TensorSetCodec::Unbound(tensor_sizes_);
    if (unbound.ok()) per_tensor_ = std::move(*unbound);
  }
  codec_ = nullptr;  // rebuilt over the new table
  spec_.clear();
}

const float* AllGatherAllReduce::residual() const {
  return feedback_.has_value() ? feedback_->residual() : nullptr;
}

// The codec of `requested` for vectors of n: in the bound storage when it
// fits (no allocation), else in heap storage sized for it.
Status AllGatherAllReduce::Prepare(std::size_t n, const std::string& requested) {
  if (codec_ != nullptr && spec_ == requested && codec_->total() == n) return Status::Ok();
  codec_ = nullptr;
  spec_.clear();
  feedback_.reset();
  adaptive_ = nullptr;
  inner_.Reset();
  pending_levels_ = LevelStatistics();
  runs_since_refit_ = 0;
  FEDRT_RETURN_IF_ERROR(PutAllGatherSpec(requested, &encoded_spec_));
  const std::string& codec_spec = encoded_spec_;
  const bool in_block = bound_codec_ != nullptr && n <= bound_d_ && [&] {
    Result<CodecFootprint> footprint = CodecFootprintFor(codec_spec, bound_d_);
    return footprint.ok() && footprint->size <= bound_codec_size_;
  }();
  if (in_block) {
    inner_.Bind(bound_codec_, bound_codec_size_, bound_d_);
  } else {
    Result<CodecFootprint> footprint = CodecFootprintFor(codec_spec, n);
    if (footprint.ok()) {
      heap_codec_.resize((footprint->size + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
    }
    inner_.Bind(footprint.ok() ? reinterpret_cast<unsigned char*>(heap_codec_.data()) : nullptr,
                heap_codec_.size() * sizeof(std::max_align_t), n);
  }
  auto made = inner_.Make(codec_spec, n);  // on the heap when it cannot be placed
  if (!made.ok()) return made.status();
  Codec& inner = **made;
  if (inner.needs_side_info()) {
    inner_.Reset();
    return InvalidArgument("codec '" + codec_spec + "' needs side information: it does not compose with ring reduction");
  }
  adaptive_ = AsAdaptiveCodec(&inner);
  std::size_t total = 0;
  for (std::size_t t : tensor_sizes_) total += t;
  // UpdateTensorSizes' choice without building the table: per tensor when
  // the codec encodes so and the table spans the vector, else one vector.
  if (EncodesPerTensor(inner) && !tensor_sizes_.empty() && total == n) {
    if (per_tensor_ == nullptr) {
      Result<std::unique_ptr<TensorSetCodec>> tensors = TensorSetCodec::Unbound(tensor_sizes_);
      if (!tensors.ok()) return tensors.status();
      per_tensor_ = std::move(*tensors);
    }
    codec_ = per_tensor_.get();
  } else {
    if (whole_ == nullptr || whole_->total() != n) {
      Result<std::unique_ptr<TensorSetCodec>> whole = TensorSetCodec::Unbound({n});
      if (!whole.ok()) return whole.status();
      whole_ = std::move(*whole);
    }
    codec_ = whole_.get();
  }
  codec_->Rebind(inner);
  if (codec_->wants_error_feedback()) {
    feedback_.emplace(residual_.Resize(n), n);  // zeroed
    saved_residual_.Resize(n);
    sum_.Resize(n);
  }
  spec_.assign(requested);  // within the reserved capacity for registry specs
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
  const std::size_t stride = codec.MaxEncodedSize(n);
  uint8_t* const payloads = payloads_.Resize(p * stride);
  std::size_t* const sizes = payload_sizes_.Resize(p);
  CodecContext context;
  context.round = static_cast<uint32_t>(call->collective);

  // This member's payload (error feedback: of data plus the residual; the
  // residual is put back when the collective fails, so a repeated step
  // does not count it twice).
  uint8_t* const own = payloads + r * stride;
  context.sender_id = context_.rank();
  // The vector about to be encoded: with error feedback data plus the residual.
  const float* vector = data;
  if (feedback_.has_value()) {
    float* const sum = sum_.data();
    const float* const residual = feedback_->residual();
    for (std::size_t i = 0; i < n; ++i) sum[i] = data[i] + residual[i];
    vector = sum;
  }
  LevelStatistics measured;
  if (adaptive_ != nullptr) {
    std::size_t offset = 0;
    for (std::size_t t : codec.tensor_sizes()) {
      Result<LevelStatistics> part = adaptive_->MeasureLevelStatistics(vector + offset, t);
      if (!part.ok()) return part.status();
      measured.Merge(*part);
      offset += t;
    }
  }
  if (feedback_.has_value()) std::copy(feedback_->residual(), feedback_->residual() + n, saved_residual_.data());
  Result<std::size_t> size = feedback_.has_value() ? feedback_->EncodeSum(codec, vector, n, context, own, stride)
                                                   : codec.Encode(data, n, context, own, stride);
  if (!size.ok()) return size.status();
  sizes[r] = *size;
  Status result = Exchange(call->collective, call->deadline, spec, payloads, stride, sizes);
  if (result.ok()) {
    // The sum in ring order, the same float operations on every member.
    std::fill(data, data + n, 0.0f);
    // Several tensors: decoded into decoded_ and added, as TensorSetCodec's
    // DecodeAccumulate does (which allocates its vector per call); one
    // tensor: the inner codec's fused DecodeAccumulate. The same bits.
    const bool several = codec.tensor_sizes().size() > 1;
    float* const decoded = several ? decoded_.Resize(n) : nullptr;
    for (std::size_t q = 0; q < p && result.ok(); ++q) {
      context.sender_id = context_.members()[q];
      const uint8_t* const payload = payloads + q * stride;
      if (several) {
        result = codec.Decode(payload, sizes[q], context, decoded, n);
        if (result.ok()) {
          for (std::size_t i = 0; i < n; ++i) data[i] += 1.0f * decoded[i];
        }
      } else {
        result = codec.DecodeAccumulate(payload, sizes[q], context, 1.0f, data, n);
      }
      if (!result.ok() && q != r) result = context_.Named(context_.members()[q], result);
    }
  }
  if (!result.ok()) {
    if (feedback_.has_value()) {
      std::copy(saved_residual_.data(), saved_residual_.data() + n, feedback_->mutable_residual());
    }
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
  uint8_t* const payloads = level_payloads_.Resize(p * kLevelPayloadBytes);
  std::size_t* const sizes = level_sizes_.Resize(p);
  sizes[r] = PutLevelStatistics(pending_levels_, adaptive_->level_model() == LevelModel::kNormWeighted,
                                payloads + r * kLevelPayloadBytes);
  FEDRT_RETURN_IF_ERROR(Exchange(collective, deadline, kLevelsTag, payloads, kLevelPayloadBytes, sizes));
  const double max_count = static_cast<double>(n) * static_cast<double>(runs_since_refit_);
  LevelStatistics merged;
  for (std::size_t q = 0; q < p; ++q) {
    LevelStatistics part;
    const uint32_t author = context_.members()[q];
    Status got = GetLevelStatistics(payloads + q * kLevelPayloadBytes, sizes[q], max_count, &part);
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
Status AllGatherAllReduce::Exchange(uint64_t collective, Deadline deadline, std::string_view spec, uint8_t* payloads,
                                    std::size_t stride, std::size_t* sizes) {
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
    const uint8_t* own = payloads + r * stride;
    Result<transport::ChunkPlan> plan = transport::ChunkPlan::Make(sizes[r], max_chunk);
    if (!plan.ok()) return plan.status();
    for (uint32_t k = 0; k < plan->count(); ++k) {
      FEDRT_RETURN_IF_ERROR(send_chunk(0, r, plan->Chunk(k, own)));
    }
  }
  for (uint32_t t = 0; t + 1 < p; ++t) {
    const std::size_t author = (r + 2 * p - t - 1) % p;
    uint8_t* const into = payloads + author * stride;
    std::size_t received = 0;
    transport::ChunkSequence sequence(stride);  // in order, no gap, within the stride
    do {
      auto frame_or = context_.Receive(from, deadline);
      if (!frame_or.ok()) return frame_or.status();
      transport::Frame frame = std::move(*frame_or);
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
      if (m->payload.size > 0) std::memcpy(into + received, m->payload.data, m->payload.size);
      received += m->payload.size;
      if (t + 2 < p) {
        transport::ChunkView chunk = m->payload;
        chunk.data = into + chunk.offset;
        FEDRT_RETURN_IF_ERROR(send_chunk(t + 1, author, chunk));
      }
    } while (!sequence.complete());
    sizes[author] = received;
  }
  return Status::Ok();
}

}  // namespace peer
}  // namespace fedrt
