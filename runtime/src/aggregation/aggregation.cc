#include "fedrt/runtime/aggregation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "fedrt/codecs/philox.h"

namespace fedrt {

std::vector<std::size_t> UpdateTensorSizes(const Codec& codec, const std::vector<std::size_t>& model_tensors) {
  if (EncodesPerTensor(codec) && !model_tensors.empty()) return model_tensors;
  std::size_t d = 0;
  for (std::size_t size : model_tensors) d += size;
  return {d};
}

std::vector<std::size_t> ModelTensorSizes(const Model& model) {
  std::vector<std::size_t> sizes;
  for (const TensorInfo& tensor : model.tensors()) sizes.push_back(tensor.size);
  return sizes;
}

Result<std::unique_ptr<TensorSetCodec>> MakeUpdateCodec(std::unique_ptr<Codec> codec,
                                                        const std::vector<std::size_t>& model_tensors) {
  if (codec == nullptr) return InvalidArgument("no codec");
  std::vector<std::size_t> sizes = UpdateTensorSizes(*codec, model_tensors);
  return TensorSetCodec::Create(std::move(codec), std::move(sizes));
}

Result<std::unique_ptr<TensorSetCodec>> BorrowUpdateCodec(Codec& codec, const std::vector<std::size_t>& model_tensors) {
  return TensorSetCodec::Borrow(codec, UpdateTensorSizes(codec, model_tensors));
}

Status ApplyModelDelta(const Codec& codec, const uint8_t* payload, std::size_t size, const CodecContext& context,
                       const float* base, float* out, float* scratch, std::size_t d) {
  FEDRT_RETURN_IF_ERROR(codec.Decode(payload, size, context, scratch, d));
  for (std::size_t i = 0; i < d; ++i) out[i] = (base != nullptr ? base[i] : 0.0f) + scratch[i];
  return Status::Ok();
}

UpdateAccumulator::UpdateAccumulator(double* sum, std::size_t d) : sum_(sum), d_(d) {
  std::fill(sum_, sum_ + d_, 0.0);
}

Status UpdateAccumulator::AddEncoded(const Codec& codec, const uint8_t* payload, std::size_t size,
                                     const CodecContext& context, double weight, const float* side_info) {
  if (!(weight > 0.0) || !std::isfinite(weight)) return InvalidArgument("update weight must be positive");
  // Decode into scratch first: a payload that fails half-way must not leave a
  // partial update in the sum.
  scratch_.resize(d_);
  FEDRT_RETURN_IF_ERROR(codec.Decode(payload, size, context, scratch_.data(), scratch_.size(), side_info));
  return AddDecoded(scratch_.data(), weight);
}

Status UpdateAccumulator::AddDecoded(const float* update, double weight) {
  if (!(weight > 0.0) || !std::isfinite(weight)) return InvalidArgument("update weight must be positive");
  FEDRT_RETURN_IF_ERROR(CheckFinite(update, d_));
  for (std::size_t i = 0; i < d_; ++i) sum_[i] += weight * static_cast<double>(update[i]);
  ++count_;
  total_weight_ += weight;
  return Status::Ok();
}

Status UpdateAccumulator::AddPartial(const double* sum, std::size_t d, double weight, std::size_t count) {
  if (d != d_) return InvalidArgument("partial sum of another length");
  if (count == 0) return Status::Ok();
  if (!(weight > 0.0) || !std::isfinite(weight)) return InvalidArgument("partial weight must be positive");
  for (std::size_t i = 0; i < d_; ++i) sum_[i] += sum[i];
  count_ += count;
  total_weight_ += weight;
  return Status::Ok();
}

std::vector<float> UpdateAccumulator::Mean() const {
  std::vector<float> mean(d_, 0.0f);
  MeanInto(mean.data());
  return mean;
}

void UpdateAccumulator::MeanInto(float* mean) const {
  if (total_weight_ <= 0) {
    std::fill(mean, mean + d_, 0.0f);
    return;
  }
  for (std::size_t i = 0; i < d_; ++i) mean[i] = static_cast<float>(sum_[i] / total_weight_);
}

void UpdateAccumulator::Reset() {
  std::fill(sum_, sum_ + d_, 0.0);
  count_ = 0;
  total_weight_ = 0;
}

double UpdateNorm(const float* update, std::size_t d) {
  // Eight running sums, combined in a fixed order at the end: one running
  // sum makes every addition wait for the one before (an aggregator spent as
  // long on this as on summing the update), eight are independent and the
  // compiler vectorizes them. The order is fixed, so the norm is the same on
  // every machine and rank.
  constexpr std::size_t kLanes = 8;
  double lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= d; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) {
      lane[k] += static_cast<double>(update[i + k]) * static_cast<double>(update[i + k]);
    }
  }
  for (std::size_t k = 0; i < d; ++i, ++k) lane[k] += static_cast<double>(update[i]) * static_cast<double>(update[i]);
  const double sum_sq = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  return std::sqrt(sum_sq);
}

Status CheckUpdateNorm(const float* update, std::size_t d, double max_norm) {
  if (max_norm <= 0) return Status::Ok();
  const double norm = UpdateNorm(update, d);
  if (!(norm <= max_norm)) {
    char text[128];
    std::snprintf(text, sizeof(text), "update norm %.6g exceeds the limit of %.6g", norm, max_norm);
    return InvalidArgument(text);
  }
  return Status::Ok();
}

