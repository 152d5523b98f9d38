// Ring all-reduce with a codec payload on every hop (collectives.h,
// CompressedRingAllReduce). Each chunk is one self-contained codec payload
// (tensor id: segment * 65536 + chunk; round: the collective's number; sender:
// the original rank). Reduce-scatter hops decode-and-add into the vector;
// the owner of a reduced segment encodes it once and takes the decoded values
// itself, and the all-gather forwards that payload unchanged (re-encoding a
// decoded fp16 chunk gives the same bytes), so every peer ends bit-identical.

#include <memory>
#include <string_view>

#include "collectives/ring.h"
#include "common/block_carver.h"
#include "fedrt/codecs/codec_spec.h"
#include "fedrt/runtime/collectives.h"

namespace fedrt {
namespace peer {

using transport::RingPhase;

namespace {

// The codec's storage and the encode buffer for chunks of up to d floats.
struct CompressedRingSizes {
  std::size_t codec = 0;
  std::size_t encoded = 0;
};

Result<CompressedRingSizes> MeasureCompressedRing(const CollectiveShape& shape) {
  CompressedRingSizes sizes;
  if (shape.members <= 1 || shape.d == 0 || shape.codec.empty()) return sizes;
  Result<std::unique_ptr<Codec>> probe = MakeCodec(shape.codec);
  if (!probe.ok()) return probe.status();
  // A codec that cannot be placed (none in the registry today) is made on the heap.
  Result<std::size_t> storage = internal::CodecHolder::StorageBytes(shape.codec, shape.d);
  sizes.codec = storage.ok() ? AlignUp(*storage, kCollectiveAlignment) : 0;
  // A codec placed with working space for d stages there: its bound is the payload's.
  sizes.encoded = AlignUp((*probe)->MaxPayloadSize(shape.d), kCollectiveAlignment);
  return sizes;
}

}  // namespace

CompressedRingAllReduce::CompressedRingAllReduce(CollectiveContext& context, uint32_t chunk_floats)
    : context_(context), chunk_floats_(chunk_floats) {
  spec_.reserve(kMaxCodecSpecSize);
}

Result<std::size_t> CompressedRingAllReduce::RequiredBytes(const CollectiveShape& shape) {
  Result<CompressedRingSizes> sizes = MeasureCompressedRing(shape);
  if (!sizes.ok()) return sizes.status();
  return sizes->codec + sizes->encoded;
}

Status CompressedRingAllReduce::Bind(void* memory, std::size_t size, const CollectiveShape& shape) {
  Result<CompressedRingSizes> sizes = MeasureCompressedRing(shape);
  if (!sizes.ok()) return sizes.status();
  FEDRT_RETURN_IF_ERROR(internal::CheckCollectiveMemory(memory, size, sizes->codec + sizes->encoded,
                                                        kCollectiveAlignment, "CompressedRingAllReduce"));
  auto* base = static_cast<unsigned char*>(memory);
  spec_.clear();
  codec_.Bind(sizes->codec > 0 ? base : nullptr, sizes->codec, shape.d);
  encoded_.Bind(sizes->encoded > 0 ? base + sizes->codec : nullptr, sizes->encoded);
  return Status::Ok();
}

CompressedRingAllReduce::~CompressedRingAllReduce() = default;

Status CompressedRingAllReduce::Run(float* data, std::size_t n, const std::string& codec_spec) {
  auto call = internal::BeginRingCall(context_, &stats_);
  if (!call.ok()) return call.status();
  const std::size_t p = call->p;
  if (p == 1 || n == 0) return Status::Ok();
  if (codec_spec != spec_ || codec_.get() == nullptr) {
    spec_.clear();
    auto made = codec_.Make(codec_spec, n);
    if (!made.ok()) return made.status();
    if ((*made)->needs_side_info()) {
      codec_.Reset();
      return InvalidArgument("codec '" + codec_spec +
                             "' needs side information: it does not compose with ring reduction");
    }
    spec_.assign(codec_spec);  // within the reserved capacity for registry specs
  }
  Codec& codec = *codec_.get();
  // On every return from here on, the context holds no frame of this call.
  internal::ReleaseOnReturn release_on_return(context_, call->deadline);
  const internal::RingShape shape(n, p, chunk_floats_, context_.limits());
  const std::size_t need = codec.MaxEncodedSize(std::min(shape.chunk, n));
  uint8_t* const encoded = encoded_.size() < need ? encoded_.Resize(need) : encoded_.data();
  const std::size_t capacity = encoded_.size();
  const std::size_t r = context_.position();
  const uint32_t from = context_.left();
  const uint32_t rank = context_.rank();
  const std::string_view spec = codec.spec().view();
  CodecContext context;
  context.session_seed = 0;
  context.round = static_cast<uint32_t>(call->collective);
  auto chunk_begin = [&](std::size_t s, uint32_t k) { return data + shape.begin(s) + shape.chunk_offset(k); };

  // Encodes chunk k of segment s (its current values) and sends it for
  // (phase, step); `decode_back` makes this peer take the decoded values too.
  // The payload is copied into the slot's frame (encoded_ is reused at once).
  auto send = [&](RingPhase phase, uint32_t step, std::size_t s, uint32_t k, bool decode_back) -> Status {
    float* begin = chunk_begin(s, k);
    const std::size_t len = shape.chunk_size(s, k);
    context.tensor_id = static_cast<uint32_t>(s) * 65536u + k;
    context.sender_id = rank;
    auto size = codec.Encode(begin, len, context, encoded, capacity);
    if (!size.ok()) return size.status();
    if (decode_back) FEDRT_RETURN_IF_ERROR(codec.Decode(encoded, *size, context, begin, len));
    transport::RingChunkMessage m = internal::RingChunkHead(context_, shape, call->collective, phase, step, s, k);
    m.codec_spec = spec;
    m.payload.total_size = *size;  // index and count: the chunk's place in the segment
    m.payload.offset = 0;
    m.payload.data = encoded;
    m.payload.size = *size;
    stats_.bytes_sent += m.payload.size;
    return internal::SendChunk(context_, call->deadline, m, transport::PayloadMode::kCopy);
  };

  // Receives chunk k of segment s for (phase, step) and adds (reduce) or
  // stores (gather) its decoded values.
  auto receive = [&](RingPhase phase, uint32_t step, std::size_t s, uint32_t k, bool add) -> Status {
    transport::Frame frame;
    transport::RingChunkMessage m;
    FEDRT_RETURN_IF_ERROR(
        internal::ReceiveChunk(context_, call->deadline, shape, call->collective, phase, step, s, k, &frame, &m));
    float* begin = chunk_begin(s, k);
    const std::size_t len = shape.chunk_size(s, k);
    if (m.codec_spec != spec) {
      return context_.Fail(static_cast<int>(from), context_.Named(from, Corrupt("ring chunk with another codec")));
    }
    CodecContext c = context;
    c.tensor_id = static_cast<uint32_t>(s) * 65536u + k;
    c.sender_id = from;
    Status d = add ? codec.DecodeAccumulate(m.payload.data, m.payload.size, c, 1.0f, begin, len)
                   : codec.Decode(m.payload.data, m.payload.size, c, begin, len);
    if (!d.ok()) return context_.Fail(static_cast<int>(from), context_.Named(from, d));
    return Status::Ok();
  };

  FEDRT_RETURN_IF_ERROR(internal::RunRing(shape, r, send, receive));
  internal::EndRingCall(context_, *call, &stats_, &total_bytes_sent_);
  return Status::Ok();
}

}  // namespace peer
}  // namespace fedrt
