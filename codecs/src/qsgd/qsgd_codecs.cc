// The normalized quantizers: qsgd, terngrad, alq, amq (stochastic rounding on
// a level table) and sign (scaled sign), one class configured per codec.
//
// Body, little-endian:
//   [alq, amq only] u32 level-table version
//   one float32 scale per bucket (norm for the level codecs, mean|v| for sign)
//   the symbol stream (symbols/symbol_coding.h; the coding is in the flags):
//     level codecs: alphabet 2s+1, symbol s + k for +l_k and s - k for -l_k;
//     sign: alphabet 2, 1 = negative.
//
// Encoding allocates nothing: the symbols are staged in the tail of the
// caller's buffer, after the largest symbol stream (MaxEncodedSize counts
// those d bytes); with `ec=pack` they are packed chunk by chunk instead and
// that room stays unused. Decoding a packed stream validates it whole, then
// unpacks it chunk by chunk. Other codings: Decode stages the symbols in the
// last quarter of the output floats (each float is written after its own
// symbol has been read, and never reaches a symbol not yet read);
// DecodeAccumulate uses one d-byte vector.
#include "qsgd/qsgd_codecs.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/codec_common.h"
#include "fedrt/codecs/philox.h"
#include "qsgd/qsgd_kernels.h"
#include "symbols/symbol_coding.h"

namespace fedrt {
namespace {

using namespace codec_internal;

enum class ScaleKind { kL2, kMax, kMeanAbs };

struct QuantizerConfig {
  CodecId id = CodecId::kQsgd;
  CodecSpecText spec;
  ScaleKind scale = ScaleKind::kL2;
  bool sign_only = false;  // scaled sign: no levels, no randomness
  bool adaptive = false;   // alq, amq: the body names the table version
  uint32_t bucket = 512;
  int s = 1;
  LevelTable table;  // alq, amq only: qsgd and terngrad keep their uniform levels inline
  LevelModel model = LevelModel::kPooled;  // alq, amq: model=pooled|norm
  uint32_t refit = 1;                       // alq, amq: refit=N rounds or steps
  CommonOptions options;
};

// Coordinates per chunk of encoding (at most PackedSymbolWriter::kChunk - 7).
constexpr std::size_t kChunk = 512;
// Symbols per piece of decoding (at most PackedSymbolReader::kChunk - 7).
constexpr std::size_t kDecodeChunk = 2048;

class NormalizedQuantizer final : public AdaptiveCodec {
 public:
  explicit NormalizedQuantizer(QuantizerConfig config) : c_(std::move(config)) {
    if (c_.adaptive) {
      CopyLevels();
    } else {  // UniformLevels(s), without its vector
      for (int j = 0; j <= c_.s; ++j) levels_[j] = static_cast<float>(j) / static_cast<float>(c_.s);
    }
  }

  CodecId id() const override { return c_.id; }
  const CodecSpecText& spec() const override { return c_.spec; }
  // DecodeAccumulate of a coding other than pack: one byte per coordinate.
  std::size_t WorkspaceSize(std::size_t d) const override { return d; }
  bool wants_error_feedback() const override { return c_.options.error_feedback; }

  Status SetLevelTable(const LevelTable& table) override {
    FEDRT_RETURN_IF_ERROR(ValidateLevels(table));
    if (table.levels.size() != static_cast<std::size_t>(c_.s) + 1) {
      return InvalidArgument(c_.spec + ": level table has " + std::to_string(table.levels.size()) +
                             " levels, this codec needs " + std::to_string(c_.s + 1));
    }
    c_.table = table;
    CopyLevels();
    return Status::Ok();
  }
  const LevelTable& level_table() const override { return c_.table; }
  int levels_per_sign() const override { return c_.s; }
  LevelModel level_model() const override { return c_.model; }
  uint32_t refit_interval() const override { return c_.refit; }
  Result<LevelStatistics> MeasureLevelStatistics(const float* input, std::size_t d) const override {
    return ComputeLevelStatistics(input, d, c_.bucket, norm());
  }
  Status MeasureLevelStatisticsInto(const float* input, std::size_t d, LevelStatistics* out) const override {
    return ComputeLevelStatisticsInto(input, d, c_.bucket, norm(), out);
  }
  NormKind norm() const { return c_.scale == ScaleKind::kMax ? NormKind::kMax : NormKind::kL2; }

  std::size_t MaxEncodedSize(std::size_t d) const override {
    return BodyOffset(c_.spec) + Prefix(d) + MaxSymbolStreamSize(d, Alphabet(), c_.options.coding) + d;
  }

