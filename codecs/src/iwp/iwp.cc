// Importance-weighted pruning (see fedrt/codecs/iwp.h).
#include "fedrt/codecs/iwp.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

namespace {

std::size_t SampleFloats(std::size_t d, const IwpOptions& options) {
  return std::min(options.sample_size, d == 0 ? 1 : d);
}

}  // namespace

IwpAccumulator::IwpAccumulator(std::size_t d, const IwpOptions& options)
    : options_(options), d_(d), sample_size_(SampleFloats(d, options)) {
  const std::size_t velocity = options.momentum > 0 ? d : 0;
  owned_.assign(d + velocity + sample_size_, 0.0f);
  accumulator_ = owned_.data();
  velocity_ = velocity > 0 ? owned_.data() + d : nullptr;
  sample_ = owned_.data() + d + velocity;
  tensor_sizes_.assign(1, d);
}

IwpAccumulator::IwpAccumulator(const IwpAccumulator& other)
    : options_(other.options_), d_(other.d_), sample_size_(other.sample_size_), tensor_sizes_(other.tensor_sizes_),
      taus_(other.taus_), scales_(other.scales_) {
  const std::size_t velocity = other.velocity_ != nullptr ? d_ : 0;
  owned_.assign(other.accumulator_, other.accumulator_ + d_);
  if (velocity > 0) owned_.insert(owned_.end(), other.velocity_, other.velocity_ + d_);
  owned_.resize(d_ + velocity + sample_size_, 0.0f);  // the sample is scratch
  accumulator_ = owned_.data();
  velocity_ = velocity > 0 ? owned_.data() + d_ : nullptr;
  sample_ = owned_.data() + d_ + velocity;
}

IwpAccumulator& IwpAccumulator::operator=(const IwpAccumulator& other) {
  if (this != &other) *this = IwpAccumulator(other);
  return *this;
}

std::size_t IwpAccumulator::MemoryFloats(std::size_t d, const IwpOptions& options, std::size_t max_tensors) {
  const std::size_t velocity = options.momentum > 0 ? d : 0;
  return d + velocity + SampleFloats(d, options) * (1 + std::max<std::size_t>(1, max_tensors));
}

IwpAccumulator::IwpAccumulator(std::size_t d, const IwpOptions& options, std::size_t max_tensors, float* memory)
    : options_(options), d_(d), sample_size_(SampleFloats(d, options)),
      max_tensors_(std::max<std::size_t>(1, max_tensors)) {
  std::fill(memory, memory + MemoryFloats(d, options, max_tensors), 0.0f);
  accumulator_ = memory;
  float* at = memory + d;
  if (options.momentum > 0) {
    velocity_ = at;
    at += d;
  }
  sample_ = at;
  samples_ = at + sample_size_;
  tensor_sizes_.reserve(max_tensors_);
  tensor_sizes_.assign(1, d);
  taus_.reserve(max_tensors_);
  scales_.reserve(max_tensors_);
  sampled_.reserve(max_tensors_);
}

Status IwpAccumulator::SetTensors(const std::vector<std::size_t>& sizes) {
  uint64_t total = 0;
  for (std::size_t s : sizes) total += s;
  if (total != d_) {
    return InvalidArgument("iwp: tensor sizes add up to " + std::to_string(total) + ", not " + std::to_string(d_));
  }
  if (samples_ != nullptr && sizes.size() > max_tensors_) {
    return InvalidArgument("iwp: " + std::to_string(sizes.size()) + " tensors, the memory holds samples of " +
                           std::to_string(max_tensors_));
  }
  tensor_sizes_ = sizes;
  if (samples_ == nullptr) {
    taus_.reserve(sizes.size());
    scales_.reserve(sizes.size());
    sampled_.reserve(sizes.size());
  }
  return Status::Ok();
}

float* IwpAccumulator::Samples(std::size_t tensors) {
  if (samples_ != nullptr) return samples_;  // SetTensors kept tensors within max_tensors_
  owned_samples_.resize(sample_size_ * tensors);
  return owned_samples_.data();
}

