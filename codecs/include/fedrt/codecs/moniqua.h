// Moniqua: modulo-quantized communication for decentralized SGD (codecs/README.md, "Moniqua"; Lu & De Sa 2020), the parts the peer topology
// uses beside the `moniqua` codec itself.
//
// A node sends its MODEL x (not a gradient) as q = Q_delta(frac(x / B)), b
// bits per coordinate and no scale; a receiver j recovers
// x'_i = ((B q - x_j) mod_c B) + x_j with its own model x_j as side
// information. Recovery is within delta*B of x_i when |x_i - x_j| <= theta,
// where B = 2 theta / (1 - 2 delta) and delta = 2^-(b+1) (nearest rounding)
// or 2^-b (stochastic rounding). Farther apart, a coordinate silently wraps by
// a multiple of B: MoniquaDecode counts the coordinates whose recovered
// difference comes within a margin of B/2 so the runtime can widen theta.
//
// Memory: the caller owns every array. Thread-safety: pure functions; the
// Codec passed in is only read.
#ifndef FEDRT_CODECS_MONIQUA_H_
#define FEDRT_CODECS_MONIQUA_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/codecs/codec.h"
#include "fedrt/platform/status.h"

namespace fedrt {

struct MoniquaParameters {
  int bits = 1;             // b, 1..8
  float theta = 0;          // bound on |x_i - x_j| between neighbours
  bool stochastic = false;  // round=stochastic (needs b >= 2)
  bool dither = false;      // round=dither: subtractive dither (Philox purpose 1), delta as nearest
  float gamma = 1.0f;       // consensus step size of the mixing step (the runtime scales W_ji by it)
  float delta = 0.25f;      // worst-case rounding error on the unit circle
  float modulus = 0;        // B = 2 theta / (1 - 2 delta), in float32
  uint32_t check = 0;       // check=N: coordinates sent at full precision too, for the wrap check
};

// Largest check=N.
inline constexpr int kMaxMoniquaCheck = 4096;

// The wrap check of one payload (check=N): which of the N sampled
// coordinates (Philox purpose 3 of the payload's context, the same on both
// ends) were recovered off by a multiple of B. A recovery within the bound is
// off by at most delta * B <= B/4, a wrapped one by at least 3B/4, so a wrap
// at a checked coordinate is never missed and never imagined; wrapped /
// checked estimates the share of wrapped coordinates in the payload.
struct MoniquaWraps {
  std::size_t checked = 0;
  std::size_t wrapped = 0;
};

// The parameters of a codec made with MakeCodec("moniqua:..."); kInvalidArgument
// for any other codec.
Result<MoniquaParameters> GetMoniquaParameters(const Codec& codec);

// The index of checked coordinate k (0 <= k < N) of a payload of d > 0
// coordinates made in `context`: word k of Philox purpose 3, times d, >> 32.
std::size_t MoniquaCheckedIndex(const CodecContext& context, std::size_t d, uint32_t k);

// Codec::Decode plus two wrap diagnostics. *near_wrap = the number of
// coordinates with |(B q - y) mod_c B| >= B/2 - margin (margin < 0: delta *
// B, so the count is of |recovered - y| >= theta): a heuristic that misses
// wraps beyond B/2 (they land anywhere) and, at 1 bit, counts coordinates
// that did not wrap. *checked (may be null): the exact check of a codec
// with check=N (zero counts without).
Status MoniquaDecode(const Codec& codec, const uint8_t* payload, std::size_t size, const CodecContext& context,
                     const float* side_info, float* out, std::size_t d, float margin, std::size_t* near_wrap,
                     MoniquaWraps* checked = nullptr);

// One neighbour's contribution to the mixing step.
struct MoniquaNeighbour {
  const float* recovered = nullptr;  // x'_i as recovered by this node
  float weight = 0;                  // W_ji
};

// The D-PSGD step with Moniqua: for every coordinate, in float32 and in this order,
//   acc = 0;  for each neighbour i in order: acc = acc + W_ji * (x'_i - x'_j)
//   x_j = (x_j + acc) - lr * grad_j
// where x'_j (own_recovered) is the node's own model passed through the same
// channel (decoded against itself). `model` is updated in place; it may not
// alias the other arrays.
void MoniquaMixStep(float* model, const float* own_recovered, const MoniquaNeighbour* neighbours,
                    std::size_t neighbour_count, float lr, const float* grad, std::size_t d);

}  // namespace fedrt

#endif  // FEDRT_CODECS_MONIQUA_H_
