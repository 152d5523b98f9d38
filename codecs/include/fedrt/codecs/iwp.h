// Importance-weighted pruning (IWP) for ring all-reduce (codecs/README.md;
// Cheng & Xu 2019): the per-tensor state and steps a ring node
// needs so that every node reduces the SAME sparse index set each step.
//
// Per step t, on every node, for each tensor:
//   1. Accumulate(g, r):  a += r g (optionally after clipping g's L2 norm);
//      with momentum correction (momentum m > 0, as in deep gradient
//      compression) the node keeps a velocity u and accumulates it instead:
//      u = m u + g;  a += r u. The rate r (1 by default) lets a trainer
//      accumulate updates (r = the step's learning rate) instead of
//      gradients, so a value held for many steps is applied at the rate it
//      was computed with, not at a later, decayed one;
//   2. the leader of step t, IwpLeader(seed, t, nodes), which every node
//      computes alike (Philox purpose 4), runs SelectIndices(w): the indices
//      whose importance |a_i| / (|w_i| + eps) reaches a threshold estimated
//      from a random sample of the tensor (Philox purpose 3) so that about
//      target_fraction of the coordinates are kept; it broadcasts them
//      (EncodeIwpIndices gives a compact form);
//   3. every node runs GatherAndZero(indices): its accumulated values at the
//      leader's indices go into the all-reduce buffer and are zeroed in the
//      accumulator (and, with momentum correction, in the velocity: momentum
//      factor masking); everything else stays. The ring all-reduces that
//      dense buffer and applies the mean at those indices (with momentum
//      correction as a plain SGD step, w -= lr * mean: the momentum already
//      is in the accumulated values).
// Nothing is lost: after any number of steps, the sum of everything a node
// gathered plus its accumulator equals the sum of its (clipped) gradients,
// or with momentum correction the sum of its velocities u, each times the
// rate it was accumulated with.
//
// Tensors: SetTensors() splits the flat vector into a model's tensors; the
// threshold is then estimated and applied per tensor (a tensor's kept share is
// about the target fraction whatever its scale), and tensors of fewer than
// dense_below coordinates (biases, a small output layer) are kept whole.
//
// Memory: the accumulator (d floats), the velocity (d floats, with momentum
// correction only) and the threshold's samples are the accumulator's own, or
// lie in caller memory of MemoryFloats() (the peer trainer's block); the
// per-tensor bookkeeping (sizes, thresholds, O(tensors)) is reserved when the
// tensors are set. The caller owns the other arrays and the index vector (its
// capacity is reused), so steady-state steps do not allocate. Thread-safety: one
// IwpAccumulator (a tensor, or a model split by SetTensors) per thread;
// IwpLeader is pure.
#ifndef FEDRT_CODECS_IWP_H_
#define FEDRT_CODECS_IWP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt {

// How SelectIndices sets a tensor's threshold tau (codecs/README.md, "IWP").
enum class IwpThreshold : uint8_t {
  // The paper's layer-wise rule, in fedrt's form: from a sample of tensor
  // l, the index of dispersion of its importances, D_l = v_l / mu_l^2
  // (variance over squared mean: scale-free); tensor l keeps the share
  // f_l = s * clamp(mean_l(D) / D_l, 1/2, 2) of its coordinates, s such
  // that the shares add up to the step's fraction, and tau_l is set on the
  // sample so that the expected kept share, probabilistic updates
  // included, is f_l. Bursty tensors keep fewer coordinates, flat ones
  // more, none less than half the target share.
  kDispersion = 0,
  // tau = the quantile of the sampled importances that keeps the step's
  // fraction of each tensor (every tensor keeps about the same share).
  kQuantile = 1,
};