  Result<std::size_t> Encode(const float* input, std::size_t d, const CodecContext& context, uint8_t* out,
                             std::size_t capacity) override {
    if (capacity < MaxEncodedSize(d)) return OutOfRange(c_.spec + ": output buffer too small");
    const std::size_t stream_capacity = MaxSymbolStreamSize(d, Alphabet(), c_.options.coding);
    if (Prefix(d) + uint64_t{stream_capacity} > UINT32_MAX) return OutOfRange(c_.spec + ": vector too long for one payload");
    const QsgdKernels& k = QsgdKernelsFor(ActiveIsa());
    uint8_t* body = out + BodyOffset(c_.spec);
    uint8_t* scales = body;
    if (c_.adaptive) {
      StoreLe32(body, c_.table.version);
      scales += 4;
    }
    uint8_t* stream = body + Prefix(d);
    uint8_t* symbols = stream + stream_capacity;  // staging area, see the file comment
    const RandomStream random = {context.session_seed, context.tensor_id, context.round, context.sender_id,
                                 RandomPurpose::kStochasticRounding};
    // ec=pack: symbols are packed chunk by chunk while in L1 cache; the other
    // codings need the whole symbol vector (rANS: its histogram) first.
    const bool packed = c_.options.coding == SymbolCoding::kPack;
    PackedSymbolWriter writer(Alphabet(), stream);
    const std::size_t buckets = Buckets(d);
    for (std::size_t b = 0; b < buckets; ++b) {
      const std::size_t begin = b * BucketSize(d);
      const std::size_t n = std::min(BucketSize(d), d - begin);
      const float* v = input + begin;
      auto scale_or = Scale(k, v, n);
      if (!scale_or.ok()) {
        const Status named = CheckFinite(input, d);  // names the coordinate
        return named.ok() ? scale_or.status() : named;
      }
      const float scale = *scale_or;
      StoreFloatLe(scales + 4 * b, scale);
      for (std::size_t at = 0; at < n; at += kChunk) {
        const std::size_t m = std::min(kChunk, n - at);
        uint8_t* out_symbols = packed ? writer.Reserve(m) : symbols + begin + at;
        if (c_.sign_only) {
          k.sign_quantize(v + at, m, out_symbols);
        } else if (scale == 0.0f) {
          std::memset(out_symbols, c_.s, m);
        } else {
          k.quantize_levels_stream(v + at, m, scale, levels_, c_.s, random, begin + at, out_symbols);
        }
        if (packed) writer.Commit(m);
      }
    }
    uint16_t flags = 0;
    Result<std::size_t> size = std::size_t{0};
    if (packed) {
      size = writer.Finish();
      flags = writer.flags();
    } else {
      size = EncodeSymbols(symbols, d, Alphabet(), c_.options.coding, stream, stream_capacity, &flags);
    }
    FEDRT_RETURN_IF_ERROR(size.status());
    if (c_.options.error_feedback) flags |= kFlagErrorFeedback;
    const std::size_t body_size = Prefix(d) + *size;
    FinishPayload(MakeHeader(c_.id, context, d, c_.bucket, flags, body_size), c_.spec, out);
    return BodyOffset(c_.spec) + body_size;
  }

  Status Decode(const uint8_t* payload, std::size_t size, const CodecContext& context, float* out, std::size_t d,
                const float* /*side_info*/) const override {
    return DecodeInto(payload, size, context, d, out, 0.0f, false);
  }

  Status DecodeAccumulate(const uint8_t* payload, std::size_t size, const CodecContext& context, float weight,
                          float* accumulator, std::size_t d, const float* /*side_info*/) const override {
    return DecodeInto(payload, size, context, d, accumulator, weight, true);
  }

 private:
  uint32_t Alphabet() const { return c_.sign_only ? 2u : 2u * static_cast<uint32_t>(c_.s) + 1u; }
  std::size_t BucketSize(std::size_t d) const { return c_.bucket == 0 ? (d == 0 ? 1 : d) : c_.bucket; }
  std::size_t Buckets(std::size_t d) const { return (d + BucketSize(d) - 1) / BucketSize(d); }
  std::size_t Prefix(std::size_t d) const { return (c_.adaptive ? 4 : 0) + 4 * Buckets(d); }

