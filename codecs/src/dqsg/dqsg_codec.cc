// DQSG and NDQSG: subtractive dithered quantization, plain and nested
// (codecs/README.md; kernels in dqsg_kernels.h).
//
// Body: the per-bucket scales (float32 LE, one per bucket of b coordinates,
// b = 0: one bucket), then the symbol stream of every coordinate of every
// bucket whose scale is non-zero, in coordinate order (symbol_coding.h; the
// payload flags name the coding). A bucket with scale 0 (all zero, or
// subnormals so small that max|w|/s underflows) has no symbols and decodes to
// zeros. Symbols: DQSG q + s in [0, 2s]; NDQSG coset q + (rho-1)/2 in [0, rho)
// (rho >= 2; even rho is an extension of the specification, see dqsg_kernels.h).
// The dither of coordinate i is PhiloxDither(purpose 1) word i of the stream
// (seed, tensor, round, sender) of the context.
//
// Encoding allocates nothing: the raw symbols are staged in the codec's
// working space when it holds d coordinates (a codec from ConstructCodec:
// the decode scratch, idle while encoding, so the caller's buffer needs only
// MaxPayloadSize), else in the caller's output buffer past the largest
// possible stream (MaxEncodedSize counts d extra bytes for that), then coded
// into place; with `ec=pack` they are packed chunk by chunk instead and no
// staging room is used. Quantizing and coding are separate frames (the
// dither chunk and the packer's buffer are gone before rANS builds its
// tables), which keeps the encoder's stack near the coder's own. Decoding a
// packed stream validates it whole, then unpacks it chunk by chunk; the other
// codings allocate one byte per coordinate for the decoded symbols.
//
// Inputs whose reconstruction could overflow float (max|w| close to FLT_MAX)
// are refused with kInvalidArgument; payload scales are checked likewise.
#include "dqsg/dqsg_codec.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "common/codec_common.h"
#include "dqsg/dqsg_kernels.h"
#include "fedrt/codecs/philox.h"
#include "symbols/symbol_coding.h"

namespace fedrt {
namespace {

using namespace codec_internal;

// Coordinates per stack chunk of dither (and of decoded values for nested accumulation).
constexpr std::size_t kChunk = 512;

class DitherCodec final : public Codec {
 public:
  // rho == 0: plain DQSG with `levels` = s; otherwise NDQSG with s1 = levels.
  DitherCodec(int levels, int rho, uint32_t bucket, CommonOptions options)
      : levels_(levels), rho_(rho), bucket_(bucket), options_(options) {
    spec_ += rho == 0 ? "dqsg:s=" : "ndqsg:s1=";
    AppendInt(levels, &spec_);
    if (rho != 0) {
      spec_ += ",rho=";
      AppendInt(rho, &spec_);
    }
    spec_ += ",b=";
    AppendInt(bucket, &spec_);
    spec_ += ",";
    AppendCommonOptions(options, true, &spec_);
  }

  CodecId id() const override { return nested() ? CodecId::kNdqsg : CodecId::kDqsg; }
  const CodecSpecText& spec() const override { return spec_; }
  bool needs_side_info() const override { return nested(); }
  bool wants_error_feedback() const override { return options_.error_feedback; }

  // d bytes more for the raw symbols unless the working space stages them.
  std::size_t MaxEncodedSize(std::size_t d) const override {
    return MaxPayloadSize(d) + (Workspace(WorkspaceSize(d)) != nullptr ? 0 : d);
  }
  std::size_t MaxPayloadSize(std::size_t d) const override {
    return BodyOffset(spec_) + 4 * Buckets(d) + MaxSymbolStreamSize(d, alphabet(), options_.coding);
  }

