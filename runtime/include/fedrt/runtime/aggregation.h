// Server-side aggregation for the star topology: combining the devices'
// decoded updates into the next global model.
//
// A device sends delta = (its model after local training) - (the global model
// it started from), compressed. The aggregator decodes each delta into an
// UpdateAccumulator weighted by the device's sample count (FedAvg) or equally
// (FedSGD), then a ServerOptimizer turns the mean delta into a step on the
// global model:
//   fedavg   global += lr * mean                      (lr = 1: McMahan et al. 2017)
//   fedsgd   the same step; devices run one local step (the instructions say so)
//   fedavgm  v = momentum * v + mean; global += lr * v (Hsu et al. 2019)
//   fedadam  m = b1*m + (1-b1)*mean; v = b2*v + (1-b2)*mean^2;
//            global += lr * m / (sqrt(v) + tau)        (Reddi et al. 2021)
// Optimizer state (v, m) is part of the aggregator's checkpoint.
//
// Thread-safety: none; the aggregator owns these objects on its own strand.
#ifndef FEDRT_RUNTIME_AGGREGATION_H_
#define FEDRT_RUNTIME_AGGREGATION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/tensor_set.h"
#include "fedrt/platform/status.h"
#include "fedrt/runtime/model.h"

namespace fedrt {

// Sums weighted updates; Mean() divides by the total weight.
//
// The sum is kept in double: a finite float (at most 3.4e38) times a weight
// of up to 2^32 samples, summed over any number of devices, cannot overflow
// it, so one device with a huge but finite coordinate can no longer turn the
// round's sum into Inf and void every other device's update. The mean is a
// convex combination of finite floats and so fits a float again. Bounding
// what one update may contribute (its norm, its weight) is the caller's
// policy: CheckUpdateNorm below, and the aggregator's limits
// (AggregatorConfig::max_update_norm, max_update_samples).
//
// Memory: d doubles, its own (the first constructor) or the caller's (the
// second: the aggregator keeps its round's sum in its block).
class UpdateAccumulator {
 public:
  explicit UpdateAccumulator(std::size_t d) : owned_(d, 0.0), sum_(owned_.data()), d_(d) {}
  // Over caller memory: `sum` holds d doubles, zeroed here, and must outlive
  // the accumulator.
  UpdateAccumulator(double* sum, std::size_t d);
  UpdateAccumulator(const UpdateAccumulator&) = delete;
  UpdateAccumulator& operator=(const UpdateAccumulator&) = delete;

  // Decodes `payload` with `codec` and adds weight * decoded. On error
  // nothing is added (the sum is unchanged), so one bad device never spoils
  // the round.
  Status AddEncoded(const Codec& codec, const uint8_t* payload, std::size_t size,
                    const CodecContext& context, double weight, const float* side_info = nullptr);
  // Adds weight * update (already decoded, d floats). NaN/Inf is rejected,
  // and so is a weight that is not positive and finite.
  Status AddDecoded(const float* update, double weight);

  std::size_t size() const { return d_; }
  std::size_t count() const { return count_; }
  double total_weight() const { return total_weight_; }
  // The weighted sum itself, d doubles (DP-FedAvg adds noise to it).
  const double* sum() const { return sum_; }
  // Adds another accumulator's state: `sum` (d doubles), a partial sum of
  // `count` updates of total `weight` (e.g. another aggregator rank's).
  // kInvalidArgument for another length or a weight that is not finite and
  // positive; nothing is added then.
  Status AddPartial(const double* sum, std::size_t d, double weight, std::size_t count);
  // sum / total_weight, rounded to float; zeros when nothing was added.
  std::vector<float> Mean() const;
  // The same into mean[0..d).
  void MeanInto(float* mean) const;
  void Reset();