Status IwpAccumulator::Accumulate(const float* grad, float rate) {
  const std::size_t d = d_;
  if (!(rate >= 0) || !std::isfinite(rate)) return InvalidArgument("iwp: accumulation rate must be finite and >= 0");
  FEDRT_RETURN_IF_ERROR(CheckFinite(grad, d));
  float scale = 1.0f;
  if (options_.clip_norm > 0) {
    double sum = 0;
    for (std::size_t i = 0; i < d; ++i) sum += double{grad[i]} * grad[i];
    const double norm = std::sqrt(sum);
    if (norm > options_.clip_norm) scale = static_cast<float>(options_.clip_norm / norm);
  }
  if (velocity_ != nullptr) {
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

namespace {

// Tensor k's stream of a step: {seed, context tensor id + k, round = step,
// sender = node, purpose}.
RandomStream TensorStream(const IwpStepContext& context, std::size_t k, RandomPurpose purpose) {
  RandomStream stream;
  stream.seed = context.session_seed;
  stream.tensor_id = context.tensor_id + static_cast<uint32_t>(k);
  stream.round = context.step;
  stream.sender_id = context.node_id;
  stream.purpose = purpose;
  return stream;
}

}  // namespace

std::size_t IwpAccumulator::Sample(const float* weights, const IwpStepContext& context, std::size_t k,
                                   std::size_t begin, std::size_t n, float* out) const {
  // m positions of this tensor with replacement: floor(word * n / 2^32).
  const float* a = accumulator_;
  const float eps = options_.eps;
  const RandomStream stream = TensorStream(context, k, RandomPurpose::kRandomSubset);
  const std::size_t m = std::min(sample_size_, n);
  uint32_t words[256];
  for (std::size_t at = 0; at < m; at += 256) {
    const std::size_t c = std::min<std::size_t>(256, m - at);
    PhiloxWords(stream, at, c, words);
    for (std::size_t j = 0; j < c; ++j) {
      const std::size_t i = begin + static_cast<std::size_t>((uint64_t{words[j]} * n) >> 32);
      out[at + j] = std::fabs(a[i]) / (std::fabs(weights[i]) + eps);
    }
  }
  return m;
}

namespace {

// With probabilistic updates, the share of a tensor's kept coordinates
// that the probabilistic draws take (SetThreshold).
constexpr double kProbabilisticShare = 0.25;

// A tensor's share of the step's fraction under the dispersion rule: the
// mean index of dispersion over its own, held within [1/2, 2], so a bursty
// tensor keeps fewer coordinates and a flat one more, and none keeps less
// than half the target share. (An earlier form shared one multiplier k of
// the standard deviation between all tensors, tau_l = mu_l + k sd_l D_l /
// mean(D): the budget then went to whichever tensor had the heaviest tail
// in the leader's sample, LeNet-300-100's output layer kept 0 to 14% from
// step to step, its accumulated updates grew to ten times its weights and
// the ring diverged at step 84.)
double DispersionShareWeight(double dispersion, double mean_dispersion) {
  if (!(mean_dispersion > 0)) return 1.0;  // every tensor flat
  if (!(dispersion > 0)) return 2.0;
  return std::min(2.0, std::max(0.5, mean_dispersion / dispersion));
}

}  // namespace

// A tensor's threshold and probabilistic scale for keeping `share` of its
// coordinates, from its m sampled importances (reordered here). Without
// probabilistic updates tau is the sample's quantile that keeps `share`
// (at least one coordinate). With them, the threshold keeps the top
// (1 - kProbabilisticShare) of the share and a coordinate below it is sent
// with probability scale * I / tau, scale (at most 1) such that the
// expected count of those is the other kProbabilisticShare of the share.
// (Sending every coordinate below tau with probability I / tau itself
// would, with a kept share fixed, push tau far above the important
// coordinates: on LeNet-300-100 the importances' mean is several times the
// 1/64 quantile, so the selection became sampling in proportion to
// importance, the largest accumulated updates waited, and the ring
// diverged; with the quantile rule it sent 7.5 times the bytes instead.)
void IwpAccumulator::SetThreshold(float* sample, std::size_t m, double share, bool probabilistic, float* tau,
                                  float* scale) {
  const double kept = probabilistic ? share * (1.0 - kProbabilisticShare) : share;
  std::size_t keep = static_cast<std::size_t>(std::ceil(static_cast<double>(m) * kept));
  keep = std::max<std::size_t>(1, std::min(keep, m));
  float* nth = sample + (m - keep);
  std::nth_element(sample, nth, sample + m);
  *tau = *nth;
  *scale = 0.0f;
  if (!probabilistic || !(*tau > 0)) return;
  double below = 0;  // mean over the sample of I / tau for 0 < I < tau
  for (std::size_t j = 0; j < m; ++j) {
    if (sample[j] > 0 && sample[j] < *tau) below += static_cast<double>(sample[j]) / *tau;
  }
  below /= static_cast<double>(m);
  if (below > 0) *scale = static_cast<float>(std::min(1.0, share * kProbabilisticShare / below));
}

void IwpAccumulator::SelectIndices(const float* weights, const IwpStepContext& context,
                                   std::vector<uint32_t>* indices) {
  const float* a = accumulator_;
  const float eps = options_.eps;
  auto importance = [a, weights, eps](std::size_t i) { return std::fabs(a[i]) / (std::fabs(weights[i]) + eps); };
  indices->clear();
  const float fraction = StepFraction(context.step);
  const bool sparse = fraction < 1;
  const std::size_t tensors = tensor_sizes_.size();
  // Each tensor's threshold (0: keep every nonzero coordinate).
  std::vector<float>& taus = taus_;
  taus.assign(tensors, 0.0f);
  std::vector<float>& scales = scales_;  // probabilistic updates: p = scale * I / tau below tau
  scales.assign(tensors, 0.0f);
  if (sparse && options_.threshold == IwpThreshold::kQuantile) {
    std::size_t begin = 0;
    for (std::size_t k = 0; k < tensors; ++k) {
      const std::size_t n = tensor_sizes_[k];
      if (n > 0 && n >= options_.dense_below) {
        const std::size_t m = Sample(weights, context, k, begin, n, sample_);
        SetThreshold(sample_, m, fraction, options_.probabilistic, &taus[k], &scales[k]);
      }
      begin += n;
    }
  } else if (sparse) {
    std::vector<TensorSample>& sampled = sampled_;
    sampled.clear();
    float* samples = Samples(tensors);
    std::size_t begin = 0;
    double dispersion_sum = 0;
    std::size_t dispersed = 0;
    for (std::size_t k = 0; k < tensors; ++k) {
      const std::size_t n = tensor_sizes_[k];
      if (n > 0 && n >= options_.dense_below) {
        TensorSample t;
        t.k = k;
        t.begin = begin;
        t.n = n;
        float* out = samples + k * sample_size_;
        t.m = Sample(weights, context, k, begin, n, out);
        t.sample = out;
        double sum = 0, sum_sq = 0;
        for (std::size_t j = 0; j < t.m; ++j) {
          sum += out[j];
          sum_sq += static_cast<double>(out[j]) * out[j];
        }
        t.mu = sum / static_cast<double>(t.m);
        const double variance = std::max(0.0, sum_sq / static_cast<double>(t.m) - t.mu * t.mu);
        t.sd = std::sqrt(variance);
        if (t.mu > 0) {
          // The index of dispersion of I / mu_l (v_l / mu_l^2): free of the
          // tensor's importance scale, which differs by orders of magnitude
          // between tensors (a bias at weight 0 has importances near 1/eps).
          t.dispersion = variance / (t.mu * t.mu);
          dispersion_sum += t.dispersion;
          ++dispersed;
        }
        sampled.push_back(t);
      }
      begin += n;
    }
    const double mean_dispersion = dispersed > 0 ? dispersion_sum / static_cast<double>(dispersed) : 0;
    const bool probabilistic = options_.probabilistic;
    // Each tensor's share f_l = s * w_l (at most 1), s such that the shares
    // keep `fraction` of these tensors' coordinates in all.
    double weighted = 0, total = 0;
    for (const TensorSample& t : sampled) {
      if (t.mu <= 0) continue;
      weighted += static_cast<double>(t.n) * DispersionShareWeight(t.dispersion, mean_dispersion);
      total += static_cast<double>(t.n);
    }
    for (const TensorSample& t : sampled) {
      if (t.mu <= 0) {
        taus[t.k] = std::numeric_limits<float>::infinity();  // nothing to send
        continue;
      }
      const double share = std::min(
          1.0, static_cast<double>(fraction) * total / weighted * DispersionShareWeight(t.dispersion, mean_dispersion));
      SetThreshold(samples + t.k * sample_size_, t.m, share, probabilistic, &taus[t.k], &scales[t.k]);
    }
  }
  const bool probabilistic = sparse && options_.probabilistic;
  std::size_t begin = 0;
  uint32_t words[256] = {};
  for (std::size_t k = 0; k < tensors; ++k) {
    const std::size_t n = tensor_sizes_[k];
    const std::size_t end = begin + n;
    const float tau = taus[k];
    const RandomStream stream = TensorStream(context, k, RandomPurpose::kLeaderChoice);
    for (std::size_t at = begin; at < end; at += 256) {
      const std::size_t c = std::min<std::size_t>(256, end - at);
      const float scale = scales[k];
      const bool draws = probabilistic && tau > 0 && scale > 0;
      if (draws) PhiloxWords(stream, 1 + (at - begin), c, words);
      for (std::size_t j = 0; j < c; ++j) {
        const std::size_t i = at + j;
        const float v = importance(i);
        if (!(v > 0)) continue;
        // Kept with probability scale * v / tau below the threshold:
        // u tau < scale v, u = word / 2^32, compared in double.
        if (v >= tau ||
            (draws && static_cast<double>(words[j]) * 0x1p-32 * tau < static_cast<double>(scale) * v)) {
          indices->push_back(static_cast<uint32_t>(i));
        }
      }
    }
    begin = end;
  }
}

Status IwpAccumulator::CheckIndices(const uint32_t* indices, std::size_t count) const {
  const std::size_t d = d_;
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
  if (velocity_ != nullptr) {
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