  Result<std::size_t> Encode(const float* input, std::size_t d, const CodecContext& context, uint8_t* out,
                             std::size_t capacity) override {
    if (capacity < MaxEncodedSize(d)) return OutOfRange(Name() + ": output buffer too small");
    const bool packed = options_.coding == SymbolCoding::kPack;
    // The raw symbols' room: the working space, else past the stream's
    // bound in `out` (MaxEncodedSize counts it); ec=pack uses none.
    uint8_t* staged = packed ? nullptr : static_cast<uint8_t*>(Workspace(WorkspaceSize(d)));
    const std::size_t buckets = Buckets(d);
    const std::size_t stream_bound = MaxSymbolStreamSize(d, alphabet(), options_.coding);
    if (4 * uint64_t{buckets} + stream_bound > UINT32_MAX) {
      return OutOfRange(Name() + ": vector too long for one payload");
    }
    uint8_t* body = out + BodyOffset(spec_);
    uint8_t* stream = body + 4 * buckets;
    if (!packed && staged == nullptr) staged = stream + stream_bound;
    // ec=pack: symbols are packed chunk by chunk while in L1 cache; the other
    // codings need the whole symbol vector (rANS: its histogram) first.
    std::size_t count = 0;
    std::size_t stream_size = 0;
    uint16_t flags = 0;
    Status quantized = packed ? QuantizePacked(input, d, context, body, stream, &count, &stream_size, &flags)
                              : QuantizeStaged(input, d, context, body, staged, &count);
    FEDRT_RETURN_IF_ERROR(quantized);
    if (!packed && count > 0) {
      auto coded = EncodeSymbols(staged, count, alphabet(), options_.coding, stream, stream_bound, &flags);
      FEDRT_RETURN_IF_ERROR(coded.status());
      stream_size = *coded;
    }
    if (options_.error_feedback) flags |= kFlagErrorFeedback;
    const std::size_t body_size = 4 * buckets + stream_size;
    FinishPayload(MakeHeader(id(), context, d, bucket_, flags, body_size), spec_, out);
    return BodyOffset(spec_) + body_size;
  }

  Status Decode(const uint8_t* payload, std::size_t size, const CodecContext& context, float* out,
                std::size_t d, const float* side_info) const override {
    return DecodeInto(payload, size, context, d, side_info, out, 0.0f, false);
  }

  Status DecodeAccumulate(const uint8_t* payload, std::size_t size, const CodecContext& context, float weight,
                          float* accumulator, std::size_t d, const float* side_info) const override {
    return DecodeInto(payload, size, context, d, side_info, accumulator, weight, true);
  }

  // Decoding: the bucket scales, then (codings other than pack) one byte per
  // coordinate for the decoded symbols.
  std::size_t WorkspaceSize(std::size_t d) const override { return 4 * Buckets(d) + d; }

  // Validates the payload's header and scales; fills `scales` (one per bucket).
  Status OpenScales(const uint8_t* payload, std::size_t size, const CodecContext& context, std::size_t d,
                    PayloadView* view, std::vector<float>* scales) const {
    scales->resize(Buckets(d));
    return OpenScales(payload, size, context, d, view, scales->data());
  }
  Status OpenScales(const uint8_t* payload, std::size_t size, const CodecContext& context, std::size_t d,
                    PayloadView* view, float* scales) const {
    auto opened = OpenPayload(payload, size, id(), spec_, context, d);
    FEDRT_RETURN_IF_ERROR(opened.status());
    *view = std::move(*opened);
    if (view->header.bucket != bucket_) return Corrupt(Name() + ": header bucket size differs from the spec");
    const std::size_t buckets = Buckets(d);
    if (view->body_size < 4 * buckets) return Corrupt(Name() + ": body too short for the bucket scales");
    for (std::size_t k = 0; k < buckets; ++k) {
      const float scale = LoadFloatLe(view->body + 4 * k);
      if (!(scale >= 0.0f) || std::signbit(scale) || !ReconstructionFinite(scale)) {
        return Corrupt(Name() + ": invalid scale in bucket " + std::to_string(k));
      }
      scales[k] = scale;
    }
    return Status::Ok();
  }

  int rho() const { return rho_; }
  std::size_t BucketSize(std::size_t d) const { return bucket_ == 0 ? d : bucket_; }