  // The bucket's scale; an error iff the bucket holds a NaN or an Inf. The
  // L2 and mean-|v| sums run in double, where squares and sums of finite
  // floats stay finite and a NaN or Inf always propagates: their result is
  // the finiteness check. max|v| compares, so that bucket is scanned first.
  Result<float> Scale(const QsgdKernels& k, const float* v, std::size_t n) const {
    switch (c_.scale) {
      case ScaleKind::kL2: {
        const float norm = k.l2_norm(v, n);
        if (std::isnan(norm)) return InvalidArgument("non-finite input");
        if (std::isinf(norm)) {
          FEDRT_RETURN_IF_ERROR(CheckFinite(v, n));
          // The norm of finite floats can still overflow float32; the clamp
          // keeps the payload finite (r is clamped to 1 by the kernel).
          return FLT_MAX;
        }
        return norm;
      }
      case ScaleKind::kMax:
        FEDRT_RETURN_IF_ERROR(CheckFinite(v, n));
        return k.max_abs(v, n);
      case ScaleKind::kMeanAbs: {
        const float mean = k.mean_abs(v, n);
        if (!std::isfinite(mean)) return InvalidArgument("non-finite input");
        return mean;
      }
    }
    return 0.0f;
  }

  template <typename Fn>
  void ForEachBucket(std::size_t d, const uint8_t* scales, Fn fn) const {
    const std::size_t buckets = Buckets(d);
    for (std::size_t b = 0; b < buckets; ++b) {
      const std::size_t begin = b * BucketSize(d);
      fn(begin, std::min(BucketSize(d), d - begin), LoadFloatLe(scales + 4 * b));
    }
  }

  // Decodes into `target`: overwrite (accumulate == false) or target += weight * decoded.
  // A packed stream is validated whole, then unpacked chunk by chunk next to
  // its use. Other codings decode into symbols staged in the last quarter of
  // `out` (Decode; see the file comment) or in one d-byte vector (accumulate).
  Status DecodeInto(const uint8_t* payload, std::size_t size, const CodecContext& context, std::size_t d,
                    float* target, float weight, bool accumulate) const {
    auto opened = OpenBody(payload, size, context, d);
    FEDRT_RETURN_IF_ERROR(opened.status());
    const PayloadView& view = *opened;
    const uint8_t* scales = view.body + (c_.adaptive ? 4 : 0);
    const uint8_t* stream = view.body + Prefix(d);
    const std::size_t stream_size = view.body_size - Prefix(d);
    const bool packed = IsPackedCoding(view.header.flags, Alphabet());
    PackedSymbolReader reader(stream, d, Alphabet());
    std::vector<uint8_t> staging;
    uint8_t* symbols = nullptr;
    if (packed) {
      FEDRT_RETURN_IF_ERROR(reader.Validate(stream_size));
    } else {
      if (accumulate) {
        symbols = static_cast<uint8_t*>(Workspace(d));
        if (symbols == nullptr) {
          staging.resize(d);
          symbols = staging.data();
        }
      } else {
        symbols = reinterpret_cast<uint8_t*>(target) + 3 * d;
      }
      FEDRT_RETURN_IF_ERROR(DecodeSymbols(stream, stream_size, d, Alphabet(), view.header.flags, symbols));
    }
    const QsgdKernels& k = QsgdKernelsFor(ActiveIsa());
    ForEachBucket(d, scales, [&](std::size_t begin, std::size_t n, float scale) {
      for (std::size_t at = 0; at < n; at += kDecodeChunk) {
        const std::size_t m = std::min(kDecodeChunk, n - at);
        const uint8_t* chunk = packed ? reader.Next(m) : symbols + begin + at;
        float* dst = target + begin + at;
        if (c_.sign_only) {
          if (accumulate) {
            k.sign_dequantize_accumulate(chunk, m, scale, weight, dst);
          } else {
            k.sign_dequantize(chunk, m, scale, dst);
          }
        } else if (accumulate) {
          k.dequantize_levels_accumulate(chunk, m, scale, levels_, c_.s, weight, dst);
        } else {
          k.dequantize_levels(chunk, m, scale, levels_, c_.s, dst);
        }
      }
    });
    return Status::Ok();
  }

