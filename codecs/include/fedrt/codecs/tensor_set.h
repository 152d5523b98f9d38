// A multi-tensor update: a model's flat vector cut along its tensor table,
// each tensor encoded as its own codec payload (its own scales, its own
// Philox streams: tensor t uses tensor id context.tensor_id + t), framed
// together. With the default `b = 0` of dqsg and ndqsg this is one scale per
// tensor, as the papers' schemes have it, instead of one for the whole model.
//
// TensorSetCodec is a Codec over the whole vector: Encode, Decode and
// DecodeAccumulate take the flat vector (and flat side information) and work
// tensor by tensor with the inner codec; every other caller of the Codec
// interface (error feedback, accumulators) is unchanged. A one-tensor table
// produces exactly the inner codec's plain payload (no framing).
//
// Framing of a table of n >= 2 tensors (little-endian):
//   offset  size  field
//   0       4     magic "FRTT" (kTensorSetMagic read as u32)
//   4       1     format version (kTensorSetVersion)
//   5       3     zero
//   8       4     n, the number of tensors
//   12      4     CRC32C of bytes 0..11 and the n table entries
//   16      12n   per tensor: u64 length d_t, u32 payload size
//   then the n payloads (each a complete codec payload, payload.h) in order.
// The decoder checks the magic, version, count, every length against its own
// table, that the payload sizes fill the bytes exactly, and the CRC, before
// any part is decoded; each part then passes its own codec's checks.
//
// Ownership: the inner codec is owned or borrowed (then it must outlive this
// object; the aggregator borrows its ALQ / AMQ codec, whose level table
// changes between rounds). Thread-safety: as Codec.
#ifndef FEDRT_CODECS_TENSOR_SET_H_
#define FEDRT_CODECS_TENSOR_SET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/platform/status.h"

namespace fedrt {

inline constexpr uint32_t kTensorSetMagic = 0x54545246u;  // "FRTT" in memory order
inline constexpr uint8_t kTensorSetVersion = 1;
inline constexpr std::size_t kTensorSetHeaderSize = 16;
inline constexpr std::size_t kTensorSetEntrySize = 12;
inline constexpr std::size_t kMaxTensorSetTensors = 65536;

// Whether `codec` encodes a model's update tensor by tensor: the quantizers
// whose payload carries scales or norms (dqsg, ndqsg, qsgd, terngrad, sign,
// alq, amq). The others encode the flat update as one vector: fp32, fp16 and
// bf16 (nothing to gain, six headers to lose), the sparsifiers (k is a budget
// over the whole update, and top-k over the whole update is the papers'
// selection) and Moniqua (no scale; its modulus is per model).
bool EncodesPerTensor(const Codec& codec);

// The codec payload that names a payload's codec: a tensor set's first part
// (the framing's table must fit in `size`; the rest is checked when the set
// is decoded), or the payload itself. A receiver that learns the codec from
// the payload, as a device does from a compressed model broadcast, reads its
// spec here and then decodes with that codec over its own tensor table.
// kCorrupt as ParsePayload, or naming the framing.
Result<PayloadView> ParseFirstPart(const uint8_t* payload, std::size_t size);

// One tensor's part of a validated tensor-set payload.
struct TensorPart {
  const uint8_t* payload = nullptr;
  std::size_t size = 0;
  std::size_t offset = 0;  // into the flat vector
  std::size_t d = 0;
};

class TensorSetCodec final : public Codec {
 public:
  // kInvalidArgument for an empty table, a zero-length tensor, or more than
  // kMaxTensorSetTensors tensors.
  static Result<std::unique_ptr<TensorSetCodec>> Create(std::unique_ptr<Codec> inner,
                                                        std::vector<std::size_t> tensor_sizes);
  static Result<std::unique_ptr<TensorSetCodec>> Borrow(Codec& inner, std::vector<std::size_t> tensor_sizes);
  // A borrowing wrapper without its codec yet: a sender whose codec changes
  // makes it once and points it at each codec with Rebind, allocating nothing
  // after. No other method may be called before the first Rebind.
  static Result<std::unique_ptr<TensorSetCodec>> Unbound(std::vector<std::size_t> tensor_sizes);
  // Borrows `inner` from now on (a wrapper from Borrow or Unbound).
  void Rebind(Codec& inner) { inner_ = &inner; }

  CodecId id() const override { return inner_->id(); }
  const CodecSpecText& spec() const override { return inner_->spec(); }
  bool needs_side_info() const override { return inner_->needs_side_info(); }
  bool wants_error_feedback() const override { return inner_->wants_error_feedback(); }
  // For d = total(): the framing plus every tensor's bound; for another d,
  // the inner bound plus the largest framing (Encode refuses such a d).
  std::size_t MaxEncodedSize(std::size_t d) const override;
  std::size_t MaxPayloadSize(std::size_t d) const override;
  // kInvalidArgument when d is not total().
  Result<std::size_t> Encode(const float* input, std::size_t d, const CodecContext& context, uint8_t* out,
                             std::size_t capacity) override;
  // Allocates nothing of its own.
  Status Decode(const uint8_t* payload, std::size_t size, const CodecContext& context, float* out, std::size_t d,
                const float* side_info = nullptr) const override;
  // Decodes every tensor before adding any: a bad part leaves the
  // accumulator untouched (allocates the decoded vector).
  Status DecodeAccumulate(const uint8_t* payload, std::size_t size, const CodecContext& context, float weight,
                          float* accumulator, std::size_t d, const float* side_info = nullptr) const override;

  // Validates the framing (not the parts) against this table; one part
  // spanning the vector for a one-tensor table. kCorrupt names what is wrong.
  Result<std::vector<TensorPart>> Split(const uint8_t* payload, std::size_t size) const;
  // The same into *parts (overwritten), keeping its memory: allocates nothing
  // once it has room for the table.
  Status SplitInto(const uint8_t* payload, std::size_t size, std::vector<TensorPart>* parts) const;

  const Codec& inner() const { return *inner_; }
  Codec& inner() { return *inner_; }
  const std::vector<std::size_t>& tensor_sizes() const { return sizes_; }
  std::size_t total() const { return total_; }

 private:
  TensorSetCodec(Codec* inner, std::unique_ptr<Codec> owned, std::vector<std::size_t> sizes, std::size_t total);
  // Validates the framing and calls visit(t, part) for each part in order
  // (Split and Decode; nothing is allocated).
  template <typename Visit>
  Status VisitParts(const uint8_t* payload, std::size_t size, Visit visit) const;

  std::size_t PartsBound(std::size_t d, std::size_t (Codec::*bound)(std::size_t) const) const;
  Codec* inner_;
  std::unique_ptr<Codec> owned_;
  std::vector<std::size_t> sizes_;
  std::size_t total_;
};

}  // namespace fedrt

#endif  // FEDRT_CODECS_TENSOR_SET_H_
