// The `moniqua` codec (codecs/README.md, "Moniqua") and the functions of
// fedrt/codecs/moniqua.h.
//
// Body: the symbol stream of d symbols in [0, 2^b) (symbols/symbol_coding.h),
// then, with `check=N`, the float32 values of N coordinates sampled with
// Philox purpose 3 (index = word * d >> 32, word k for sample k), so the
// receiver can see every wrap among them. Moniqua sends no scale. Default coding `pack` (exactly b bits
// a coordinate, as the paper's wire); `rans` is accepted but rarely helps,
// since the fractional parts of a model are close to uniform. The flags say
// which coding was used. Stochastic rounding draws Philox purpose 2.
//
// Encoding allocates nothing: `pack` and `none` quantize and code 256
// coordinates at a time on the stack (1024 symbols are a whole number of
// bytes at any b); `rans` needs every symbol first and uses d bytes of
// working space that MaxEncodedSize() adds at the end of the caller's buffer.
#include "moniqua/moniqua_codec.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/codec_common.h"
#include "fedrt/codecs/moniqua.h"
#include "fedrt/codecs/philox.h"
#include "fedrt/platform/config.h"
#include "moniqua/moniqua_kernels.h"
#include "symbols/symbol_coding.h"

namespace fedrt {

const MoniquaKernels& MoniquaKernelsFor(Isa requested) {
  const Isa isa = Avx2ForAvx512(requested);  // no AVX-512 variants: AVX2
  static const MoniquaKernels kScalar = {&scalar::MoniquaQuantize, &scalar::MoniquaRecover,
                                         &scalar::MoniquaQuantizeDither, &scalar::MoniquaRecoverDither};
#if FEDRT_HAVE_AVX2_KERNELS
  static const MoniquaKernels kAvx2 = {&avx2::MoniquaQuantize, &avx2::MoniquaRecover, &avx2::MoniquaQuantizeDither,
                                       &avx2::MoniquaRecoverDither};
  if (isa == Isa::kAvx2) return kAvx2;
#endif
#if FEDRT_HAVE_NEON_KERNELS
  static const MoniquaKernels kNeon = {&neon::MoniquaQuantize, &neon::MoniquaRecover, &neon::MoniquaQuantizeDither,
                                       &neon::MoniquaRecoverDither};
  if (isa == Isa::kNeon) return kNeon;
#endif
  (void)isa;
  return kScalar;
}

namespace {

using namespace codec_internal;

constexpr std::size_t kChunk = 1024;

// The shortest %g text (1 to 9 significant digits) that reads back as v.
void AppendFloat(float v, CodecSpecText* spec) {
  char text[40];
  int n = 0;
  for (int precision = 1; precision <= 9; ++precision) {
    n = std::snprintf(text, sizeof text, "%.*g", precision, static_cast<double>(v));
    if (std::strtof(text, nullptr) == v) break;
  }
  *spec += std::string_view(text, static_cast<std::size_t>(n));
}

class MoniquaCodec final : public Codec {
 public:
  // Allocates nothing (a new theta is a new codec, built in place by the
  // peer trainer's gossip).
  MoniquaCodec(const MoniquaParameters& p, CommonOptions common) : p_(p), common_(common) {
    spec_ += "moniqua:bits=";
    AppendInt(p.bits, &spec_);
    spec_ += ",theta=";
    AppendFloat(p.theta, &spec_);
    spec_ += ",round=";
    spec_ += p.stochastic ? "stochastic" : p.dither ? "dither" : "nearest";
    if (p.gamma != 1.0f) {
      spec_ += ",gamma=";
      AppendFloat(p.gamma, &spec_);
    }
    if (p.check != 0) {
      spec_ += ",check=";
      AppendInt(p.check, &spec_);
    }
    spec_ += ",";
    AppendCommonOptions(common, true, &spec_);
  }

  CodecId id() const override { return CodecId::kMoniqua; }
  const CodecSpecText& spec() const override { return spec_; }
  bool needs_side_info() const override { return true; }
  bool wants_error_feedback() const override { return common_.error_feedback; }
  const MoniquaParameters& parameters() const { return p_; }

