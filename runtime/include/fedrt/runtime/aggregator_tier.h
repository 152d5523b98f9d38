// The aggregator tier: K aggregator engines (ranks) that serve one training
// together, each a shard of the devices. It is what the engine needs of its
// peers, and nothing of how they talk: `fedrt serve --mpi` implements it on
// MPI (runtime/src/star/mpi_tier.cc), the tests on threads.
//
// Every rank runs an Aggregator engine (aggregator_engine.h) with the same
// config, the same key file and the same global model, given its tier in
// AggregatorHooks::tier. The engines then drive rounds in lock step through
// the tier's collectives (AllGather; AllToAll and GatherToRank0, which an
// implementation may build on AllGather):
//   - every Tick() agrees on a few counts (devices connected, updates in,
//     devices still to answer) and on rank 0's clock and decisions (the
//     round deadline, the target accuracy), so every rank starts and closes
//     the same rounds in the same Tick;
//   - a round starts from the union of the ranks' connected devices (sorted
//     ids), sampled as one aggregator would: every rank picks the same
//     devices and instructs those it serves;
//   - a round closes with one exchange of RoundPartial: plain rounds (mean)
//     add the ranks' double sums, weights and counts in rank order (the sum
//     as a reduce-scatter and an all-gather: each rank adds one slice of the
//     model over every rank, so a rank sends and receives O(d), not O(K d));
//     plain rounds of a robust rule (median, trimmed mean, Krum) send the
//     ranks' decoded updates to rank 0, which holds them in the order of the
//     sampled devices, as one aggregator does, runs the rule and sends every
//     rank the result (BroadcastFromRank0); NDQSG
//     rounds gather the received payloads (anchors and nested updates)
//     and every rank decodes the round in the order of the sampled devices,
//     as one aggregator would (a nested update is decoded against the running
//     mean of everything before it, so that decode cannot be split); ALQ /
//     AMQ statistics are merged in rank order and every rank fits the same
//     next table. Every rank then applies the same mean with the same server
//     optimizer: the ranks hold the same global model without sending it.
// Rank 0 alone evaluates and checkpoints (its host gives it the test set and
// the checkpoint hook); the others get neither.
//
// DP-FedAvg (privacy.h) over a tier: every rank clips its shard's updates and
// sums them with weight 1, the sums are added as above, and rank 0 alone adds
// the Gaussian noise (with its noise key) and divides; the other ranks take
// its noised mean (BroadcastFromRank0), so the noise is drawn exactly once and
// every rank applies the same step. The accountant's sampling rate counts
// every rank's devices. Per-update clipping (clip_update_norm) happens on the
// rank that decoded the update, before its sum or its trip to rank 0.
//
// A device belongs to the rank ShardOfDevice names (rendezvous hashing of
// its id over the ranks: consistent, so another K moves only the devices
// whose shard changed). A device that joins another rank is told where to
// go (a Leave whose reason is transport::kRedirectPrefix + address,
// transport/README.md).
//
// Ownership: the tier outlives the engine it is given to. Thread-safety:
// the collectives are called from the thread that drives the engine, by
// every rank the same number of times in the same order (the engine makes
// sure of it); a rank that fails or stops ends the job (MPI's failure
// model).
#ifndef FEDRT_RUNTIME_AGGREGATOR_TIER_H_
#define FEDRT_RUNTIME_AGGREGATOR_TIER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/codecs/levels.h"
#include "fedrt/platform/status.h"

namespace fedrt {

class AggregatorTier {
 public:
  virtual ~AggregatorTier() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's `mine`, in rank order, on every rank. Collective: blocks
  // until every rank has called it. An error ends the training.
  virtual Status AllGather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) = 0;
  // to[j] (one part per rank) goes to rank j: on return (*from)[i] is what
  // rank i sent this one. Collective. Here on AllGather (every rank then
  // receives every part); MPI overrides it with MPI_Alltoallv.
  virtual Status AllToAll(const std::vector<std::vector<uint8_t>>& to, std::vector<std::vector<uint8_t>>* from);
  // Every rank's `mine`, in rank order, on rank 0; *all is emptied on the
  // others. Collective. Here on AllGather; MPI overrides it with MPI_Gatherv.
  virtual Status GatherToRank0(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all);
  // Where devices reach `rank` (HOST:PORT), for redirects: what that rank
  // gave ShareAddress (empty before).
  virtual std::string AddressOf(int rank) const;
  // Tells every rank where this one listens (HOST:PORT). Collective; a host
  // calls it once it listens, before the engine's first Tick.
  Status ShareAddress(const std::string& mine);
  // Rank 0's `bytes` on every rank (the others' are replaced; what they
  // pass is not sent). Collective, one AllGather: what rank 0 alone decides
  // (the checkpoint it read, the DP round's noised mean) reaches every rank.
  Status BroadcastFromRank0(std::vector<uint8_t>* bytes);

 private:
  std::vector<std::string> addresses_;
};

// The rank (0..ranks-1) that serves `device_id`: rendezvous hashing, the
// rank with the highest hash of (id, rank).
int ShardOfDevice(const std::string& device_id, int ranks);

// One received update of an NDQSG round, as the ranks exchange it.
struct ShardUpdate {
  std::string device_id;
  uint32_t sender_id = 0;
  std::string spec;
  uint8_t role = 0;               // AnchorRole
  int32_t rho = 0;
  uint64_t num_samples = 0;
  float loss = 0;
  uint64_t wire_bytes = 0;
  std::vector<uint8_t> payload;   // as received (anchors too: every rank decodes them)
};

// A rank's part of a closing round; merged over the ranks in rank order.
struct RoundPartial {
  // Plain rounds: the rank's weighted double sum of its accepted updates
  // (UpdateAccumulator), its total weight and count.
  std::vector<double> sum;
  double weight = 0;
  uint64_t count = 0;
  uint64_t updates = 0;           // combined
  uint64_t rejected = 0;          // refused on arrival or at the close
  uint64_t clipped = 0;
  double loss_sum = 0;            // sum of loss * samples
  double sample_sum = 0;
  uint64_t bytes_up = 0;
  uint64_t bytes_down = 0;
  uint64_t full_models_down = 0;
  LevelStatistics levels;         // ALQ / AMQ: merged statistics of the accepted updates
  // NDQSG rounds: the rank's received updates (the plain fields above stay
  // zero but for rejected, bytes_down and full_models_down).
  std::vector<ShardUpdate> received;
};

std::vector<uint8_t> EncodeRoundPartial(const RoundPartial& partial);
// kCorrupt for bytes that are not an encoded RoundPartial.
Result<RoundPartial> DecodeRoundPartial(const std::vector<uint8_t>& bytes);
// into += from: sums add, counts add, statistics merge, received
// updates append. kInvalidArgument when the sums differ in length.
Status MergeRoundPartial(RoundPartial* into, const RoundPartial& from);
// Every rank's partial merged in rank order, on every rank. The sums (of
// one length on every rank) are added as MergeRoundPartial adds them, bit for
// bit, but as a reduce-scatter and an all-gather: rank j adds slice j of
// every rank's sum in rank order, then every rank gathers the slices.
Result<RoundPartial> CombineRoundPartials(AggregatorTier& tier, const RoundPartial& mine);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_AGGREGATOR_TIER_H_