const char* ServerOptimizerName(ServerOptimizerKind kind) {
  switch (kind) {
    case ServerOptimizerKind::kFedAvg: return "fedavg";
    case ServerOptimizerKind::kFedSgd: return "fedsgd";
    case ServerOptimizerKind::kFedAvgM: return "fedavgm";
    case ServerOptimizerKind::kFedAdam: return "fedadam";
  }
  return "?";
}

Result<ServerOptimizerKind> ParseServerOptimizer(const std::string& name) {
  for (ServerOptimizerKind kind : {ServerOptimizerKind::kFedAvg, ServerOptimizerKind::kFedSgd,
                                   ServerOptimizerKind::kFedAvgM, ServerOptimizerKind::kFedAdam}) {
    if (name == ServerOptimizerName(kind)) return kind;
  }
  return InvalidArgument("unknown server optimizer '" + name + "' (fedavg, fedsgd, fedavgm, fedadam)");
}

ServerOptimizer::ServerOptimizer(ServerOptimizerOptions options, std::size_t d) : options_(options), d_(d) {
  if (options_.kind == ServerOptimizerKind::kFedAvgM || options_.kind == ServerOptimizerKind::kFedAdam) {
    first_.assign(d, 0.0f);
  }
  if (options_.kind == ServerOptimizerKind::kFedAdam) second_.assign(d, 0.0f);
}

Status ServerOptimizer::Apply(const float* mean_delta, float* global) {
  FEDRT_RETURN_IF_ERROR(CheckFinite(mean_delta, d_));
  const float lr = options_.learning_rate;
  switch (options_.kind) {
    case ServerOptimizerKind::kFedAvg:
    case ServerOptimizerKind::kFedSgd:
      for (std::size_t i = 0; i < d_; ++i) global[i] += lr * mean_delta[i];
      break;
    case ServerOptimizerKind::kFedAvgM:
      for (std::size_t i = 0; i < d_; ++i) {
        first_[i] = options_.momentum * first_[i] + mean_delta[i];
        global[i] += lr * first_[i];
      }
      break;
    case ServerOptimizerKind::kFedAdam: {
      const float b1 = options_.beta1, b2 = options_.beta2;
      for (std::size_t i = 0; i < d_; ++i) {
        first_[i] = b1 * first_[i] + (1.0f - b1) * mean_delta[i];
        second_[i] = b2 * second_[i] + (1.0f - b2) * mean_delta[i] * mean_delta[i];
        global[i] += lr * first_[i] / (std::sqrt(second_[i]) + options_.tau);
      }
      break;
    }
  }
  return Status::Ok();
}

Status ServerOptimizer::Restore(std::vector<float> first_moment, std::vector<float> second_moment) {
  if (first_moment.size() != first_.size() || second_moment.size() != second_.size()) {
    return InvalidArgument("server optimizer state does not match (" + std::string(ServerOptimizerName(options_.kind)) +
                           ", " + std::to_string(d_) + " parameters)");
  }
  FEDRT_RETURN_IF_ERROR(CheckFinite(first_moment.data(), first_moment.size()));
  FEDRT_RETURN_IF_ERROR(CheckFinite(second_moment.data(), second_moment.size()));
  first_ = std::move(first_moment);
  second_ = std::move(second_moment);
  return Status::Ok();
}

std::size_t SampleTarget(std::size_t available, const SamplingOptions& options) {
  std::size_t wanted = static_cast<std::size_t>(std::ceil(options.fraction * static_cast<double>(available)));
  return std::min(std::max(wanted, options.minimum), available);
}

std::vector<uint32_t> SampleDevices(const std::vector<uint32_t>& available, const SamplingOptions& options,
                                    uint64_t seed, uint32_t round) {
  std::vector<uint32_t> pool = available;
  std::sort(pool.begin(), pool.end());
  pool.erase(std::unique(pool.begin(), pool.end()), pool.end());
  std::vector<uint32_t> chosen, words;
  SampleDeviceIndices(pool.size(), options, seed, round, &chosen, &words);
  // pool is increasing, so the chosen values are in increasing order too.
  for (uint32_t& c : chosen) c = pool[c];
  return chosen;
}

void SampleDeviceIndices(std::size_t n, const SamplingOptions& options, uint64_t seed, uint32_t round,
                         std::vector<uint32_t>* chosen, std::vector<uint32_t>* words) {
  std::vector<uint32_t>& pool = *chosen;
  pool.resize(n);
  for (std::size_t i = 0; i < n; ++i) pool[i] = static_cast<uint32_t>(i);
  std::size_t wanted = SampleTarget(n, options);
  wanted += static_cast<std::size_t>(std::ceil(options.over_selection * static_cast<double>(wanted)));
  wanted = std::min(wanted, n);
  // Partial Fisher-Yates driven by a Philox stream of its own (the random
  // subset purpose, with sender id 0xFFFFFF reserved for the aggregator), so
  // a restarted aggregator samples the same devices for the same round.
  RandomStream stream;
  stream.seed = seed;
  stream.round = round;
  stream.sender_id = 0xFFFFFF;
  stream.purpose = RandomPurpose::kRandomSubset;
  words->resize(wanted);
  PhiloxWords(stream, 0, wanted, words->data());
  for (std::size_t i = 0; i < wanted; ++i) {
    const std::size_t j = i + static_cast<std::size_t>((uint64_t{(*words)[i]} * (n - i)) >> 32);
    std::swap(pool[i], pool[j]);
  }
  pool.resize(wanted);
  std::sort(pool.begin(), pool.end());
}

}  // namespace fedrt