  std::size_t MaxEncodedSize(std::size_t d) const override {
    return BodyOffset(spec_) + MaxSymbolStreamSize(d, Alphabet(), common_.coding) + CheckBytes(d) +
           (common_.coding == SymbolCoding::kRans ? d : 0);
  }

  Result<std::size_t> Encode(const float* input, std::size_t d, const CodecContext& context, uint8_t* out,
                             std::size_t capacity) override {
    if (capacity < MaxEncodedSize(d)) return OutOfRange("moniqua: output buffer too small");
    if ((uint64_t{d} >> 32) != 0) return OutOfRange("moniqua: vector longer than 2^32 - 1");
    FEDRT_RETURN_IF_ERROR(CheckFinite(input, d));
    const MoniquaKernels& kernels = MoniquaKernelsFor(ActiveIsa());
    RandomStream stream = StreamFor(context, RandomPurpose::kStochasticRounding);
    const RandomStream dither = StreamFor(context, RandomPurpose::kDither);
    uint8_t* body = out + BodyOffset(spec_);
    const std::size_t bound = MaxSymbolStreamSize(d, Alphabet(), common_.coding);
    uint16_t flags = 0;
    std::size_t body_size = 0;
    uint32_t words[kChunk];
    if (common_.coding == SymbolCoding::kRans) {
      uint8_t* symbols = body + bound;  // working space after the stream's room
      for (std::size_t at = 0; at < d; at += kChunk) {
        const std::size_t n = d - at < kChunk ? d - at : kChunk;
        Quantize(kernels, stream, dither, input + at, at, n, words, symbols + at);
      }
      auto size = EncodeSymbols(symbols, d, Alphabet(), common_.coding, body, bound, &flags);
      FEDRT_RETURN_IF_ERROR(size.status());
      body_size = *size;
    } else {
      uint8_t symbols[kChunk];
      std::size_t at = 0;
      do {
        const std::size_t n = d - at < kChunk ? d - at : kChunk;
        Quantize(kernels, stream, dither, input + at, at, n, words, symbols);
        auto size = EncodeSymbols(symbols, n, Alphabet(), common_.coding, body + body_size, bound - body_size,
                                  &flags);
        FEDRT_RETURN_IF_ERROR(size.status());
        body_size += *size;
        at += n;
      } while (at < d);
    }
    if (d > 0) {
      // The sampled coordinates at full precision, after the stream (moved
      // over the rANS working space, which is no longer needed).
      for (uint32_t k = 0; k < p_.check; ++k) {
        StoreFloatLe(body + body_size + 4 * k, input[CheckedIndex(context, d, k)]);
      }
      body_size += CheckBytes(d);
    }
    FinishPayload(MakeHeader(id(), context, d, 0, flags, body_size), spec_, out);
    return BodyOffset(spec_) + body_size;
  }

  Status Decode(const uint8_t* payload, std::size_t size, const CodecContext& context, float* out,
                std::size_t d, const float* side_info) const override {
    // |m| <= B/2 for every finite recovery, so a count at limit B means an
    // overflow (side information beyond float range of B).
    std::size_t bad = 0;
    FEDRT_RETURN_IF_ERROR(Recover(payload, size, context, side_info, d, p_.modulus, &bad, out,
                                  [](std::size_t, const float*, std::size_t) {}));
    if (bad != 0) return Corrupt("moniqua: recovery overflowed (side information too far from the model)");
    return Status::Ok();
  }

  Status DecodeAccumulate(const uint8_t* payload, std::size_t size, const CodecContext& context, float weight,
                          float* accumulator, std::size_t d, const float* side_info) const override {
    std::size_t bad = 0;
    // Recover chunk by chunk into `values`; the sink adds each chunk once the
    // whole stream is known to be valid (fixed-length streams are checked up
    // front, rANS streams are decoded completely first).
    FEDRT_RETURN_IF_ERROR(Recover(payload, size, context, side_info, d, p_.modulus, &bad, nullptr,
                                  [accumulator, weight](std::size_t at, const float* v, std::size_t n) {
                                    for (std::size_t i = 0; i < n; ++i) accumulator[at + i] += weight * v[i];
                                  }));
    if (bad != 0) return Corrupt("moniqua: recovery overflowed (side information too far from the model)");
    return Status::Ok();
  }

