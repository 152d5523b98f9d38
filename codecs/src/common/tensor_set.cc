// Multi-tensor updates (contract and framing in fedrt/codecs/tensor_set.h).
#include "fedrt/codecs/tensor_set.h"

#include <cstring>
#include <utility>

#include "fedrt/codecs/payload.h"
#include "fedrt/platform/concat.h"

namespace fedrt {

bool EncodesPerTensor(const Codec& codec) {
  switch (codec.id()) {
    case CodecId::kDqsg:
    case CodecId::kNdqsg:
    case CodecId::kQsgd:
    case CodecId::kTernGrad:
    case CodecId::kSign:
    case CodecId::kAlq:
    case CodecId::kAmq:
      return true;
    default:
      return false;
  }
}

namespace {

Status CheckTable(const std::vector<std::size_t>& sizes, std::size_t* total) {
  if (sizes.empty()) return InvalidArgument("a tensor set needs at least one tensor");
  if (sizes.size() > kMaxTensorSetTensors) {
    return InvalidArgument(Concat({"a tensor set holds at most ", kMaxTensorSetTensors, " tensors, not ",
                                   sizes.size()}));
  }
  *total = 0;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    if (sizes[t] == 0) return InvalidArgument(Concat({"tensor ", t, " of the set is empty"}));
    *total += sizes[t];
  }
  return Status::Ok();
}

std::size_t FramingSize(std::size_t tensors) { return kTensorSetHeaderSize + kTensorSetEntrySize * tensors; }

// The part of tensor t: its context, and an error that names it.
CodecContext PartContext(const CodecContext& context, std::size_t t) {
  CodecContext c = context;
  c.tensor_id = context.tensor_id + static_cast<uint32_t>(t);
  return c;
}

Status NameTensor(const Status& status, std::size_t t) {
  return Status(status.code(), Concat({"tensor ", t, ": ", status.message()}));
}

}  // namespace

Result<PayloadView> ParseFirstPart(const uint8_t* payload, std::size_t size) {
  if (payload == nullptr || size < kTensorSetHeaderSize || LoadLe32(payload) != kTensorSetMagic) {
    return ParsePayload(payload, size);
  }
  const uint32_t n = LoadLe32(payload + 8);
  if (n < 2 || n > kMaxTensorSetTensors) return Corrupt(Concat({"tensor set of ", n, " tensors"}));
  const std::size_t framing = FramingSize(n);
  if (size < framing) return Corrupt("tensor set: truncated table");
  const uint32_t part = LoadLe32(payload + kTensorSetHeaderSize + 8);
  if (part > size - framing) return Corrupt("tensor set: tensor 0's payload runs past the end");
  return ParsePayload(payload + framing, part);
}

TensorSetCodec::TensorSetCodec(Codec* inner, std::unique_ptr<Codec> owned, std::vector<std::size_t> sizes,
                               std::size_t total)
    : inner_(inner), owned_(std::move(owned)), sizes_(std::move(sizes)), total_(total) {}

Result<std::unique_ptr<TensorSetCodec>> TensorSetCodec::Create(std::unique_ptr<Codec> inner,
                                                               std::vector<std::size_t> tensor_sizes) {
  if (inner == nullptr) return InvalidArgument("a tensor set needs a codec");
  std::size_t total = 0;
  FEDRT_RETURN_IF_ERROR(CheckTable(tensor_sizes, &total));
  Codec* raw = inner.get();
  return std::unique_ptr<TensorSetCodec>(new TensorSetCodec(raw, std::move(inner), std::move(tensor_sizes), total));
}

Result<std::unique_ptr<TensorSetCodec>> TensorSetCodec::Borrow(Codec& inner, std::vector<std::size_t> tensor_sizes) {
  std::size_t total = 0;
  FEDRT_RETURN_IF_ERROR(CheckTable(tensor_sizes, &total));
  return std::unique_ptr<TensorSetCodec>(new TensorSetCodec(&inner, nullptr, std::move(tensor_sizes), total));
}

Result<std::unique_ptr<TensorSetCodec>> TensorSetCodec::Unbound(std::vector<std::size_t> tensor_sizes) {
  std::size_t total = 0;
  FEDRT_RETURN_IF_ERROR(CheckTable(tensor_sizes, &total));
  return std::unique_ptr<TensorSetCodec>(new TensorSetCodec(nullptr, nullptr, std::move(tensor_sizes), total));
}

// The inner codec's bound per part plus the framing.
std::size_t TensorSetCodec::PartsBound(std::size_t d, std::size_t (Codec::*bound)(std::size_t) const) const {
  if (sizes_.size() == 1) return (inner_->*bound)(d);
  if (d != total_) return (inner_->*bound)(d) + FramingSize(sizes_.size());
  std::size_t sum = FramingSize(sizes_.size());
  for (std::size_t size : sizes_) sum += (inner_->*bound)(size);
  return sum;
}

std::size_t TensorSetCodec::MaxEncodedSize(std::size_t d) const { return PartsBound(d, &Codec::MaxEncodedSize); }

std::size_t TensorSetCodec::MaxPayloadSize(std::size_t d) const { return PartsBound(d, &Codec::MaxPayloadSize); }

