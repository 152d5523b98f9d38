// NDQSG helpers for the aggregator (fedrt/codecs/ndqsg.h).
#include "fedrt/codecs/ndqsg.h"

#include <algorithm>
#include <cmath>

#include "dqsg/dqsg_codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "fedrt/codecs/philox.h"

namespace fedrt {

std::size_t NdqsgAnchorCount(std::size_t senders, double fraction) {
  if (senders == 0) return 0;
  const double wanted = std::ceil(fraction * static_cast<double>(senders));
  if (!(wanted >= 1.0)) return 1;
  return wanted >= static_cast<double>(senders) ? senders : static_cast<std::size_t>(wanted);
}

std::vector<uint32_t> ChooseNdqsgAnchors(uint64_t seed, uint32_t round, std::vector<uint32_t> senders,
                                         std::size_t count) {
  std::sort(senders.begin(), senders.end());
  senders.erase(std::unique(senders.begin(), senders.end()), senders.end());
  if (count > senders.size()) count = senders.size();
  RandomStream stream;
  stream.seed = seed;
  stream.round = round;
  stream.purpose = RandomPurpose::kLeaderChoice;
  for (std::size_t i = 0; i < count; ++i) {
    uint32_t word;
    PhiloxWords(stream, i, 1, &word);
    // Multiply-shift maps the word onto [0, remaining) without a division.
    const uint64_t remaining = senders.size() - i;
    const std::size_t j = i + static_cast<std::size_t>((uint64_t{word} * remaining) >> 32);
    std::swap(senders[i], senders[j]);
  }
  senders.resize(count);
  std::sort(senders.begin(), senders.end());
  return senders;
}

Result<std::string> NdqsgAnchorSpec(const std::string& ndqsg_spec) {
  auto codec = MakeCodec(ndqsg_spec);
  FEDRT_RETURN_IF_ERROR(codec.status());
  if ((*codec)->id() != CodecId::kNdqsg) return InvalidArgument("'" + ndqsg_spec + "' is not an ndqsg spec");
  auto spec = CodecSpec::Parse((*codec)->spec());  // canonical: every key present
  FEDRT_RETURN_IF_ERROR(spec.status());
  auto s1 = spec->GetInt("s1", 3, 1, 127);
  auto b = spec->GetInt("b", 0, 0, INT32_MAX);
  auto ef = spec->GetChoice("ef", "off", {"on", "off"});
  auto ec = spec->GetChoice("ec", "rans", {"none", "pack", "rans"});
  return "dqsg:s=" + std::to_string(*s1) + ",b=" + std::to_string(*b) + ",ef=" + std::string(*ef) + ",ec=" + std::string(*ec);
}

Result<std::string> NdqsgAnchorSpec(const std::string& ndqsg_spec, int levels) {
  Result<std::string> anchor = NdqsgAnchorSpec(ndqsg_spec);
  FEDRT_RETURN_IF_ERROR(anchor.status());
  if (levels == 0) return anchor;
  if (levels < 1 || levels > 127) return InvalidArgument("anchor levels must be 1 to 127");
  const std::string& spec = *anchor;
  return "dqsg:s=" + std::to_string(levels) + spec.substr(spec.find(','));
}

Result<std::string> NdqsgSpecWithRho(const std::string& ndqsg_spec, int rho) {
  auto codec = MakeCodec(ndqsg_spec);
  FEDRT_RETURN_IF_ERROR(codec.status());
  if ((*codec)->id() != CodecId::kNdqsg) return InvalidArgument("'" + ndqsg_spec + "' is not an ndqsg spec");
  auto spec = CodecSpec::Parse((*codec)->spec());
  FEDRT_RETURN_IF_ERROR(spec.status());
  auto s1 = spec->GetInt("s1", 3, 1, 127);
  auto b = spec->GetInt("b", 0, 0, INT32_MAX);
  auto ef = spec->GetChoice("ef", "off", {"on", "off"});
  auto ec = spec->GetChoice("ec", "rans", {"none", "pack", "rans"});
  auto made = MakeCodec("ndqsg:s1=" + std::to_string(*s1) + ",rho=" + std::to_string(rho) +
                        ",b=" + std::to_string(*b) + ",ef=" + std::string(*ef) + ",ec=" + std::string(*ec));
  FEDRT_RETURN_IF_ERROR(made.status());
  return std::string((*made)->spec());
}

int NdqsgNextRho(int rho) { return rho < 3 ? 3 : rho + 2 - (rho % 2 == 0 ? 1 : 0); }

int NdqsgPreviousRho(int rho) { return rho <= 3 ? 2 : rho - 2 + (rho % 2 == 0 ? 1 : 0); }

double IdealFixedLengthBits(uint64_t coordinates, uint64_t scales, uint32_t alphabet) {
  return static_cast<double>(coordinates) * std::log2(static_cast<double>(alphabet)) +
         32.0 * static_cast<double>(scales);
}

namespace {

// CountNearWrap over scratch the caller keeps (the coarse steps; the parts
// of a tensor set): once they have grown, counting allocates nothing.
Result<std::size_t> CountNearWrapInto(const Codec& codec, const uint8_t* payload, std::size_t size,
                                      const CodecContext& context, const float* decoded, const float* side_info,
                                      std::size_t d, float margin, std::vector<float>* steps,
                                      std::vector<TensorPart>* /*parts*/) {
  if (!(margin >= 0.0f && margin < 0.5f)) return InvalidArgument("wrap margin must be in [0, 1/2)");
  std::size_t bucket = 0;
  FEDRT_RETURN_IF_ERROR(codec_internal::NdqsgCoarseSteps(codec, payload, size, context, d, steps, &bucket));
  std::size_t near = 0;
  for (std::size_t k = 0; k < steps->size(); ++k) {
    const float limit = (0.5f - margin) * (*steps)[k];
    const std::size_t end = std::min(d, (k + 1) * bucket);
    for (std::size_t i = k * bucket; i < end; ++i) {
      if (std::fabs(decoded[i] - side_info[i]) > limit) ++near;
    }
  }
  return near;
}

Result<std::size_t> CountNearWrapInto(const TensorSetCodec& codec, const uint8_t* payload, std::size_t size,
                                      const CodecContext& context, const float* decoded, const float* side_info,
                                      std::size_t d, float margin, std::vector<float>* steps,
                                      std::vector<TensorPart>* parts) {
  if (d != codec.total()) return InvalidArgument("a vector of " + std::to_string(d) + " for a tensor set of " +
                                                 std::to_string(codec.total()));
  FEDRT_RETURN_IF_ERROR(codec.SplitInto(payload, size, parts));
  std::size_t near = 0;
  for (std::size_t t = 0; t < parts->size(); ++t) {
    const TensorPart& p = (*parts)[t];
    CodecContext part = context;
    part.tensor_id = context.tensor_id + static_cast<uint32_t>(t);
    Result<std::size_t> count = CountNearWrapInto(codec.inner(), p.payload, p.size, part, decoded + p.offset,
                                                  side_info + p.offset, p.d, margin, steps, nullptr);
    if (!count.ok()) return count.status();
    near += *count;
  }
  return near;
}

}  // namespace

Result<std::size_t> CountNearWrap(const Codec& codec, const uint8_t* payload, std::size_t size,
                                  const CodecContext& context, const float* decoded, const float* side_info,
                                  std::size_t d, float margin) {
  std::vector<float> steps;
  return CountNearWrapInto(codec, payload, size, context, decoded, side_info, d, margin, &steps, nullptr);
}

Result<std::size_t> CountNearWrap(const TensorSetCodec& codec, const uint8_t* payload, std::size_t size,
                                  const CodecContext& context, const float* decoded, const float* side_info,
                                  std::size_t d, float margin) {
  std::vector<float> steps;
  std::vector<TensorPart> parts;
  return CountNearWrapInto(codec, payload, size, context, decoded, side_info, d, margin, &steps, &parts);
}

NdqsgRunningMean::NdqsgRunningMean(std::size_t d) : mean_(d, 0.0f) {}

void NdqsgRunningMean::Reset() {
  std::fill(mean_.begin(), mean_.end(), 0.0f);
  count_ = 0;
}

void NdqsgRunningMean::Add(const float* x) {
  ++count_;
  const float inverse = 1.0f / static_cast<float>(count_);
  for (std::size_t i = 0; i < mean_.size(); ++i) mean_[i] += (x[i] - mean_[i]) * inverse;
}

Status NdqsgRunningMean::AddAnchor(const Codec& dqsg, const uint8_t* payload, std::size_t size,
                                   const CodecContext& context, float* scratch) {
  if (dqsg.id() != CodecId::kDqsg) return InvalidArgument("anchors use dqsg, got '" + dqsg.spec() + "'");
  FEDRT_RETURN_IF_ERROR(dqsg.Decode(payload, size, context, scratch, d()));
  Add(scratch);
  return Status::Ok();
}

// Both forms: the codec decodes against the mean, CountNearWrap of its kind counts.
template <typename NdqsgCodec>
Status NdqsgRunningMean::AddNestedWith(const NdqsgCodec& ndqsg, const uint8_t* payload, std::size_t size,
                                       const CodecContext& context, float* scratch, float margin,
                                       NdqsgWrapReport* report) {
  if (count_ == 0) {
    return Status(StatusCode::kFailedPrecondition, "ndqsg: no anchor decoded yet in this round (no side information)");
  }
  FEDRT_RETURN_IF_ERROR(ndqsg.Decode(payload, size, context, scratch, d(), mean_.data()));
  if (report != nullptr) {
    auto near = CountNearWrapInto(ndqsg, payload, size, context, scratch, mean_.data(), d(), margin, &steps_, &parts_);
    FEDRT_RETURN_IF_ERROR(near.status());
    report->near_wrap = *near;
  }
  Add(scratch);
  return Status::Ok();
}

Status NdqsgRunningMean::AddNested(const Codec& ndqsg, const uint8_t* payload, std::size_t size,
                                   const CodecContext& context, float* scratch, float margin,
                                   NdqsgWrapReport* report) {
  return AddNestedWith(ndqsg, payload, size, context, scratch, margin, report);
}

Status NdqsgRunningMean::AddNested(const TensorSetCodec& ndqsg, const uint8_t* payload, std::size_t size,
                                   const CodecContext& context, float* scratch, float margin,
                                   NdqsgWrapReport* report) {
  return AddNestedWith(ndqsg, payload, size, context, scratch, margin, report);
}

}  // namespace fedrt
