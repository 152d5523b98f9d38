// The sparsifiers topk, randk and rtopk (codecs/README.md):
// one class, three selection rules. They send (index, value) pairs; error
// feedback is on by default (the caller keeps the residual).
//
// Body (after header and spec):
//   u32     k, the number of coordinates sent (must equal the codec's k for d)
//   values  k float32 (or binary16 with kFlagValuesFp16), in index order
//   indices the gap-coded index stream of index_coding.h, absent when
//           kFlagIndicesImplicit says the receiver regenerates them (randk
//           with idx=seed) from the shared seed.
// Encoding allocates nothing: MaxEncodedSize() includes 4k bytes of working
// space at the end of the caller's buffer for the index list. topk also uses
// the whole buffer from the values on as candidate space before it writes them.
#include "sparse/sparse_codecs.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/codec_common.h"
#include "sparse/half.h"
#include "sparse/index_coding.h"
#include "sparse/sparse_select.h"

namespace fedrt {
namespace {

using namespace codec_internal;

enum class Rule { kTop, kRandom, kRandomOfTop };

// k or r as the user wrote it: a count (>= 1) or a fraction of d (< 1).
struct Amount {
  double value = 0.01;
  bool fraction() const { return value < 1; }
  std::size_t For(std::size_t d) const {
    if (d == 0) return 0;
    if (!fraction()) return value >= static_cast<double>(d) ? d : static_cast<std::size_t>(value);
    const double k = std::nearbyint(value * static_cast<double>(d));
    if (k < 1) return 1;
    return k >= static_cast<double>(d) ? d : static_cast<std::size_t>(k);
  }
};

// Shortest decimal that reads back as the same double (canonical specs), in
// a value: building a codec's spec allocates nothing.
struct Number {
  char text[40];
};
Number FormatNumber(double v) {
  Number n;
  if (v >= 1 && v < 1e15 && v == std::floor(v)) {
    std::snprintf(n.text, sizeof n.text, "%.0f", v);
    return n;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(n.text, sizeof n.text, "%.*g", precision, v);
    if (std::strtod(n.text, nullptr) == v) break;
  }
  return n;
}

Result<Amount> ParseAmount(const CodecSpec& spec, const char* key, double default_value) {
  auto value = spec.GetDouble(key, default_value, 0, 4294967295.0);
  FEDRT_RETURN_IF_ERROR(value.status());
  if (!(*value > 0)) return InvalidArgument(std::string(key) + " must be > 0 (a count, or a fraction below 1)");
  if (*value >= 1 && *value != std::floor(*value)) {
    return InvalidArgument(std::string(key) + " must be a whole count when >= 1, got " + std::string(FormatNumber(*value).text));
  }
  Amount amount;
  amount.value = *value;
  return amount;
}

struct SparseOptions {
  Rule rule = Rule::kTop;
  Amount k, r;
  bool fp16 = false;
  bool implicit_indices = false;  // randk: idx=seed
  bool rescale = false;           // rtopk: multiply values by r/k
  CommonOptions common;
};

class SparseCodec final : public Codec {
 public:
  explicit SparseCodec(const SparseOptions& o) : o_(o) {
    const char* name = o.rule == Rule::kTop ? "topk" : o.rule == Rule::kRandom ? "randk" : "rtopk";
    spec_ += name;
    spec_ += ":k=";
    spec_ += FormatNumber(o.k.value).text;
    if (o.rule == Rule::kRandomOfTop) {
      spec_ += ",r=";
      spec_ += FormatNumber(o.r.value).text;
    }
    spec_ += o.fp16 ? ",v=fp16" : ",v=fp32";
    if (o.rule == Rule::kRandom) spec_ += o.implicit_indices ? ",idx=seed" : ",idx=list";
    if (o.rule == Rule::kRandomOfTop) spec_ += o.rescale ? ",rescale=on" : ",rescale=off";
    spec_ += ",";
    AppendCommonOptions(o.common, false, &spec_);
  }

  CodecId id() const override {
    return o_.rule == Rule::kTop ? CodecId::kTopK : o_.rule == Rule::kRandom ? CodecId::kRandK : CodecId::kRTopK;
  }
  const CodecSpecText& spec() const override { return spec_; }
  bool wants_error_feedback() const override { return o_.common.error_feedback; }

  std::size_t MaxEncodedSize(std::size_t d) const override {
    const std::size_t k = o_.k.For(d);
    return PayloadSize(k, MaxIndexStreamSize(k)) + ScratchBytes(k);
  }