struct IwpOptions {
  float target_fraction = 1.0f / 64;  // share of coordinates kept per step, in (0, 1]
  // The quantile here; the peer trainer defaults to the paper's method
  // (dispersion rule, probabilistic update, warm-up, clipping;
  // docs/design/peer.md).
  IwpThreshold threshold = IwpThreshold::kQuantile;
  // The paper's probabilistic update of low-importance gradients: the
  // threshold keeps the top three quarters of a tensor's share, and a
  // coordinate with 0 < importance I < tau is also kept with probability
  // scale * I / tau (Philox purpose 4 of the leader; scale <= 1 such that
  // these draws take the last quarter), so no accumulated value waits
  // forever.
  bool probabilistic = false;
  float eps = 1e-8f;                  // importance = |a_i| / (|w_i| + eps)
  std::size_t sample_size = 4096;     // coordinates sampled (with replacement) for the threshold
  uint32_t warmup_steps = 0;          // steps t < warmup_steps keep warmup_fraction instead
  float warmup_fraction = 1.0f;       // 1 = dense warm-up
  // Exponential warm-up (deep gradient compression's): step t < warmup_steps
  // keeps warmup_fraction * (target_fraction / warmup_fraction)^(t / warmup_steps),
  // falling geometrically from warmup_fraction to target_fraction.
  bool warmup_exponential = false;
  float clip_norm = 0;                // > 0: gradients are scaled to L2 norm <= clip_norm first
  float momentum = 0;                 // > 0: momentum correction with factor masking, in [0, 1)
  std::size_t dense_below = 0;        // tensors (SetTensors) smaller than this are kept whole
};

// Which of `nodes` nodes leads step `step`: word 0 of the Philox stream
// {seed, tensor 0, round = step, sender 0, purpose 4}, mapped to
// floor(word * nodes / 2^32). Every node computes the same value.
uint32_t IwpLeader(uint64_t session_seed, uint32_t step, uint32_t nodes);

// Where the sample comes from: the stream {seed, tensor_id, round = step,
// sender = node_id, purpose 3}.
struct IwpStepContext {
  uint64_t session_seed = 0;
  uint32_t tensor_id = 0;
  uint32_t step = 0;
  uint32_t node_id = 0;
};

class IwpAccumulator {
 public:
  // kInvalidArgument for options out of range or d >= 2^32.
  static Status Check(std::size_t d, const IwpOptions& options);
  // Use Check first; the constructors assume valid arguments.
  IwpAccumulator(std::size_t d, const IwpOptions& options);
  // Floats of caller memory for d coordinates split into at most
  // `max_tensors` tensors (SetTensors): the accumulator, the velocity and
  // the samples of the thresholds.
  static std::size_t MemoryFloats(std::size_t d, const IwpOptions& options, std::size_t max_tensors);
  // On caller memory: `memory` holds MemoryFloats(d, options, max_tensors)
  // floats, is zeroed here and must outlive the accumulator; SetTensors
  // then refuses more than max_tensors tensors.
  IwpAccumulator(std::size_t d, const IwpOptions& options, std::size_t max_tensors, float* memory);
  // A copy owns its memory (whatever the original's); a move keeps it.
  IwpAccumulator(const IwpAccumulator& other);
  IwpAccumulator& operator=(const IwpAccumulator& other);
  IwpAccumulator(IwpAccumulator&&) = default;
  IwpAccumulator& operator=(IwpAccumulator&&) = default;

  // Per-tensor thresholds: `sizes` are the model's tensor sizes in order;
  // kInvalidArgument unless they add up to size() (and, on caller memory,
  // number at most max_tensors). Without it the whole vector is one tensor.
  Status SetTensors(const std::vector<std::size_t>& sizes);

  // a += rate * g (momentum correction: u = m u + g, a += rate * u), after
  // scaling g to norm clip_norm when clipping is on and ||g|| > clip_norm.
  // rate = 1 gives exactly a += g. kInvalidArgument (naming the coordinate)
  // on NaN/Inf in grad, or for a rate that is not finite and >= 0 (a rate
  // of 0, a schedule's end, adds nothing but still advances the velocity).
  Status Accumulate(const float* grad, float rate = 1.0f);

  // The leader's index set, sorted: per tensor, every i with importance >=
  // tau and > 0 (tau by options().threshold from m sampled coordinates of
  // the tensor; f = target or warm-up fraction, StepFraction; f >= 1 or a
  // tensor below dense_below keeps every coordinate), plus, with
  // `probabilistic`, each i with 0 < importance < tau with probability
  // importance / tau. `weights` are the current parameters (d floats). The
  // sample of tensor k comes from the stream with tensor_id =
  // context.tensor_id + k (purpose 3), the probabilistic draws from the same
  // ids with purpose 4 (word 1 + i - the tensor's first index).
  void SelectIndices(const float* weights, const IwpStepContext& context, std::vector<uint32_t>* indices);