  // The payload's sampled full-precision coordinates (check=N): visit(index,
  // value) for each, none without. The payload must have been validated
  // (Decode succeeded). Allocates nothing.
  template <typename Visit>
  void VisitCheckedCoordinates(const uint8_t* payload, std::size_t size, const CodecContext& context, std::size_t d,
                               Visit visit) const {
    const std::size_t bytes = CheckBytes(d);
    for (uint32_t k = 0; k < p_.check && d > 0; ++k) {
      visit(CheckedIndex(context, d, k), LoadFloatLe(payload + size - bytes + 4 * k));
    }
  }

  // Validates the payload, then recovers it chunk by chunk: into out[0..d)
  // when `out` is given, else into a stack chunk; then calls sink(at, values, n).
  template <typename Sink>
  Status Recover(const uint8_t* payload, std::size_t size, const CodecContext& context, const float* side_info,
                 std::size_t d, float near_limit, std::size_t* near, float* out, Sink sink) const;

 private:
  uint32_t Alphabet() const { return 1u << p_.bits; }
  std::size_t CheckBytes(std::size_t d) const { return d == 0 ? 0 : std::size_t{4} * p_.check; }
  static std::size_t CheckedIndex(const CodecContext& context, std::size_t d, uint32_t k) {
    return MoniquaCheckedIndex(context, d, k);
  }

  // Coordinates [at, at + n) of the input at `x`; `words` is room for kChunk words.
  void Quantize(const MoniquaKernels& kernels, const RandomStream& stochastic, const RandomStream& dither,
                const float* x, std::size_t at, std::size_t n, uint32_t* words, uint8_t* symbols) const {
    if (p_.dither) {
      float u[kChunk];
      PhiloxDither(dither, at, n, u);
      kernels.quantize_dither(x, n, p_.modulus, p_.bits, u, symbols);
      return;
    }
    if (p_.stochastic) PhiloxWords(stochastic, at, n, words);
    kernels.quantize(x, n, p_.modulus, p_.bits, p_.stochastic ? words : nullptr, symbols);
  }

  // Recovery of coordinates [at, at + n) with the dither of the sender's stream.
  std::size_t RecoverChunk(const MoniquaKernels& kernels, const RandomStream& dither, const uint8_t* symbols,
                           std::size_t at, std::size_t n, const float* y, float near_limit, float* out) const {
    if (!p_.dither) return kernels.recover(symbols, n, p_.modulus, p_.bits, y, near_limit, out);
    float u[kChunk];
    PhiloxDither(dither, at, n, u);
    return kernels.recover_dither(symbols, n, p_.modulus, p_.bits, u, y, near_limit, out);
  }