 private:
  bool nested() const { return rho_ != 0; }
  uint32_t alphabet() const { return nested() ? static_cast<uint32_t>(rho_) : static_cast<uint32_t>(2 * levels_ + 1); }
  std::string Name() const { return nested() ? "ndqsg" : "dqsg"; }

  std::size_t Buckets(std::size_t d) const {
    if (d == 0) return 0;
    return bucket_ == 0 ? 1 : (d + bucket_ - 1) / bucket_;
  }
  std::size_t BucketLength(std::size_t d, std::size_t k) const {
    const std::size_t b = BucketSize(d);
    return d - k * b < b ? d - k * b : b;
  }

  // Quantizes bucket by bucket: writes each bucket's scale into `body` and
  // hands its symbols, chunk by chunk, to `sink(symbols room, n)` (the room
  // from `room(n)`); *count: the symbols written (buckets of scale 0 have
  // none).
  template <typename Room, typename Sink>
  Status Quantize(const float* input, std::size_t d, const CodecContext& context, uint8_t* body, Room room,
                  Sink sink, std::size_t* count) const {
    const DqsgKernels& kernels = DqsgKernelsFor(ActiveIsa());
    const RandomStream dither = DitherStream(context);
    float u[kChunk];
    *count = 0;
    for (std::size_t k = 0; k < Buckets(d); ++k) {
      const std::size_t start = k * BucketSize(d), length = BucketLength(d, k);
      const float* w = input + start;
      const float max = kernels.max_abs(w, length);
      // max_abs orders bit patterns: any Inf or NaN in the bucket makes it non-finite,
      // so this is the finiteness check (CheckFinite only names the coordinate).
      if (!std::isfinite(max)) return CheckFinite(input, d);
      const float scale = max / static_cast<float>(levels_);
      if (!ReconstructionFinite(scale)) {
        return InvalidArgument(Name() + ": values up to " + std::to_string(scale * static_cast<float>(levels_)) +
                               " are too large to quantize without overflowing float");
      }
      StoreFloatLe(body + 4 * k, scale);
      if (scale == 0.0f) continue;
      for (std::size_t j = 0; j < length; j += kChunk) {
        const std::size_t n = length - j < kChunk ? length - j : kChunk;
        uint8_t* symbols = room(*count + j, n);
        if (nested()) {
          PhiloxDither(dither, start + j, n, u);
          kernels.nested_quantize(w + j, u, n, scale, levels_, rho_, symbols);
        } else {
          kernels.dither_quantize(dither, start + j, w + j, n, scale, levels_, symbols);
        }
        sink(n);
      }
      *count += length;
    }
    return Status::Ok();
  }

  // The symbols staged whole in staged[0..count), for rANS or none.
  [[gnu::noinline]] Status QuantizeStaged(const float* input, std::size_t d, const CodecContext& context,
                                       uint8_t* body, uint8_t* staged, std::size_t* count) const {
    return Quantize(
        input, d, context, body, [staged](std::size_t at, std::size_t) { return staged + at; },
        [](std::size_t) {}, count);
  }

  // ec=pack: packed into `stream` chunk by chunk.
  [[gnu::noinline]] Status QuantizePacked(const float* input, std::size_t d, const CodecContext& context,
                                       uint8_t* body, uint8_t* stream, std::size_t* count,
                                       std::size_t* stream_size, uint16_t* flags) const {
    PackedSymbolWriter writer(alphabet(), stream);
    FEDRT_RETURN_IF_ERROR(Quantize(
        input, d, context, body, [&writer](std::size_t, std::size_t n) { return writer.Reserve(n); },
        [&writer](std::size_t n) { writer.Commit(n); }, count));
    if (*count > 0) {
      *stream_size = writer.Finish();
      *flags = writer.flags();
    }
    return Status::Ok();
  }

