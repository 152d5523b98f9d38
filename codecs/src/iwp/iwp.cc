// Importance-weighted pruning (see fedrt/codecs/iwp.h).
#include "fedrt/codecs/iwp.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/philox.h"
#include "sparse/index_coding.h"

namespace fedrt {

uint32_t IwpLeader(uint64_t session_seed, uint32_t step, uint32_t nodes) {
  RandomStream stream;
  stream.seed = session_seed;
  stream.round = step;
  stream.purpose = RandomPurpose::kLeaderChoice;
  uint32_t word = 0;
  PhiloxWords(stream, 0, 1, &word);
  return static_cast<uint32_t>((uint64_t{word} * nodes) >> 32);
}

Status IwpAccumulator::Check(std::size_t d, const IwpOptions& o) {
  if (uint64_t{d} >= (uint64_t{1} << 32) - 1) return InvalidArgument("iwp: tensor longer than 2^32 - 2");
  if (!(o.target_fraction > 0 && o.target_fraction <= 1)) return InvalidArgument("iwp: target_fraction not in (0, 1]");
  if (!(o.warmup_fraction > 0 && o.warmup_fraction <= 1)) return InvalidArgument("iwp: warmup_fraction not in (0, 1]");
  if (!(o.eps > 0) || !std::isfinite(o.eps)) return InvalidArgument("iwp: eps must be > 0");
  if (o.sample_size == 0) return InvalidArgument("iwp: sample_size must be >= 1");
  if (!(o.clip_norm >= 0) || !std::isfinite(o.clip_norm)) return InvalidArgument("iwp: clip_norm must be >= 0");
  if (!(o.momentum >= 0 && o.momentum < 1)) return InvalidArgument("iwp: momentum not in [0, 1)");
  return Status::Ok();
}

IwpAccumulator::IwpAccumulator(std::size_t d, const IwpOptions& options)
    : options_(options),
      accumulator_(d, 0.0f),
      velocity_(options.momentum > 0 ? d : 0, 0.0f),
      tensor_sizes_(1, d),
      sample_(std::min(options.sample_size, d == 0 ? 1 : d)) {}

Status IwpAccumulator::SetTensors(const std::vector<std::size_t>& sizes) {
  uint64_t total = 0;
  for (std::size_t s : sizes) total += s;
  if (total != accumulator_.size()) {
    return InvalidArgument("iwp: tensor sizes add up to " + std::to_string(total) + ", not " +
                           std::to_string(accumulator_.size()));
  }
  tensor_sizes_ = sizes;
  return Status::Ok();
}

Status IwpAccumulator::Accumulate(const float* grad, float rate) {
  const std::size_t d = accumulator_.size();
  if (!(rate >= 0) || !std::isfinite(rate)) return InvalidArgument("iwp: accumulation rate must be finite and >= 0");
  FEDRT_RETURN_IF_ERROR(CheckFinite(grad, d));
  float scale = 1.0f;
  if (options_.clip_norm > 0) {
    double sum = 0;
    for (std::size_t i = 0; i < d; ++i) sum += double{grad[i]} * grad[i];
    const double norm = std::sqrt(sum);
    if (norm > options_.clip_norm) scale = static_cast<float>(options_.clip_norm / norm);
  }
  if (!velocity_.empty()) {
    const float m = options_.momentum;
    for (std::size_t i = 0; i < d; ++i) {
      velocity_[i] = m * velocity_[i] + grad[i] * scale;
      accumulator_[i] += rate * velocity_[i];
    }
  } else if (scale == 1.0f && rate == 1.0f) {
    for (std::size_t i = 0; i < d; ++i) accumulator_[i] += grad[i];
  } else {
    // (g * scale) * rate in that order: with rate 1 the same floats as before.
    for (std::size_t i = 0; i < d; ++i) accumulator_[i] += grad[i] * scale * rate;
  }
  return Status::Ok();
}

float IwpAccumulator::StepFraction(uint32_t step) const {
  if (step >= options_.warmup_steps) return options_.target_fraction;
  if (!options_.warmup_exponential) return options_.warmup_fraction;
  // Only the step's leader uses it (the others receive its indices), so the
  // peers agree whatever the platform's pow returns.
  const double t = static_cast<double>(step) / static_cast<double>(options_.warmup_steps);
  const double f = static_cast<double>(options_.warmup_fraction) *
                   std::pow(static_cast<double>(options_.target_fraction) / options_.warmup_fraction, t);
  return static_cast<float>(f);
}

void IwpAccumulator::SelectIndices(const float* weights, const IwpStepContext& context,
                                   std::vector<uint32_t>* indices) {
  const float* a = accumulator_.data();
  const float eps = options_.eps;
  auto importance = [a, weights, eps](std::size_t i) { return std::fabs(a[i]) / (std::fabs(weights[i]) + eps); };
  indices->clear();
  const float fraction = StepFraction(context.step);
  std::size_t begin = 0;
  for (std::size_t k = 0; k < tensor_sizes_.size(); ++k) {
    const std::size_t n = tensor_sizes_[k];
    const std::size_t end = begin + n;
    if (n == 0) continue;
    float tau = 0;
    if (fraction < 1 && n >= options_.dense_below) {
      // Sample m positions of this tensor with replacement: floor(word * n / 2^32).
      RandomStream stream;
      stream.seed = context.session_seed;
      stream.tensor_id = context.tensor_id + static_cast<uint32_t>(k);
      stream.round = context.step;
      stream.sender_id = context.node_id;
      stream.purpose = RandomPurpose::kRandomSubset;
      const std::size_t m = std::min(sample_.size(), n);
      uint32_t words[256];
      for (std::size_t at = 0; at < m; at += 256) {
        const std::size_t c = std::min<std::size_t>(256, m - at);
        PhiloxWords(stream, at, c, words);
        for (std::size_t j = 0; j < c; ++j) {
          sample_[at + j] = importance(begin + static_cast<std::size_t>((uint64_t{words[j]} * n) >> 32));
        }
      }
      // tau = the ceil(m f)-th largest sampled importance.
      std::size_t keep = static_cast<std::size_t>(std::ceil(static_cast<double>(m) * fraction));
      keep = std::max<std::size_t>(1, std::min(keep, m));
      auto nth = sample_.begin() + static_cast<std::ptrdiff_t>(m - keep);
      std::nth_element(sample_.begin(), nth, sample_.begin() + static_cast<std::ptrdiff_t>(m));
      tau = *nth;
    }
    for (std::size_t i = begin; i < end; ++i) {
      const float v = importance(i);
      if (v >= tau && v > 0) indices->push_back(static_cast<uint32_t>(i));
    }
    begin = end;
  }
}

Status IwpAccumulator::CheckIndices(const uint32_t* indices, std::size_t count) const {
  const std::size_t d = accumulator_.size();
  for (std::size_t j = 0; j < count; ++j) {
    if (indices[j] >= d) {
      return OutOfRange("iwp: index " + std::to_string(indices[j]) + " at " + std::to_string(j) +
                        " is outside the tensor of " + std::to_string(d));
    }
  }
  return Status::Ok();
}

Status IwpAccumulator::GatherAndZero(const uint32_t* indices, std::size_t count, float* values) {
  FEDRT_RETURN_IF_ERROR(CheckIndices(indices, count));
  for (std::size_t j = 0; j < count; ++j) {
    values[j] = accumulator_[indices[j]];
    accumulator_[indices[j]] = 0.0f;
  }
  if (!velocity_.empty()) {
    for (std::size_t j = 0; j < count; ++j) velocity_[indices[j]] = 0.0f;
  }
  return Status::Ok();
}

Status IwpAccumulator::Restore(const uint32_t* indices, std::size_t count, const float* values) {
  FEDRT_RETURN_IF_ERROR(CheckIndices(indices, count));
  FEDRT_RETURN_IF_ERROR(CheckFinite(values, count));
  for (std::size_t j = 0; j < count; ++j) accumulator_[indices[j]] += values[j];
  return Status::Ok();
}

std::size_t IwpMaxEncodedIndicesSize(std::size_t count) { return codec_internal::MaxIndexStreamSize(count); }

Result<std::size_t> EncodeIwpIndices(const uint32_t* indices, std::size_t count, uint8_t* out, std::size_t capacity) {
  for (std::size_t j = 1; j < count; ++j) {
    if (indices[j] <= indices[j - 1]) return InvalidArgument("iwp: indices must be strictly increasing");
  }
  return codec_internal::EncodeIndices(indices, count, out, capacity);
}

Status DecodeIwpIndices(const uint8_t* data, std::size_t size, std::size_t count, std::size_t d,
                        uint32_t* indices) {
  return codec_internal::DecodeIndices(data, size, count, d, indices);
}

}  // namespace fedrt