 private:
  std::vector<double> owned_;
  double* sum_;
  std::size_t d_;
  std::vector<float> scratch_;
  std::size_t count_ = 0;
  double total_weight_ = 0;
};

// The tensor table a model's updates travel in with `codec`: one entry per
// tensor of the model (in order) when EncodesPerTensor(codec), so each
// tensor gets its own scales and streams; otherwise one entry for the whole
// vector. Every sender and receiver of an update (device and aggregator,
// gossip neighbours) derives it the same way from the model spec.
std::vector<std::size_t> UpdateTensorSizes(const Codec& codec, const std::vector<std::size_t>& model_tensors);
// The lengths of the model's tensors, in the order of its tensor table.
std::vector<std::size_t> ModelTensorSizes(const Model& model);
// `codec` over that table (tensor_set.h), owned or borrowed.
Result<std::unique_ptr<TensorSetCodec>> MakeUpdateCodec(std::unique_ptr<Codec> codec,
                                                        const std::vector<std::size_t>& model_tensors);
Result<std::unique_ptr<TensorSetCodec>> BorrowUpdateCodec(Codec& codec, const std::vector<std::size_t>& model_tensors);

// The star downlink: a model delta that `codec` (over the model's tensor
// table, as MakeUpdateCodec builds it) encoded, applied as the devices and
// the aggregator's copy of their model apply it, so that all hold the same
// bits: decoded into `scratch` (d floats, may be `out`), then
// out[i] = base[i] + scratch[i], with base null for zeros (a whole model
// compressed). Allocates nothing of its own; on an error `out` is untouched
// unless it is `scratch`.
Status ApplyModelDelta(const Codec& codec, const uint8_t* payload, std::size_t size, const CodecContext& context,
                       const float* base, float* out, float* scratch, std::size_t d);

// The L2 norm of d floats, accumulated in double (finite for every finite input).
double UpdateNorm(const float* update, std::size_t d);
// kInvalidArgument, naming the norm and the bound, when the L2 norm of the
// update exceeds `max_norm` (0: no bound). An update with one absurd
// coordinate has an absurd norm, so this bounds every coordinate too.
Status CheckUpdateNorm(const float* update, std::size_t d, double max_norm);

enum class ServerOptimizerKind { kFedAvg, kFedSgd, kFedAvgM, kFedAdam };

struct ServerOptimizerOptions {
  ServerOptimizerKind kind = ServerOptimizerKind::kFedAvg;
  float learning_rate = 1.0f;
  float momentum = 0.9f;  // fedavgm
  float beta1 = 0.9f;     // fedadam
  float beta2 = 0.99f;
  float tau = 1e-3f;
};

// "fedavg", "fedsgd", "fedavgm", "fedadam".
const char* ServerOptimizerName(ServerOptimizerKind kind);
Result<ServerOptimizerKind> ParseServerOptimizer(const std::string& name);

class ServerOptimizer {
 public:
  ServerOptimizer(ServerOptimizerOptions options, std::size_t d);

  // global[0..d) += step computed from mean_delta[0..d).
  Status Apply(const float* mean_delta, float* global);

  const ServerOptimizerOptions& options() const { return options_; }
  // The state to checkpoint: first and second moments (empty when unused).
  const std::vector<float>& first_moment() const { return first_; }
  const std::vector<float>& second_moment() const { return second_; }
  // Restores state from a checkpoint; sizes must match the optimizer's.
  Status Restore(std::vector<float> first_moment, std::vector<float> second_moment);

 private:
  ServerOptimizerOptions options_;
  std::size_t d_;
  std::vector<float> first_;
  std::vector<float> second_;
};

// Chooses the devices of one round: max(minimum, ceil(fraction * n)) devices,
// plus ceil(over_selection * that) extra (so stragglers past the deadline do
// not shrink the round below the quorum), capped at n. Deterministic in
// (seed, round); returned in increasing order.
struct SamplingOptions {
  double fraction = 1.0;
  std::size_t minimum = 1;
  double over_selection = 0.0;
};
std::vector<uint32_t> SampleDevices(const std::vector<uint32_t>& available, const SamplingOptions& options,
                                    uint64_t seed, uint32_t round);
// The devices a round wants of `available` ones, before over-selection:
// max(minimum, ceil(fraction * available)), capped at available. The quorum
// counts against it, so the over-selected extras are spares, not devices the
// round waits for.
std::size_t SampleTarget(std::size_t available, const SamplingOptions& options);
// The same over the indices 0 .. n-1, into *chosen, with *words as
// scratch: once both have grown to the sample, nothing is allocated (the
// aggregator samples its sorted devices every round).
void SampleDeviceIndices(std::size_t n, const SamplingOptions& options, uint64_t seed, uint32_t round,
                         std::vector<uint32_t>* chosen, std::vector<uint32_t>* words);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_AGGREGATION_H_