  // |decoded| <= (levels + 1/2) * scale for DQSG and for NDQSG's fine index:
  // refuse scales for which that bound is not a finite float.
  bool ReconstructionFinite(float scale) const {
    return std::isfinite(scale * (static_cast<float>(levels_) + 0.5f));
  }

  static RandomStream DitherStream(const CodecContext& context) {
    RandomStream stream;
    stream.seed = context.session_seed;
    stream.tensor_id = context.tensor_id;
    stream.round = context.round;
    stream.sender_id = context.sender_id;
    stream.purpose = RandomPurpose::kDither;
    return stream;
  }

  // Decodes into `target`: overwrite (accumulate == false) or target += weight * decoded.
  Status DecodeInto(const uint8_t* payload, std::size_t size, const CodecContext& context, std::size_t d,
                    const float* side_info, float* target, float weight, bool accumulate) const {
    if (nested()) {
      if (side_info == nullptr && d > 0) return InvalidArgument("ndqsg: decoding needs side information");
      // A NaN or Inf in the side information makes its decoded value
      // non-finite, which the per-chunk check below reports. Accumulating
      // checks it up front, so that it never fails with part of the
      // accumulator already updated.
      if (accumulate) FEDRT_RETURN_IF_ERROR(CheckFinite(side_info, d));
    }
    // Scales and symbols in the caller's working space, or on the heap for
    // a codec from MakeCodec.
    const std::size_t buckets = Buckets(d);
    std::vector<float> heap_scales;
    std::vector<uint8_t> heap_symbols;
    // The working space is aligned for any type (ConstructCodec), so the
    // scales may start there.
    void* workspace_start = Workspace(WorkspaceSize(d));
    auto* workspace = static_cast<uint8_t*>(workspace_start);
    float* scales = static_cast<float*>(workspace_start);
    if (workspace == nullptr) {
      heap_scales.resize(buckets);
      scales = heap_scales.data();
    }
    PayloadView view;
    FEDRT_RETURN_IF_ERROR(OpenScales(payload, size, context, d, &view, scales));
    std::size_t count = 0;
    for (std::size_t k = 0; k < buckets; ++k) {
      if (scales[k] != 0.0f) count += BucketLength(d, k);
    }
    const uint8_t* stream = view.body + 4 * buckets;
    const std::size_t stream_size = view.body_size - 4 * buckets;
    // Packed streams are validated whole, then unpacked chunk by chunk next
    // to their use; other codings are decoded into one vector first.
    const bool packed = count > 0 && IsPackedCoding(view.header.flags, alphabet());
    PackedSymbolReader reader(stream, count, alphabet());
    uint8_t* symbols = workspace == nullptr ? nullptr : workspace + 4 * buckets;
    if (count == 0) {
      if (stream_size != 0) return Corrupt(Name() + ": symbols present for all-zero buckets");
    } else if (packed) {
      FEDRT_RETURN_IF_ERROR(reader.Validate(stream_size));
    } else {
      if (symbols == nullptr) {
        heap_symbols.resize(count);
        symbols = heap_symbols.data();
      }
      FEDRT_RETURN_IF_ERROR(DecodeSymbols(stream, stream_size, count, alphabet(), view.header.flags, symbols));
    }
    // Everything is validated: from here on nothing fails except a nested
    // decode whose side information drives the result out of float range.
    const DqsgKernels& kernels = DqsgKernelsFor(ActiveIsa());
    const RandomStream dither = DitherStream(context);
    float u[kChunk];
    float decoded[kChunk];
    const uint8_t* sym = symbols;
    for (std::size_t k = 0; k < buckets; ++k) {
      const std::size_t start = k * BucketSize(d), length = BucketLength(d, k);
      const float scale = scales[k];
      if (scale == 0.0f) {
        if (!accumulate) std::memset(target + start, 0, length * sizeof(float));
        continue;
      }
      for (std::size_t j = 0; j < length; j += kChunk) {
        const std::size_t n = length - j < kChunk ? length - j : kChunk;
        const std::size_t at = start + j;
        const uint8_t* chunk = packed ? reader.Next(n) : sym + j;
        if (!nested()) {
          if (accumulate) {
            kernels.dither_dequantize_accumulate(dither, at, chunk, n, scale, levels_, weight, target + at);
          } else {
            kernels.dither_dequantize(dither, at, chunk, n, scale, levels_, target + at);
          }
          continue;
        }
        PhiloxDither(dither, at, n, u);
        float* values = accumulate ? decoded : target + at;
        kernels.nested_dequantize(chunk, u, side_info + at, n, scale, rho_, values);
        // max_abs is non-finite iff a value is (bit-pattern order); then name it.
        if (!std::isfinite(kernels.max_abs(values, n))) {
          std::size_t i = 0;
          while (std::isfinite(values[i])) ++i;
          return InvalidArgument("ndqsg: side information at coordinate " + std::to_string(at + i) +
                                 " drives the decoded value out of float range");
        }
        if (accumulate) {
          for (std::size_t i = 0; i < n; ++i) target[at + i] += weight * values[i];
        }
      }
      if (!packed) sym += length;
    }
    return Status::Ok();
  }