  Result<std::size_t> Encode(const float* input, std::size_t d, const CodecContext& context, uint8_t* out,
                             std::size_t capacity) override;
  Status Decode(const uint8_t* payload, std::size_t size, const CodecContext& context, float* out,
                std::size_t d, const float* side_info) const override;
  Status DecodeAccumulate(const uint8_t* payload, std::size_t size, const CodecContext& context, float weight,
                          float* accumulator, std::size_t d, const float* side_info) const override;

  // Encoding's selection histograms (topk, rtopk), whatever d; decoding
  // needs none. MakeCodec gives a heap codec this too, so encoding never
  // allocates and keeps about 2 KB of stack.
  std::size_t WorkspaceSize(std::size_t /*d*/) const override {
    return o_.rule == Rule::kRandom ? 0 : kSelectWorkspaceWords * sizeof(uint32_t);
  }

 private:
  std::size_t ValueBytes() const { return o_.fp16 ? 2 : 4; }
  bool Implicit() const { return o_.rule == Rule::kRandom && o_.implicit_indices; }
  std::size_t PayloadSize(std::size_t k, std::size_t index_bytes) const {
    return BodyOffset(spec_) + 4 + k * ValueBytes() + (Implicit() ? 0 : index_bytes);
  }
  std::size_t ScratchBytes(std::size_t k) const { return Implicit() ? 0 : 4 * k + 4; }
  uint16_t Flags() const {
    return static_cast<uint16_t>((o_.fp16 ? kFlagValuesFp16 : 0) | (Implicit() ? kFlagIndicesImplicit : 0) |
                                 (o_.common.error_feedback ? kFlagErrorFeedback : 0));
  }
  void StoreValue(uint8_t* values, std::size_t j, float v) const {
    if (o_.fp16) {
      const uint16_t h = FloatToHalfSaturating(v);
      values[2 * j] = static_cast<uint8_t>(h);
      values[2 * j + 1] = static_cast<uint8_t>(h >> 8);
    } else {
      StoreFloatLe(values + 4 * j, v);
    }
  }
  float LoadValue(const uint8_t* values, std::size_t j) const {
    if (o_.fp16) return HalfToFloat(static_cast<uint16_t>(values[2 * j] | (values[2 * j + 1] << 8)));
    return LoadFloatLe(values + 4 * j);
  }
  // Validates the payload completely, then calls prepare() once and
  // apply(index, value) for every pair.
  template <typename Prepare, typename Apply>
  Status ForEachPair(const uint8_t* payload, std::size_t size, const CodecContext& context, std::size_t d,
                     Prepare prepare, Apply apply) const;