  MoniquaParameters p_;
  CommonOptions common_;
  CodecSpecText spec_;
};

template <typename Sink>
Status MoniquaCodec::Recover(const uint8_t* payload, std::size_t size, const CodecContext& context,
                             const float* side_info, std::size_t d, float near_limit, std::size_t* near,
                             float* out, Sink sink) const {
  if (side_info == nullptr && d > 0) return InvalidArgument("moniqua: decoding needs the receiver's model");
  auto view = OpenPayload(payload, size, id(), spec_, context, d);
  FEDRT_RETURN_IF_ERROR(view.status());
  if (view->header.bucket != 0 || (view->header.flags & ~(kFlagSymbolsRans | kFlagSymbolsPacked)) != 0) {
    return Corrupt("moniqua: payload flags or bucket do not match the codec");
  }
  const uint16_t flags = view->header.flags;
  const bool flags_match = common_.coding == SymbolCoding::kNone   ? flags == 0
                           : common_.coding == SymbolCoding::kPack ? flags == kFlagSymbolsPacked
                                                                   : flags != 0;
  if (!flags_match) return Corrupt("moniqua: symbol coding flags do not match the codec's ec");
  const std::size_t check_bytes = CheckBytes(d);
  if (view->body_size < check_bytes) return Corrupt("moniqua: payload shorter than its checked coordinates");
  const std::size_t stream_size = view->body_size - check_bytes;
  for (std::size_t k = 0; k < check_bytes; k += 4) {
    if (!std::isfinite(LoadFloatLe(view->body + stream_size + k))) return Corrupt("moniqua: a checked value is not finite");
  }
  const MoniquaKernels& kernels = MoniquaKernelsFor(ActiveIsa());
  const RandomStream dither = StreamFor(context, RandomPurpose::kDither);
  float values[kChunk];
  *near = 0;
  if ((flags & kFlagSymbolsRans) != 0) {
    std::vector<uint8_t> symbols(d);  // rANS needs the whole stream decoded first
    FEDRT_RETURN_IF_ERROR(DecodeSymbols(view->body, stream_size, d, Alphabet(), flags, symbols.data()));
    for (std::size_t at = 0; at < d; at += kChunk) {
      const std::size_t n = d - at < kChunk ? d - at : kChunk;
      float* dst = out != nullptr ? out + at : values;
      *near += RecoverChunk(kernels, dither, symbols.data() + at, at, n, side_info + at, near_limit, dst);
      sink(at, dst, n);
    }
    return Status::Ok();
  }
  // Fixed-length streams: the size is known, and only the last chunk can
  // hold padding, so check it before producing any output.
  const bool packed = (flags & kFlagSymbolsPacked) != 0;
  const SymbolCoding coding = packed ? SymbolCoding::kPack : SymbolCoding::kNone;
  if (stream_size != MaxSymbolStreamSize(d, Alphabet(), coding)) {
    return Corrupt("moniqua: symbol stream size does not match d");
  }
  const std::size_t per_chunk = MaxSymbolStreamSize(kChunk, Alphabet(), coding);
  if (!packed) {  // one byte a symbol: check them all before any output
    for (std::size_t i = 0; i < d; ++i) {
      if (view->body[i] >= Alphabet()) return Corrupt("moniqua: symbol outside the alphabet");
    }
  }
  uint8_t symbols[kChunk];
  const std::size_t last = d == 0 ? 0 : (d - 1) / kChunk * kChunk;
  if (d > 0) {
    FEDRT_RETURN_IF_ERROR(DecodeSymbols(view->body + last / kChunk * per_chunk,
                                        stream_size - last / kChunk * per_chunk, d - last, Alphabet(),
                                        flags, symbols));
  }
  for (std::size_t at = 0; at < d; at += kChunk) {
    const std::size_t n = d - at < kChunk ? d - at : kChunk;
    const uint8_t* chunk = view->body + at / kChunk * per_chunk;
    FEDRT_RETURN_IF_ERROR(DecodeSymbols(chunk, at == last ? stream_size - at / kChunk * per_chunk : per_chunk,
                                        n, Alphabet(), flags, symbols));
    float* dst = out != nullptr ? out + at : values;
    *near += RecoverChunk(kernels, dither, symbols, at, n, side_info + at, near_limit, dst);
    sink(at, dst, n);
  }
  return Status::Ok();
}

}  // namespace

std::size_t MoniquaCheckedIndex(const CodecContext& context, std::size_t d, uint32_t k) {
  uint32_t word = 0;
  PhiloxWords(codec_internal::StreamFor(context, RandomPurpose::kRandomSubset), k, 1, &word);
  return static_cast<std::size_t>((static_cast<uint64_t>(word) * d) >> 32);
}

Result<MoniquaParameters> GetMoniquaParameters(const Codec& codec) {
  if (codec.id() != CodecId::kMoniqua) return InvalidArgument("not a moniqua codec: " + codec.spec());
  return static_cast<const MoniquaCodec&>(codec).parameters();
}

Status MoniquaDecode(const Codec& codec, const uint8_t* payload, std::size_t size, const CodecContext& context,
                     const float* side_info, float* out, std::size_t d, float margin, std::size_t* near_wrap,
                     MoniquaWraps* checked) {
  if (codec.id() != CodecId::kMoniqua) return InvalidArgument("not a moniqua codec: " + codec.spec());
  const auto& moniqua = static_cast<const MoniquaCodec&>(codec);
  const MoniquaParameters& p = moniqua.parameters();
  const float m = margin < 0 ? p.delta * p.modulus : margin;
  FEDRT_RETURN_IF_ERROR(moniqua.Recover(payload, size, context, side_info, d, 0.5f * p.modulus - m, near_wrap, out,
                                        [](std::size_t, const float*, std::size_t) {}));
  // The diagnostic path can afford a separate overflow check.
  for (std::size_t i = 0; i < d; ++i) {
    if (!std::isfinite(out[i])) return Corrupt("moniqua: recovery overflowed (side information too far from the model)");
  }
  if (checked != nullptr) {
    // A recovery within the bound is off by at most delta * B <= B/4; a
    // wrapped one by a non-zero multiple of B, so at least 3B/4: B/2
    // separates them, and every wrap at a checked coordinate is counted.
    *checked = MoniquaWraps{};
    const double half_modulus = 0.5 * static_cast<double>(p.modulus);
    moniqua.VisitCheckedCoordinates(payload, size, context, d, [&](std::size_t index, float value) {
      ++checked->checked;
      if (std::fabs(static_cast<double>(out[index]) - value) > half_modulus) ++checked->wrapped;
    });
  }
  return Status::Ok();
}

void MoniquaMixStep(float* model, const float* own_recovered, const MoniquaNeighbour* neighbours,
                    std::size_t neighbour_count, float lr, const float* grad, std::size_t d) {
  for (std::size_t i = 0; i < d; ++i) {
    float acc = 0.0f;
    for (std::size_t n = 0; n < neighbour_count; ++n) {
      acc = acc + neighbours[n].weight * (neighbours[n].recovered[i] - own_recovered[i]);
    }
    model[i] = (model[i] + acc) - lr * grad[i];
  }
}

Status MakeMoniquaCodec(const CodecSpec& spec, CodecSlot* slot) {
  FEDRT_RETURN_IF_ERROR(spec.CheckKeys({"bits", "theta", "round", "gamma", "check", "ef", "ec"}));
  MoniquaParameters p;
  auto bits = spec.GetInt("bits", 1, 1, 8);
  FEDRT_RETURN_IF_ERROR(bits.status());
  p.bits = static_cast<int>(*bits);
  if (!spec.Has("theta")) return InvalidArgument("moniqua: theta (the bound on neighbour distance) is required");
  auto theta = spec.GetDouble("theta", 0, 1e-30, 1e30);
  FEDRT_RETURN_IF_ERROR(theta.status());
  p.theta = static_cast<float>(*theta);
  auto round = spec.GetChoice("round", "nearest", {"nearest", "stochastic", "dither"});
  FEDRT_RETURN_IF_ERROR(round.status());
  p.stochastic = *round == "stochastic";
  p.dither = *round == "dither";
  auto check = spec.GetInt("check", 0, 0, kMaxMoniquaCheck);
  FEDRT_RETURN_IF_ERROR(check.status());
  p.check = static_cast<uint32_t>(*check);
  auto gamma = spec.GetDouble("gamma", 1.0, 1e-6, 1.0);
  FEDRT_RETURN_IF_ERROR(gamma.status());
  p.gamma = static_cast<float>(*gamma);
  if (p.stochastic && p.bits < 2) return InvalidArgument("moniqua: round=stochastic needs bits >= 2");
  p.delta = p.stochastic ? std::ldexp(1.0f, -p.bits) : std::ldexp(1.0f, -(p.bits + 1));
  p.modulus = 2.0f * p.theta / (1.0f - 2.0f * p.delta);
  auto common = ParseCommonOptions(spec, false, SymbolCoding::kPack);
  FEDRT_RETURN_IF_ERROR(common.status());
  return Emplace<MoniquaCodec>(slot, p, *common);
}

}  // namespace fedrt