  // values[j] = a[indices[j]], then a[indices[j]] = 0 (and u[indices[j]] = 0
  // with momentum correction). kOutOfRange if an index is >= d (nothing is
  // changed then).
  Status GatherAndZero(const uint32_t* indices, std::size_t count, float* values);

  // The share of coordinates SelectIndices keeps at `step` (warm-up or target).
  float StepFraction(uint32_t step) const;

  // Hands back values a failed all-reduce gathered: a[indices[j]] +=
  // values[j], nothing else changes (the velocity stays masked, so the sum
  // of what was sent plus the accumulator still equals the sum of what was
  // accumulated). kOutOfRange if an index is >= d, kInvalidArgument on a
  // NaN/Inf value (nothing is changed then).
  Status Restore(const uint32_t* indices, std::size_t count, const float* values);

  const float* accumulator() const { return accumulator_; }
  // The velocity u (size() floats; null without momentum correction).
  const float* velocity() const { return velocity_; }
  std::size_t size() const { return d_; }
  const IwpOptions& options() const { return options_; }
  // Each tensor's threshold in the last SelectIndices (0: kept whole;
  // infinite: nothing to send).
  const std::vector<float>& thresholds() const { return taus_; }

 private:
  Status CheckIndices(const uint32_t* indices, std::size_t count) const;
  // Fills sample_ with m importances of tensor k ([begin, begin + n)).
  std::size_t Sample(const float* weights, const IwpStepContext& context, std::size_t k, std::size_t begin,
                     std::size_t n, float* out) const;

  // One sparse tensor's sample under the dispersion rule.
  struct TensorSample {
    std::size_t k = 0, begin = 0, n = 0;
    const float* sample = nullptr;
    std::size_t m = 0;
    double mu = 0, sd = 0, dispersion = 0;
  };
  // A tensor's threshold and probabilistic scale for keeping `share` of it,
  // from its m sampled importances (reordered; iwp.cc).
  static void SetThreshold(float* sample, std::size_t m, double share, bool probabilistic, float* tau, float* scale);
  // kDispersion: room for `tensors` samples of sample_size_ floats.
  float* Samples(std::size_t tensors);

  IwpOptions options_;
  std::size_t d_ = 0;
  std::vector<float> owned_;           // the constructor without memory: accumulator, velocity, sample
  std::vector<float> owned_samples_;   //   and the samples of every sparse tensor
  float* accumulator_ = nullptr;
  float* velocity_ = nullptr;          // null without momentum correction
  float* sample_ = nullptr;            // one tensor's sample (sample_size_ floats)
  std::size_t sample_size_ = 0;
  float* samples_ = nullptr;           // caller memory: max_tensors_ samples, one after another
  std::size_t max_tensors_ = 0;        // caller memory only
  std::vector<std::size_t> tensor_sizes_;
  std::vector<float> taus_;            // each tensor's threshold in the last SelectIndices
  std::vector<float> scales_;          //   and probabilistic scale
  std::vector<TensorSample> sampled_;  // kDispersion: the sparse tensors' samples of a step
};

// Compact form of an index set for the leader's broadcast (the sparsifiers'
// gap coding: varint, Elias-gamma or Golomb-Rice, whichever is smallest).
// Bound for the buffer: IwpMaxEncodedIndicesSize(count).
std::size_t IwpMaxEncodedIndicesSize(std::size_t count);
Result<std::size_t> EncodeIwpIndices(const uint32_t* indices, std::size_t count, uint8_t* out,
                                     std::size_t capacity);
// Untrusted input: kCorrupt unless `size` bytes hold exactly `count` sorted
// indices below d.
Status DecodeIwpIndices(const uint8_t* data, std::size_t size, std::size_t count, std::size_t d,
                        uint32_t* indices);

}  // namespace fedrt

#endif  // FEDRT_CODECS_IWP_H_