  SparseOptions o_;
  CodecSpecText spec_;
};

Result<std::size_t> SparseCodec::Encode(const float* input, std::size_t d, const CodecContext& context,
                                        uint8_t* out, std::size_t capacity) {
  if (capacity < MaxEncodedSize(d)) return OutOfRange(spec_ + ": output buffer too small");
  if ((uint64_t{d} >> 32) != 0) return OutOfRange(spec_ + ": vector longer than 2^32 - 1");
  const std::size_t k = o_.k.For(d);
  uint8_t* body = out + BodyOffset(spec_);
  uint8_t* values = body + 4;
  StoreLe32(body, static_cast<uint32_t>(k));

  if (Implicit()) {
    FEDRT_RETURN_IF_ERROR(CheckFinite(input, d));
    SubsetSampler sampler(StreamFor(context, RandomPurpose::kRandomSubset), d, k);
    std::size_t j = 0;
    for (std::size_t i = 0; i < d && !sampler.Done(); ++i) {
      if (sampler.Take()) StoreValue(values, j++, input[i]);
    }
    const std::size_t body_size = 4 + k * ValueBytes();
    FinishPayload(MakeHeader(id(), context, d, 0, Flags(), body_size), spec_, out);
    return BodyOffset(spec_) + body_size;
  }

  // The index list lives in the working space at the end of the buffer.
  uint8_t* scratch_bytes = out + MaxEncodedSize(d) - ScratchBytes(k);
  scratch_bytes += (4 - reinterpret_cast<uintptr_t>(scratch_bytes) % 4) % 4;
  uint32_t* indices = reinterpret_cast<uint32_t*>(static_cast<void*>(scratch_bytes));
  float scale = 1.0f;
  auto* histograms = static_cast<uint32_t*>(Workspace(WorkspaceSize(d)));
  if (o_.rule == Rule::kRandom) {
    FEDRT_RETURN_IF_ERROR(CheckFinite(input, d));
    SubsetSampler sampler(StreamFor(context, RandomPurpose::kRandomSubset), d, k);
    std::size_t j = 0;
    for (std::size_t i = 0; i < d && !sampler.Done(); ++i) {
      if (sampler.Take()) indices[j++] = static_cast<uint32_t>(i);
    }
  } else if (o_.rule == Rule::kTop) {
    // One pass when the candidates fit in the buffer from the values on
    // (values, index stream and index list are all written afterwards).
    uint8_t* work_bytes = values + (4 - reinterpret_cast<uintptr_t>(values) % 4) % 4;
    uint32_t* work = reinterpret_cast<uint32_t*>(static_cast<void*>(work_bytes));
    auto fast = SelectTopByCandidates(input, d, k, work, static_cast<std::size_t>(out + MaxEncodedSize(d) - work_bytes) / 4,
                                      histograms);
    FEDRT_RETURN_IF_ERROR(fast.status());
    if (*fast) {
      std::memmove(indices, work, k * sizeof(uint32_t));
    } else {
      auto threshold = FindMagnitudeThreshold(input, d, k, indices, k, histograms);
      FEDRT_RETURN_IF_ERROR(threshold.status());
      CollectTop(input, d, *threshold, indices);
    }
  } else {
    std::size_t r = o_.r.For(d);
    if (r < k) r = k;
    auto threshold = FindMagnitudeThreshold(input, d, r, indices, k, histograms);
    FEDRT_RETURN_IF_ERROR(threshold.status());
    SubsetSampler sampler(StreamFor(context, RandomPurpose::kRandomSubset), r, k);
    std::size_t j = 0;
    ForEachTop(input, d, *threshold, [&](const uint32_t* candidates, std::size_t n) {
      for (std::size_t c = 0; c < n && !sampler.Done(); ++c) {
        if (sampler.Take()) indices[j++] = candidates[c];
      }
    });
    if (o_.rescale && k > 0) scale = static_cast<float>(r) / static_cast<float>(k);
  }
  if (scale == 1.0f) {
    for (std::size_t j = 0; j < k; ++j) StoreValue(values, j, input[indices[j]]);
  } else {
    for (std::size_t j = 0; j < k; ++j) StoreValue(values, j, input[indices[j]] * scale);
  }
  uint8_t* stream = values + k * ValueBytes();
  auto stream_size = EncodeIndices(indices, k, stream, MaxIndexStreamSize(k));
  FEDRT_RETURN_IF_ERROR(stream_size.status());
  const std::size_t body_size = 4 + k * ValueBytes() + *stream_size;
  FinishPayload(MakeHeader(id(), context, d, 0, Flags(), body_size), spec_, out);
  return BodyOffset(spec_) + body_size;
}

template <typename Prepare, typename Apply>
Status SparseCodec::ForEachPair(const uint8_t* payload, std::size_t size, const CodecContext& context,
                                std::size_t d, Prepare prepare, Apply apply) const {
  auto view = OpenPayload(payload, size, id(), spec_, context, d);
  FEDRT_RETURN_IF_ERROR(view.status());
  if (view->header.flags != Flags() || view->header.bucket != 0) {
    return Corrupt(spec_ + ": payload flags or bucket do not match the codec");
  }
  const std::size_t k = o_.k.For(d);
  if (view->body_size < 4) return Corrupt(spec_ + ": body shorter than its count");
  if (LoadLe32(view->body) != k) return Corrupt(spec_ + ": payload sends " +
                                                std::to_string(LoadLe32(view->body)) + " values, expected " +
                                                std::to_string(k));
  const uint8_t* values = view->body + 4;
  const std::size_t value_bytes = k * ValueBytes();
  if (view->body_size - 4 < value_bytes) return Corrupt(spec_ + ": body shorter than its values");
  for (std::size_t j = 0; j < k; ++j) {
    if (!std::isfinite(LoadValue(values, j))) return Corrupt(spec_ + ": non-finite value in payload");
  }
  const uint8_t* stream = values + value_bytes;
  const std::size_t stream_size = view->body_size - 4 - value_bytes;
  if (Implicit()) {
    if (stream_size != 0) return Corrupt(spec_ + ": trailing bytes after the values");
    prepare();
    SubsetSampler sampler(StreamFor(context, RandomPurpose::kRandomSubset), d, k);
    std::size_t j = 0;
    for (std::size_t i = 0; i < d && !sampler.Done(); ++i) {
      if (sampler.Take()) apply(i, LoadValue(values, j++));
    }
    return Status::Ok();
  }
  // Validate the whole index stream before touching the output.
  FEDRT_RETURN_IF_ERROR(ValidateIndices(stream, stream_size, k, d));
  prepare();
  IndexStreamReader reader;
  FEDRT_RETURN_IF_ERROR(reader.Open(stream, stream_size, k, d));
  for (std::size_t j = 0; j < k; ++j) {
    uint32_t index = 0;
    FEDRT_RETURN_IF_ERROR(reader.Next(&index));
    apply(index, LoadValue(values, j));
  }
  return Status::Ok();
}

Status SparseCodec::Decode(const uint8_t* payload, std::size_t size, const CodecContext& context, float* out,
                           std::size_t d, const float* /*side_info*/) const {
  return ForEachPair(
      // An empty vector's `out` may be null, which memset must never get.
      payload, size, context, d, [out, d] { if (d != 0) std::memset(out, 0, d * sizeof(float)); },
      [out](std::size_t i, float v) { out[i] = v; });
}

Status SparseCodec::DecodeAccumulate(const uint8_t* payload, std::size_t size, const CodecContext& context,
                                     float weight, float* accumulator, std::size_t d,
                                     const float* /*side_info*/) const {
  return ForEachPair(
      payload, size, context, d, [] {},
      [accumulator, weight](std::size_t i, float v) { accumulator[i] += weight * v; });
}

Result<SparseOptions> ParseSparse(const CodecSpec& spec, Rule rule) {
  SparseOptions o;
  o.rule = rule;
  std::string_view keys[6] = {"k", "v", "ef", "ec"};
  std::size_t key_count = 4;
  if (rule == Rule::kRandom) keys[key_count++] = "idx";
  if (rule == Rule::kRandomOfTop) {
    keys[key_count++] = "r";
    keys[key_count++] = "rescale";
  }
  FEDRT_RETURN_IF_ERROR(spec.CheckKeys(keys, key_count));
  auto k = ParseAmount(spec, "k", 0.01);
  FEDRT_RETURN_IF_ERROR(k.status());
  o.k = *k;
  auto v = spec.GetChoice("v", "fp32", {"fp32", "fp16"});
  FEDRT_RETURN_IF_ERROR(v.status());
  o.fp16 = *v == "fp16";
  if (rule == Rule::kRandom) {
    auto idx = spec.GetChoice("idx", "seed", {"seed", "list"});
    FEDRT_RETURN_IF_ERROR(idx.status());
    o.implicit_indices = *idx == "seed";
  }
  if (rule == Rule::kRandomOfTop) {
    // Default pool: four times k, in the same form as k.
    const double default_r = o.k.fraction() ? (4 * o.k.value < 1 ? 4 * o.k.value : 0.999999) : 4 * o.k.value;
    auto r = ParseAmount(spec, "r", default_r);
    FEDRT_RETURN_IF_ERROR(r.status());
    o.r = *r;
    if (o.r.fraction() == o.k.fraction() && o.r.value < o.k.value) {
      return InvalidArgument("rtopk: r must be >= k");
    }
    auto rescale = spec.GetChoice("rescale", "off", {"on", "off"});
    FEDRT_RETURN_IF_ERROR(rescale.status());
    o.rescale = *rescale == "on";
  }
  auto common = ParseCommonOptions(spec, true, SymbolCoding::kNone);
  FEDRT_RETURN_IF_ERROR(common.status());
  o.common = *common;
  return o;
}

Status Make(const CodecSpec& spec, Rule rule, CodecSlot* slot) {
  auto options = ParseSparse(spec, rule);
  FEDRT_RETURN_IF_ERROR(options.status());
  return Emplace<SparseCodec>(slot, *options);
}

}  // namespace

Status MakeTopKCodec(const CodecSpec& spec, CodecSlot* slot) { return Make(spec, Rule::kTop, slot); }
Status MakeRandKCodec(const CodecSpec& spec, CodecSlot* slot) { return Make(spec, Rule::kRandom, slot); }
Status MakeRTopKCodec(const CodecSpec& spec, CodecSlot* slot) { return Make(spec, Rule::kRandomOfTop, slot); }

}  // namespace fedrt