  int levels_;
  int rho_;
  uint32_t bucket_;
  CommonOptions options_;
  CodecSpecText spec_;
};

Result<uint32_t> ParseBucket(const CodecSpec& spec) {
  auto b = spec.GetInt("b", 0, 0, INT32_MAX);
  FEDRT_RETURN_IF_ERROR(b.status());
  return static_cast<uint32_t>(*b);
}

}  // namespace

Status MakeDqsgCodec(const CodecSpec& spec, CodecSlot* slot) {
  FEDRT_RETURN_IF_ERROR(spec.CheckKeys({"s", "b", "ef", "ec"}));
  auto s = spec.GetInt("s", 2, 1, 127);
  FEDRT_RETURN_IF_ERROR(s.status());
  auto b = ParseBucket(spec);
  FEDRT_RETURN_IF_ERROR(b.status());
  auto options = ParseCommonOptions(spec, false, SymbolCoding::kRans);
  FEDRT_RETURN_IF_ERROR(options.status());
  return Emplace<DitherCodec>(slot, static_cast<int>(*s), 0, *b, *options);
}

Status MakeNdqsgCodec(const CodecSpec& spec, CodecSlot* slot) {
  FEDRT_RETURN_IF_ERROR(spec.CheckKeys({"s1", "rho", "b", "ef", "ec"}));
  auto s1 = spec.GetInt("s1", 3, 1, 127);
  FEDRT_RETURN_IF_ERROR(s1.status());
  auto rho = spec.GetInt("rho", 3, 2, 255);
  FEDRT_RETURN_IF_ERROR(rho.status());
  auto b = ParseBucket(spec);
  FEDRT_RETURN_IF_ERROR(b.status());
  auto options = ParseCommonOptions(spec, false, SymbolCoding::kRans);
  FEDRT_RETURN_IF_ERROR(options.status());
  return Emplace<DitherCodec>(slot, static_cast<int>(*s1), static_cast<int>(*rho), *b, *options);
}

namespace codec_internal {

Status NdqsgCoarseSteps(const Codec& codec, const uint8_t* payload, std::size_t size,
                        const CodecContext& context, std::size_t d, std::vector<float>* steps,
                        std::size_t* bucket) {
  if (codec.id() != CodecId::kNdqsg) return InvalidArgument("expected an ndqsg codec, got '" + codec.spec() + "'");
  // The registry makes every kNdqsg codec a DitherCodec (no RTTI to ask).
  const auto& nested = static_cast<const DitherCodec&>(codec);
  PayloadView view;
  FEDRT_RETURN_IF_ERROR(nested.OpenScales(payload, size, context, d, &view, steps));
  for (float& step : *steps) step = static_cast<float>(nested.rho()) * step;
  *bucket = nested.BucketSize(d);
  return Status::Ok();
}

}  // namespace codec_internal
}  // namespace fedrt
