// What an aggregator needs to run NDQSG (nested dithered quantization,
// codecs/README.md) in the star topology.
//
// In each round a few senders, the anchors, send plain DQSG with s = s1 and
// are decoded first; every other sender sends NDQSG (`ndqsg:s1=..,rho=..`),
// whose symbols only name a coset, and is decoded against side information y:
// the running mean of the updates already decoded in that round. The decoded
// value equals the DQSG reconstruction bit for bit when |w'_DQSG - y| < D2/2
// (D2 = rho * scale, per bucket); otherwise it is off by a multiple of D2 (a
// wrap). The decoder cannot see a wrap, so CountNearWrap() reports the
// coordinates that came within a margin of the boundary, and the runtime can
// react (more anchors, larger rho, or DQSG for everyone).
//
// Flow for one round and one tensor:
//   anchors = ChooseNdqsgAnchors(seed, round, senders, NdqsgAnchorCount(n, 0.5));
//   NdqsgRunningMean mean(d);                 // allocates d floats, once (see below)
//   for each anchor:     mean.AddAnchor(*dqsg, payload, size, context, scratch);
//   for each other one:  mean.AddNested(*ndqsg, payload, size, context, scratch, 0.05f, &report);
//   mean.mean() is the round's average.
//
// Thread-safety: free functions are pure; an NdqsgRunningMean is not
// synchronized (one per tensor per aggregating thread).
#ifndef FEDRT_CODECS_NDQSG_H_
#define FEDRT_CODECS_NDQSG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/tensor_set.h"
#include "fedrt/platform/status.h"

namespace fedrt {

// max(1, ceil(fraction * senders)), at most `senders` (0 when there are none).
std::size_t NdqsgAnchorCount(std::size_t senders, double fraction);

// Chooses `count` anchors among `senders` (ids, any order, no duplicates),
// deterministically from (seed, round): every party computes the same set.
// Philox purpose 4 (leader choice) with tensor id 0 and sender id 0 draws a
// partial Fisher-Yates shuffle of the sorted ids. Returns the anchors sorted.
std::vector<uint32_t> ChooseNdqsgAnchors(uint64_t seed, uint32_t round, std::vector<uint32_t> senders,
                                         std::size_t count);

// The DQSG spec anchors use for an NDQSG spec: "dqsg:s=<s1>,b=<b>,ef=..,ec=..".
Result<std::string> NdqsgAnchorSpec(const std::string& ndqsg_spec);

// The same ndqsg spec (canonical) with nesting ratio `rho` (2..255).
Result<std::string> NdqsgSpecWithRho(const std::string& ndqsg_spec, int rho);

// The dqsg spec of NdqsgAnchorSpec with `levels` instead of s1 (levels 0: s1).
Result<std::string> NdqsgAnchorSpec(const std::string& ndqsg_spec, int levels);

// The ladder a wrap-driven aggregator climbs: 2 -> 3 -> 5 -> 7 -> ... (every
// step widens the coarse step D2 = rho * scale), and back down.
int NdqsgNextRho(int rho);
int NdqsgPreviousRho(int rho);  // 3 -> 2, 5 -> 3, ...; 2 stays 2

// Ideal fixed-length rate: coordinates * log2(alphabet) + 32 * scales bits
// (the paper's accounting: one fp32 scale per bucket, no headers). For the
// FC 784-300-100-10 network (266,610 parameters, 6 tensors): alphabet 5 gives
// 619,241 bits (DQSG s=2), alphabet 3 gives 422,759 bits (NDQSG rho=3).
double IdealFixedLengthBits(uint64_t coordinates, uint64_t scales, uint32_t alphabet);

// Counts coordinates whose nested decoding came within `margin` (a fraction
// of D2, 0 <= margin < 1/2) of the wrap boundary: |decoded_i - y_i| >
// (1/2 - margin) * D2, with D2 = rho * scale of the coordinate's bucket.
// `codec` must be an ndqsg codec and `payload` one of its payloads (the
// scales are read from it; the payload is validated again).
Result<std::size_t> CountNearWrap(const Codec& codec, const uint8_t* payload, std::size_t size,
                                  const CodecContext& context, const float* decoded, const float* side_info,
                                  std::size_t d, float margin);
// The same over a multi-tensor update of an ndqsg tensor set: the sum over
// its tensors, each against its own coarse steps (`d` is the whole vector).
Result<std::size_t> CountNearWrap(const TensorSetCodec& codec, const uint8_t* payload, std::size_t size,
                                  const CodecContext& context, const float* decoded, const float* side_info,
                                  std::size_t d, float margin);

struct NdqsgWrapReport {
  std::size_t near_wrap = 0;  // CountNearWrap of the last nested update
};

// The running mean of the updates decoded so far in a round: the side
// information for the next nested update.
class NdqsgRunningMean {
 public:
  // Allocates the mean (d floats); the wrap count's scratch (a coarse step
  // per bucket, a part per tensor) grows at the first nested updates and is
  // reused, so a round after them allocates nothing.
  explicit NdqsgRunningMean(std::size_t d);

  std::size_t d() const { return mean_.size(); }
  std::size_t count() const { return count_; }
  const float* mean() const { return mean_.data(); }
  // Starts a new round: count 0, mean all zero.
  void Reset();
  // mean += (x - mean) / (count + 1); count += 1.
  void Add(const float* x);

  // Decodes an anchor's DQSG payload into scratch[0..d) and adds it.
  Status AddAnchor(const Codec& dqsg, const uint8_t* payload, std::size_t size, const CodecContext& context,
                   float* scratch);
  // Decodes a nested payload against the current mean into scratch[0..d),
  // counts near-wraps with `margin` into *report (may be null), and adds it.
  // kFailedPrecondition when no update has been added yet (no side information).
  Status AddNested(const Codec& ndqsg, const uint8_t* payload, std::size_t size, const CodecContext& context,
                   float* scratch, float margin, NdqsgWrapReport* report);
  // The same for a multi-tensor update (tensor_set.h) of the whole vector.
  Status AddNested(const TensorSetCodec& ndqsg, const uint8_t* payload, std::size_t size,
                   const CodecContext& context, float* scratch, float margin, NdqsgWrapReport* report);

 private:
  template <typename NdqsgCodec>
  Status AddNestedWith(const NdqsgCodec& ndqsg, const uint8_t* payload, std::size_t size, const CodecContext& context,
                       float* scratch, float margin, NdqsgWrapReport* report);

  std::vector<float> mean_;
  std::size_t count_ = 0;
  std::vector<float> steps_;        // CountNearWrap's coarse steps
  std::vector<TensorPart> parts_;   // and a tensor set's parts
};

}  // namespace fedrt

#endif  // FEDRT_CODECS_NDQSG_H_