  // Validates the payload's header, level-table version and scales.
  Result<PayloadView> OpenBody(const uint8_t* payload, std::size_t size, const CodecContext& context,
                               std::size_t d) const {
    auto view = OpenPayload(payload, size, c_.id, c_.spec, context, d);
    FEDRT_RETURN_IF_ERROR(view.status());
    if (view->header.bucket != c_.bucket) return Corrupt(c_.spec + ": header bucket size differs from the spec");
    const std::size_t prefix = Prefix(d);
    if (view->body_size < prefix) return Corrupt(c_.spec + ": body shorter than its scales");
    const uint8_t* scales = view->body;
    if (c_.adaptive) {
      const uint32_t version = LoadLe32(view->body);
      if (version != c_.table.version) {
        return Status(StatusCode::kFailedPrecondition,
                      c_.spec + ": payload was encoded with level table version " + std::to_string(version) +
                          ", this decoder has version " + std::to_string(c_.table.version));
      }
      scales += 4;
    }
    for (std::size_t b = 0; b < Buckets(d); ++b) {
      const float scale = LoadFloatLe(scales + 4 * b);
      if (!(scale >= 0.0f) || scale > FLT_MAX) {
        return Corrupt(c_.spec + ": bucket " + std::to_string(b) + " has scale " + std::to_string(scale));
      }
    }
    return view;
  }

  void CopyLevels() {
    for (std::size_t j = 0; j < c_.table.levels.size() && j < kMaxLevels; ++j) levels_[j] = c_.table.levels[j];
  }