Result<std::size_t> TensorSetCodec::Encode(const float* input, std::size_t d, const CodecContext& context,
                                           uint8_t* out, std::size_t capacity) {
  if (d != total_) {
    return InvalidArgument(Concat({"a vector of ", d, " floats for a tensor table of ", total_}));
  }
  if (sizes_.size() == 1) return inner_->Encode(input, d, context, out, capacity);
  if (capacity < MaxEncodedSize(d)) {
    return OutOfRange(Concat({"a tensor-set payload needs up to ", MaxEncodedSize(d), " bytes, not ", capacity}));
  }
  const std::size_t n = sizes_.size();
  std::size_t at = FramingSize(n);
  std::size_t offset = 0;
  for (std::size_t t = 0; t < n; ++t) {
    Result<std::size_t> size = inner_->Encode(input + offset, sizes_[t], PartContext(context, t), out + at,
                                              capacity - at);
    if (!size.ok()) return NameTensor(size.status(), t);
    uint8_t* entry = out + kTensorSetHeaderSize + kTensorSetEntrySize * t;
    StoreLe64(entry, sizes_[t]);
    StoreLe32(entry + 8, static_cast<uint32_t>(*size));
    at += *size;
    offset += sizes_[t];
  }
  StoreLe32(out, kTensorSetMagic);
  out[4] = kTensorSetVersion;
  out[5] = out[6] = out[7] = 0;
  StoreLe32(out + 8, static_cast<uint32_t>(n));
  uint32_t crc = Crc32c(out, 12);
  crc = Crc32c(out + kTensorSetHeaderSize, kTensorSetEntrySize * n, crc);
  StoreLe32(out + 12, crc);
  return at;
}

template <typename Visit>
Status TensorSetCodec::VisitParts(const uint8_t* payload, std::size_t size, Visit visit) const {
  if (sizes_.size() == 1) return visit(0, TensorPart{payload, size, 0, total_});
  const std::size_t n = sizes_.size();
  if (payload == nullptr || size < kTensorSetHeaderSize) return Corrupt("tensor set: truncated header");
  if (LoadLe32(payload) != kTensorSetMagic) {
    return Corrupt(Concat({"not a tensor-set payload (this model's updates have ", n, " tensors)"}));
  }
  if (payload[4] != kTensorSetVersion) {
    return Unsupported(Concat({"tensor set format version ", payload[4]}));
  }
  if (payload[5] != 0 || payload[6] != 0 || payload[7] != 0) return Corrupt("tensor set: reserved bytes are not zero");
  const uint32_t count = LoadLe32(payload + 8);
  if (count != n) {
    return Corrupt(Concat({"tensor set of ", count, " tensors; the model has ", n}));
  }
  if (size < FramingSize(n)) return Corrupt("tensor set: truncated table");
  uint32_t crc = Crc32c(payload, 12);
  crc = Crc32c(payload + kTensorSetHeaderSize, kTensorSetEntrySize * n, crc);
  if (crc != LoadLe32(payload + 12)) return Corrupt("tensor set: table CRC mismatch");
  // The whole table is checked before the first part is visited.
  std::size_t at = FramingSize(n);
  for (std::size_t t = 0; t < n; ++t) {
    const uint8_t* entry = payload + kTensorSetHeaderSize + kTensorSetEntrySize * t;
    const uint64_t d = LoadLe64(entry);
    const uint32_t part = LoadLe32(entry + 8);
    if (d != sizes_[t]) {
      return Corrupt(Concat({"tensor set: tensor ", t, " has ", d, " coordinates; the model's has ", sizes_[t]}));
    }
    if (part > size - at) return Corrupt(Concat({"tensor set: tensor ", t, "'s payload runs past the end"}));
    at += part;
  }
  if (at != size) return Corrupt(Concat({"tensor set: ", size - at, " trailing bytes"}));
  at = FramingSize(n);
  std::size_t offset = 0;
  for (std::size_t t = 0; t < n; ++t) {
    const uint32_t part = LoadLe32(payload + kTensorSetHeaderSize + kTensorSetEntrySize * t + 8);
    FEDRT_RETURN_IF_ERROR(visit(t, TensorPart{payload + at, part, offset, sizes_[t]}));
    at += part;
    offset += sizes_[t];
  }
  return Status::Ok();
}

Result<std::vector<TensorPart>> TensorSetCodec::Split(const uint8_t* payload, std::size_t size) const {
  std::vector<TensorPart> parts;
  FEDRT_RETURN_IF_ERROR(SplitInto(payload, size, &parts));
  return parts;
}

Status TensorSetCodec::SplitInto(const uint8_t* payload, std::size_t size, std::vector<TensorPart>* parts) const {
  parts->clear();
  parts->reserve(sizes_.size());
  return VisitParts(payload, size, [&](std::size_t, const TensorPart& part) {
    parts->push_back(part);
    return Status::Ok();
  });
}

Status TensorSetCodec::Decode(const uint8_t* payload, std::size_t size, const CodecContext& context, float* out,
                              std::size_t d, const float* side_info) const {
  if (d != total_) {
    return InvalidArgument(Concat({"a vector of ", d, " floats for a tensor table of ", total_}));
  }
  if (sizes_.size() == 1) return inner_->Decode(payload, size, context, out, d, side_info);
  return VisitParts(payload, size, [&](std::size_t t, const TensorPart& p) {
    const Status decoded = inner_->Decode(p.payload, p.size, PartContext(context, t), out + p.offset, p.d,
                                          side_info != nullptr ? side_info + p.offset : nullptr);
    return decoded.ok() ? decoded : NameTensor(decoded, t);
  });
}

Status TensorSetCodec::DecodeAccumulate(const uint8_t* payload, std::size_t size, const CodecContext& context,
                                        float weight, float* accumulator, std::size_t d,
                                        const float* side_info) const {
  if (sizes_.size() == 1 && d == total_) {
    return inner_->DecodeAccumulate(payload, size, context, weight, accumulator, d, side_info);
  }
  return Codec::DecodeAccumulate(payload, size, context, weight, accumulator, d, side_info);
}

}  // namespace fedrt
