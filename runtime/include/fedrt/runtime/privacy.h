// Client-level differential privacy for the star aggregator: DP-FedAvg
// (McMahan et al. 2018, "Learning Differentially Private Recurrent Language
// Models") and its privacy accountant.
//
// Mechanism, per round: every decoded update is clipped to L2 norm C and
// counts with weight 1 (a sample count would scale one device's influence,
// so it is not used); the aggregator adds Gaussian noise N(0, (z * C)^2) to
// every coordinate of the sum and divides by a fixed denominator, the number
// of devices the round sampled (the paper's fixed-denominator estimator:
// the denominator does not depend on who answered, so it reveals nothing).
// The noised mean then goes to the server optimizer as usual; FedAvgM and
// FedAdam are post-processing and do not change the guarantee.
//
// Accountant: Renyi DP of the sampled Gaussian mechanism (Mironov, Talwar and
// Zhang 2019, "Renyi Differential Privacy of the Sampled Gaussian
// Mechanism"), computed for integer orders 2..256 as TensorFlow Privacy,
// dp_accounting and Opacus do (_compute_log_a_int), composed over rounds by
// adding RDP, and converted to (epsilon, delta) with the bound of Balle et
// al. 2020 (Theorem 21), the conversion dp_accounting and Opacus use. The
// analysis assumes Poisson sampling with rate q; the aggregator samples a
// fixed number of the connected devices and charges q = sampled / connected,
// the usual approximation (McMahan et al. 2018 do the same).
//
// Thread-safety: RdpAccountant is a value type without synchronisation;
// the functions are pure.
#ifndef FEDRT_RUNTIME_PRIVACY_H_
#define FEDRT_RUNTIME_PRIVACY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt {

// The aggregator's DP settings (noise_multiplier 0: DP off).
struct DpOptions {
  double noise_multiplier = 0;  // z: noise std = z * clip on the sum
  double clip = 0;              // C: every update's L2 norm is clipped to it
  double delta = 1e-5;          // the delta epsilon is reported at
  double epsilon_budget = 0;    // stop before a round would pass it (0: no budget)
  // The noise's Philox key. 0: drawn from the platform's random source at
  // startup (the default: devices know the session seed, so noise drawn
  // from it could be subtracted). Set it only to reproduce a run.
  uint64_t noise_seed = 0;
};

// Checks a DpOptions with noise_multiplier > 0: clip > 0, 0 < delta < 1,
// budget >= 0, all finite.
Status ValidateDpOptions(const DpOptions& options);

// The RDP of one step of the sampled Gaussian mechanism with sampling rate q
// (0..1) and noise multiplier sigma (> 0) at integer order alpha >= 2.
double SampledGaussianRdp(double q, double sigma, int alpha);

// The smallest epsilon over `orders` for RDP values `rdp` at delta (0..1),
// Balle et al. 2020, Theorem 21; never negative; 0 when every RDP is 0 (nothing
// was released).
double RdpToEpsilon(const std::vector<int>& orders, const std::vector<double>& rdp, double delta);

class RdpAccountant {
 public:
  RdpAccountant();  // orders 2..256, nothing spent
  // Adds `steps` rounds with sampling rate q and noise multiplier sigma.
  void Compose(double q, double sigma, uint64_t steps = 1);
  double Epsilon(double delta) const;
  // The epsilon after one more step (q, sigma), without taking it.
  double EpsilonAfter(double q, double sigma, double delta) const;
  const std::vector<int>& orders() const { return orders_; }
  const std::vector<double>& rdp() const { return rdp_; }
  // Resumes from a saved rdp(): one finite, non-negative value per order.
  Status Restore(const std::vector<double>& rdp);

 private:
  std::vector<int> orders_;
  std::vector<double> rdp_;
};

// Adds N(0, stddev^2) to values[0..d), drawn from a Philox stream keyed by
// `seed` and `round` (Box-Muller over 2 x 64 bits per pair of values): the
// same (seed, round) gives the same noise on every machine.
void AddGaussianNoise(uint64_t seed, uint32_t round, double stddev, double* values, std::size_t d);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_PRIVACY_H_