  // The levels the kernels read (s + 1 <= 128 entries): a copy of the table
  // inside the object, so qsgd and terngrad hold no heap memory.
  static constexpr std::size_t kMaxLevels = 128;
  QuantizerConfig c_;
  float levels_[kMaxLevels] = {};
};

Result<uint32_t> ParseBucket(const CodecSpec& spec, int64_t default_bucket) {
  auto b = spec.GetInt("b", default_bucket, 0, int64_t{1} << 30);
  FEDRT_RETURN_IF_ERROR(b.status());
  return static_cast<uint32_t>(*b);
}


// alq and amq: bits (3), b (1024); s = 2^(bits-1) - 1 levels per sign.
Result<QuantizerConfig> AdaptiveLevelConfig(const CodecSpec& spec, CodecId id) {
  FEDRT_RETURN_IF_ERROR(spec.CheckKeys({"bits", "b", "ef", "ec", "model", "refit"}));
  auto bits = spec.GetInt("bits", 3, 2, 8);
  FEDRT_RETURN_IF_ERROR(bits.status());
  auto refit = spec.GetInt("refit", 1, 1, 1000000);
  FEDRT_RETURN_IF_ERROR(refit.status());
  auto model = spec.GetChoice("model", "pooled", {"pooled", "norm"});
  FEDRT_RETURN_IF_ERROR(model.status());
  auto bucket = ParseBucket(spec, 1024);
  FEDRT_RETURN_IF_ERROR(bucket.status());
  auto options = ParseCommonOptions(spec, false, SymbolCoding::kRans);
  FEDRT_RETURN_IF_ERROR(options.status());
  QuantizerConfig c;
  c.id = id;
  c.adaptive = true;
  c.bucket = *bucket;
  c.s = (1 << (*bits - 1)) - 1;
  // Initial tables (version 0): ALQ starts uniform, AMQ at its family's p = 1/2.
  c.table = id == CodecId::kAlq ? UniformLevels(c.s) : ExponentialLevels(c.s, 0.5f);
  c.options = *options;
  c.model = *model == "norm" ? LevelModel::kNormWeighted : LevelModel::kPooled;
  c.refit = static_cast<uint32_t>(*refit);
  // model=pooled and refit=1 (the defaults) are left out of the canonical
  // spec, so payloads of those codecs keep their bytes.
  c.spec += std::string(id == CodecId::kAlq ? "alq" : "amq") + ":bits=" + std::to_string(*bits) +
            ",b=" + std::to_string(c.bucket) + (c.model == LevelModel::kNormWeighted ? ",model=norm" : "") +
            (c.refit != 1 ? ",refit=" + std::to_string(c.refit) : std::string()) + "," +
            CommonOptionsSuffix(c.options, true);
  return c;
}

// Builds a codec whose spec has only b, ef and ec: "name:b=512,ef=off,ec=rans".
Status EmplaceBucketCodec(const char* name, QuantizerConfig c, CodecSlot* slot) {
  c.spec += name;
  c.spec += ":b=";
  AppendInt(c.bucket, &c.spec);
  c.spec += ",";
  AppendCommonOptions(c.options, true, &c.spec);
  return Emplace<NormalizedQuantizer>(slot, std::move(c));
}

}  // namespace

Status MakeQsgdCodec(const CodecSpec& spec, CodecSlot* slot) {
  FEDRT_RETURN_IF_ERROR(spec.CheckKeys({"s", "b", "norm", "ef", "ec"}));
  auto s = spec.GetInt("s", 4, 1, 127);
  FEDRT_RETURN_IF_ERROR(s.status());
  auto bucket = ParseBucket(spec, 512);
  FEDRT_RETURN_IF_ERROR(bucket.status());
  auto norm = spec.GetChoice("norm", "l2", {"l2", "max"});
  FEDRT_RETURN_IF_ERROR(norm.status());
  auto options = ParseCommonOptions(spec, false, SymbolCoding::kRans);
  FEDRT_RETURN_IF_ERROR(options.status());
  QuantizerConfig c;
  c.id = CodecId::kQsgd;
  c.scale = *norm == "l2" ? ScaleKind::kL2 : ScaleKind::kMax;
  c.bucket = *bucket;
  c.s = static_cast<int>(*s);
  c.options = *options;
  c.spec += "qsgd:s=";
  AppendInt(c.s, &c.spec);
  c.spec += ",b=";
  AppendInt(c.bucket, &c.spec);
  c.spec += ",norm=";
  c.spec += *norm;
  c.spec += ",";
  AppendCommonOptions(c.options, true, &c.spec);
  return Emplace<NormalizedQuantizer>(slot, std::move(c));
}

Status MakeTernGradCodec(const CodecSpec& spec, CodecSlot* slot) {
  FEDRT_RETURN_IF_ERROR(spec.CheckKeys({"b", "ef", "ec"}));
  auto bucket = ParseBucket(spec, 512);
  FEDRT_RETURN_IF_ERROR(bucket.status());
  auto options = ParseCommonOptions(spec, false, SymbolCoding::kRans);
  FEDRT_RETURN_IF_ERROR(options.status());
  QuantizerConfig c;
  c.id = CodecId::kTernGrad;
  c.scale = ScaleKind::kMax;
  c.bucket = *bucket;
  c.s = 1;
  c.options = *options;
  return EmplaceBucketCodec("terngrad", std::move(c), slot);
}

Status MakeSignCodec(const CodecSpec& spec, CodecSlot* slot) {
  FEDRT_RETURN_IF_ERROR(spec.CheckKeys({"b", "ef", "ec"}));
  auto bucket = ParseBucket(spec, 512);
  FEDRT_RETURN_IF_ERROR(bucket.status());
  auto options = ParseCommonOptions(spec, true, SymbolCoding::kRans);
  FEDRT_RETURN_IF_ERROR(options.status());
  if (!options->error_feedback) {
    return InvalidArgument("sign: error feedback is always on for scaled sign (EF-SignSGD); remove 'ef=off'");
  }
  QuantizerConfig c;
  c.id = CodecId::kSign;
  c.scale = ScaleKind::kMeanAbs;
  c.sign_only = true;
  c.bucket = *bucket;
  c.options = *options;
  return EmplaceBucketCodec("sign", std::move(c), slot);
}

Status MakeAlqCodec(const CodecSpec& spec, CodecSlot* slot) {
  auto config = AdaptiveLevelConfig(spec, CodecId::kAlq);
  FEDRT_RETURN_IF_ERROR(config.status());
  return Emplace<NormalizedQuantizer>(slot, std::move(*config));
}

Status MakeAmqCodec(const CodecSpec& spec, CodecSlot* slot) {
  auto config = AdaptiveLevelConfig(spec, CodecId::kAmq);
  FEDRT_RETURN_IF_ERROR(config.status());
  return Emplace<NormalizedQuantizer>(slot, std::move(*config));
}

AdaptiveCodec* AdaptiveQuantizer(Codec* codec) {
  if (codec == nullptr || (codec->id() != CodecId::kAlq && codec->id() != CodecId::kAmq)) return nullptr;
  // MakeAlqCodec and MakeAmqCodec are the only makers of these ids.
  return static_cast<NormalizedQuantizer*>(codec);
}

Result<LevelTable> FitLevelTable(const AdaptiveCodec& codec, const LevelStatistics& stats, uint32_t next_version) {
  LevelTable table;
  FEDRT_RETURN_IF_ERROR(FitLevelTableInto(codec, stats, next_version, &table));
  return table;
}

Status FitLevelTableInto(const AdaptiveCodec& codec, const LevelStatistics& stats, uint32_t next_version,
                         LevelTable* out) {
  int bits = 1;
  while (LevelsForBits(bits) != codec.levels_per_sign() && bits <= kMaxLevelBits) ++bits;
  if (codec.id() == CodecId::kAmq) return FitAmqLevelsInto(stats, bits, next_version, codec.level_model(), out);
  return FitAlqLevelsInto(stats, bits, next_version, codec.level_model(), out);
}

}  // namespace fedrt
