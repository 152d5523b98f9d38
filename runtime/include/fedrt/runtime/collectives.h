// Collectives over a CollectiveContext (collective_context.h), one class (or
// function) per algorithm, each in its own file under runtime/src/collectives/:
//
//   RingAllReduce            ring all-reduce of a float vector, in place, raw
//                            fp32: reduce-scatter then all-gather, each
//                            segment cut into chunks that are forwarded as
//                            soon as they are reduced (pipelined). Vectors
//                            that SmallAllReduce::Fits go to:
//   SmallAllReduce           every member's whole vector both ways round the
//                            ring, ceil((p - 1) / 2) hops in sequence instead
//                            of 2 (p - 1), summed by every member in the
//                            ring's order: the same bits as the ring.
//   CompressedRingAllReduce  the same ring, every hop a codec payload (e.g.
//                            "fp16"): reduce-scatter hops decode-and-add, the
//                            owner of a reduced segment encodes it once and
//                            every peer (the owner too) takes the decoded
//                            value, so all peers end bit-identical.
//   AllGatherAllReduce       the ring for the quantizers and sparsifiers:
//                            every member encodes its own vector once (per
//                            tensor, error feedback when the codec asks),
//                            the payloads go round the ring unchanged and
//                            every member sums the p decoded ones in ring
//                            order, so all end bit-identical (why not
//                            re-encoding per hop: runtime/README.md).
//   IwpAllReduce             IWP-sparse (codecs/README.md): the
//                            leader of the step sends its index set around
//                            the ring; every peer all-reduces its accumulated
//                            values at those indices.
//   Gossip                   D-PSGD on the gossip graph with Metropolis
//                            weights: models to the neighbours, full
//                            precision, Moniqua-coded, or CHOCO replicas of
//                            coded model differences.
//   AgreeStep                after a re-formation, every member learns the
//                            furthest step any member would run next.
//
// Every member calls the same collective in the same order with the same
// sizes. Each collective must finish within the context's step deadline; when
// a peer fails, every survivor fails naming the same rank (the context's
// failure reports), and a collective called after that, before Form(), fails
// with kFailedPrecondition.
//
// Memory (Gloo's way: a collective states what it needs, the caller carves
// it): RequiredBytes(CollectiveShape) measures what a collective keeps
// between calls for vectors of up to d floats, its codec and the group's
// size (codec storage and working space, encode buffers, the neighbours'
// recovered models, CHOCO replicas, index buffers, the all-gather's payloads
// and error-feedback residual), and Bind(memory, size,
// shape) hands that memory over before the first call; a bound collective's
// calls within its shape allocate nothing (codecs are built in place
// (ConstructCodec), also when Moniqua's theta changes; frames are encoded
// into the context's reusable slots). Unbound, or asked for more than the
// shape (a longer vector, a codec with a larger footprint, more neighbours
// after a re-formation), it keeps the same state on the heap, grown at
// first use and reused. The context's frame slots are the context's. RingAllReduce sends raw chunks
// straight from the caller's vector, adds received reduce-scatter chunks into
// it piece by piece as they arrive and receives all-gather chunks straight
// into it (registered buffers, where the binding can: TCP), so its steady
// state allocates no frame memory.
//
// Thread-safety: a collective object is used by the context's one thread.
#ifndef FEDRT_RUNTIME_COLLECTIVES_H_
#define FEDRT_RUNTIME_COLLECTIVES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/error_feedback.h"
#include "fedrt/codecs/iwp.h"
#include "fedrt/codecs/moniqua.h"
#include "fedrt/codecs/tensor_set.h"
#include "fedrt/platform/status.h"
#include "fedrt/runtime/collective_context.h"
#include "fedrt/runtime/collective_memory.h"
#include "fedrt/runtime/robust_aggregation.h"

namespace fedrt {
namespace peer {

// What a collective's memory is measured and bound for (RequiredBytes, Bind).
inline constexpr std::size_t kCollectiveAlignment = 64;  // Bind's memory
struct CollectiveShape {
  std::size_t d = 0;           // the longest vector a call passes, in floats
  std::size_t members = 1;     // the group's size (the largest formation's)
  std::size_t neighbours = 0;  // Gossip: neighbours in the gossip graph
  // The codec spec of the calls (empty: none). Moniqua: any theta (the
  // footprint does not depend on it); CHOCO: the whole choco+CODEC spec.
  std::string codec;
  std::vector<std::size_t> tensor_sizes;  // Gossip, AllGatherAllReduce: the tensor table (SetTensorTable)
  bool gossip_d2 = false;                 // Gossip: GossipAlgorithm::kD2's two more model-sized vectors
  uint32_t chunk_floats = 0;              // the ring's pipelining (RingAllReduce)
  transport::FrameLimits limits;          // the context's
};

struct AllReduceStats {
  uint64_t bytes_sent = 0;  // payload bytes this peer sent (frames' fields excluded)
  double seconds = 0;
};

// Dense fp32 all-reduce of a small vector, in place, for the latency-bound
// sizes: every member sends its vector to both ring neighbours, which pass
// on what they received until every member holds all p vectors (2 members:
// one hop; 4: two), then each member adds them up. Bytes: each member sends
// p - 1 whole vectors (the ring: 2 (p - 1) / p of one); the busier
// direction of each link carries floor(p / 2) vectors (the ring: 2 (p - 1) /
// p), so with more than 3 members it moves more bytes per link than the
// ring, and the limit shrinks with p (Fits).
// The sum: each coordinate of the ring's segment s (RingShape: coordinates
// [s n / p, (s + 1) n / p)) is added in float starting from ring position
// s, then s + 1, s + 2, ... (wrapping), the order RingAllReduce adds in;
// so it is bit-identical on every member and to what the ring gives.
// RingAllReduce::Run calls it for vectors that Fit; called directly it
// refuses others (kInvalidArgument).
class SmallAllReduce {
 public:
  // The most bytes one direction of a link carries: floor(p / 2) vectors.
  // On loopback, 4 KiB took 40% less time than on the ring at 2 and 4
  // peers, 64 KiB at 2 peers about the ring's time (runtime/README.md,
  // "Small vectors"); on a slow link the extra bytes cost more than the
  // saved hops, so the bound is kept low.
  static constexpr std::size_t kMaxLinkBytes = 64u << 10;
  // Whether n floats over p members go this way: floor(p / 2) * n floats
  // within kMaxLinkBytes, and each vector in one frame.
  static bool Fits(std::size_t n, std::size_t p, const transport::FrameLimits& limits);

  explicit SmallAllReduce(CollectiveContext& context);
  ~SmallAllReduce();

  // Memory (collectives.h, "Memory"): p vectors of d floats when they Fit.
  static Result<std::size_t> RequiredBytes(const CollectiveShape& shape);
  Status Bind(void* memory, std::size_t size, const CollectiveShape& shape);

  Status Run(float* data, std::size_t n);
  const AllReduceStats& stats() const { return stats_; }
  uint64_t total_bytes_sent() const { return total_bytes_sent_; }

 private:
  CollectiveContext& context_;
  internal::Scratch<float> vectors_;  // p vectors by ring position, reused
  AllReduceStats stats_;
  uint64_t total_bytes_sent_ = 0;
};

// Dense fp32 ring all-reduce: the sum over the members, in place. Vectors
// that SmallAllReduce::Fits are summed by it (the same bits).
class RingAllReduce {
 public:
  // chunk_floats: pipelining granularity in floats; 0: automatic, a whole
  // segment (the vector's share of one peer) as far as one frame takes it
  // (4 MiB less the chunk's head with the default limits; the rest of the
  // segment is a second, short chunk). Every chunk costs frames, wake-ups
  // and system calls on both sides, and with more peers than cores CPU time
  // is what bounds the step: 16 MiB over 4 loopback processes on 2 cores
  // took 5-10% less CPU with 2 MiB chunks than with 1 MiB, and 9-12% less
  // again with whole segments than with 2 MiB (docs/benchmarks/allreduce.md).
  // The links stay busy without finer pipelining: every member sends and
  // receives at every step. Chunks are capped to fit one frame.
  explicit RingAllReduce(CollectiveContext& context, uint32_t chunk_floats = 0);
  ~RingAllReduce();

  // Memory (collectives.h, "Memory"): the registered buffers' list and
  // SmallAllReduce's vectors, for vectors of up to shape.d floats.
  static Result<std::size_t> RequiredBytes(const CollectiveShape& shape);
  Status Bind(void* memory, std::size_t size, const CollectiveShape& shape);

  Status Run(float* data, std::size_t n);
  // The ring at every size, for a reduction whose point is the bytes it
  // sends (IWP's selected coordinates): 2 (p - 1) / p n floats a member,
  // where SmallAllReduce sends (p - 1) n (twice the bytes at 4 members) to
  // save hops. The same bits as Run.
  Status RunFewestBytes(float* data, std::size_t n);
  // The last Run; and what every successful Run sent.
  const AllReduceStats& stats() const { return stats_; }
  uint64_t total_bytes_sent() const { return total_bytes_sent_; }

 private:
  CollectiveContext& context_;
  const uint32_t chunk_floats_;
  SmallAllReduce small_;
  internal::Scratch<RegisteredBuffer> buffers_;  // reused: no allocation in the steady state
  AllReduceStats stats_;
  uint64_t total_bytes_sent_ = 0;
};

// Ring all-reduce whose every hop carries a codec payload; the codec must
// decode without side information (kInvalidArgument otherwise).
class CompressedRingAllReduce {
 public:
  explicit CompressedRingAllReduce(CollectiveContext& context, uint32_t chunk_floats = 0);
  ~CompressedRingAllReduce();

  // Memory (collectives.h, "Memory"): the codec of shape.codec with working
  // space for shape.d floats and the buffer a chunk is encoded into.
  static Result<std::size_t> RequiredBytes(const CollectiveShape& shape);
  Status Bind(void* memory, std::size_t size, const CollectiveShape& shape);

  Status Run(float* data, std::size_t n, const std::string& codec_spec);
  const AllReduceStats& stats() const { return stats_; }
  uint64_t total_bytes_sent() const { return total_bytes_sent_; }

 private:
  CollectiveContext& context_;
  const uint32_t chunk_floats_;
  internal::CodecHolder codec_;  // made once per spec, reused
  std::string spec_;              // reserved: a new spec allocates nothing
  internal::Scratch<uint8_t> encoded_;
  AllReduceStats stats_;
  uint64_t total_bytes_sent_ = 0;
};

// All-reduce by all-gather of compressed vectors: on return `data` holds the
// sum over the members of decode(encode(their data)), added in ring order,
// the same bits on every member. The codec: any that decodes without side
// information (kInvalidArgument otherwise), made per spec and kept; the
// quantizers go tensor by tensor over SetTensorTable's table (tensor_set.h;
// a vector of another length is one tensor). Error feedback is on unless
// the spec says ef=off (AllGatherCodecSpec): this member's residual is
// added before encoding and what the encoding lost is carried to the next
// Run; a Run that fails leaves the residual as it was. (On by default here,
// unlike the codecs' own default for the quantizers: in a ring every step's
// gradient is compressed, and without it dqsg:s=2 and alq:bits=3 end 1.3 to
// 2.8 points below the dense ring in 3 epochs; runtime/README.md.)
// Bytes: each member sends the p - 1 payloads other than the last one it
// receives, (p - 1) payloads in all.
// ALQ / AMQ adapt their levels: every refit=N Runs (the codec's key, default
// 1) the members all-gather the level statistics of what they encoded since
// the last fit (28 bytes each; with model=norm 28 more per largest bucket),
// merge them and fit the next table, identical on every member.
// Memory (collectives.h, "Memory"): RequiredBytes and Bind as the others;
// what a Run keeps is its codec in place (ALQ / AMQ too), the p payloads,
// the error-feedback residual (with its copy from before the Run and the
// vector that is encoded) and, over several tensors, the decoded vector,
// and for ALQ / AMQ the p level-statistics payloads. Unbound (or asked for
// more than the shape) it is the same on the heap, made at the first Run and
// for a new spec or length, after which a Run allocates nothing (but for
// ALQ / AMQ, below). Either way on the heap: the wrappers that cut the vector into its tensors (made by
// SetTensorTable and Bind), and for ALQ / AMQ the level table the codec makes
// when it is built and the level statistics each Run measures and each refit
// merges (so those two allocate every Run).
// The spec AllGatherAllReduce encodes with: `codec_spec` plus ef=on when it
// names no ef key (kInvalidArgument when it does not parse).
Result<std::string> AllGatherCodecSpec(const std::string& codec_spec);

class AllGatherAllReduce {
 public:
  explicit AllGatherAllReduce(CollectiveContext& context);
  ~AllGatherAllReduce();

  // Memory (collectives.h, "Memory"): for vectors of shape.d floats over
  // shape.members members with the codec shape.codec (AllGatherCodecSpec's
  // spec of it) over shape.tensor_sizes (SetTensorTable's table).
  static Result<std::size_t> RequiredBytes(const CollectiveShape& shape);
  Status Bind(void* memory, std::size_t size, const CollectiveShape& shape);

  // The model's tensor lengths (aggregation.h, ModelTensorSizes).
  void SetTensorTable(std::vector<std::size_t> tensor_sizes);
  Status Run(float* data, std::size_t n, const std::string& codec_spec);
  // The error-feedback residual (n floats) after the last Run; null when
  // the codec has none.
  const float* residual() const;
  // ALQ / AMQ: the level table the next Run encodes with (null: another codec).
  const LevelTable* level_table() const;
  const AllReduceStats& stats() const { return stats_; }
  uint64_t total_bytes_sent() const { return total_bytes_sent_; }

 private:
  Status Prepare(std::size_t n, const std::string& codec_spec);
  Status Refit(Deadline deadline, std::size_t n);
  // Every member's payload of up to `stride` bytes in payloads[q * stride ..),
  // its size in sizes[q], q the ring position; this member's is filled in.
  Status Exchange(uint64_t collective, Deadline deadline, std::string_view spec, uint8_t* payloads,
                  std::size_t stride, std::size_t* sizes);

  CollectiveContext& context_;
  std::vector<std::size_t> tensor_sizes_;
  // The codec, in place: in the bound storage when it fits, else in heap
  // storage with working space for the vector (ConstructCodec), so encoding
  // and decoding allocate nothing.
  unsigned char* bound_codec_ = nullptr;
  std::size_t bound_codec_size_ = 0;
  std::size_t bound_d_ = 0;
  std::vector<std::max_align_t> heap_codec_;
  internal::CodecHolder inner_;
  AdaptiveCodec* adaptive_ = nullptr;  // ALQ / AMQ: inner_'s codec as such
  // Wrappers borrowing inner_'s codec (Rebind): over the table (made by
  // SetTensorTable) and over one vector (made by Bind or for a new length).
  std::unique_ptr<TensorSetCodec> per_tensor_;
  std::unique_ptr<TensorSetCodec> whole_;
  TensorSetCodec* codec_ = nullptr;  // per_tensor_ or whole_; null: none made
  std::string spec_;                 // the requested spec; reserved
  std::string encoded_spec_;         // with ef (AllGatherCodecSpec); reserved
  std::optional<ErrorFeedback> feedback_;  // on residual_; empty: the codec takes none
  internal::Scratch<float> residual_;
  internal::Scratch<float> saved_residual_;  // the residual before this Run (restored when it fails)
  internal::Scratch<float> sum_;             // data + residual: encoded, and measured for ALQ / AMQ
  internal::Scratch<float> decoded_;         // a member's decoded payload (several tensors)
  internal::Scratch<uint8_t> payloads_;      // by ring position, one stride each
  internal::Scratch<std::size_t> payload_sizes_;
  internal::Scratch<uint8_t> level_payloads_;
  internal::Scratch<std::size_t> level_sizes_;
  LevelStatistics pending_levels_;           // this member's, since the last fit
  uint32_t runs_since_refit_ = 0;
  AllReduceStats stats_;
  uint64_t total_bytes_sent_ = 0;
};

// One IWP step. The caller has already Accumulate()d its gradient into
// `accumulator`. The leader (IwpLeader(seed, step, ring size), by ring
// position) selects indices from `weights` and sends them around the ring;
// every peer gathers-and-zeroes its accumulator there and `sum` (a dense ring
// over the same context) sums the values. On return `indices` holds the index
// set and `sums` the summed values. When the sum fails after this peer
// gathered its values, `sums` holds those values (not reduced) so the caller
// can put them back into the accumulator (empty when nothing was gathered).
class IwpAllReduce {
 public:
  IwpAllReduce(CollectiveContext& context, RingAllReduce& sum);

  // Memory (collectives.h, "Memory"): the index broadcast's buffer and the
  // gathered values, for models of shape.d floats (`sum` is bound apart).
  static Result<std::size_t> RequiredBytes(const CollectiveShape& shape);
  Status Bind(void* memory, std::size_t size, const CollectiveShape& shape);

  Status Run(IwpAccumulator& accumulator, const float* weights, uint64_t seed, uint32_t step,
             std::vector<uint32_t>* indices, std::vector<float>* sums);
  // The index broadcast and the sum of the last Run; the index broadcasts of
  // every Run (the sums count in `sum`).
  const AllReduceStats& stats() const { return stats_; }
  uint64_t total_bytes_sent() const { return total_bytes_sent_; }

 private:
  Status SendIndices(const transport::RingChunkMessage& m, Deadline deadline);

  CollectiveContext& context_;
  RingAllReduce& sum_;
  internal::Scratch<uint8_t> encoded_;
  internal::Scratch<float> gathered_;  // this peer's gathered values, kept until the sum is done
  AllReduceStats stats_;
  uint64_t total_bytes_sent_ = 0;
};

// Gossip with replicas (CHOCO-SGD, Koloskova et al. 2019): the gossip codec
// spec "choco+CODEC" or "choco:gamma=G+CODEC" (G in (0, 1], default 0.5;
// CODEC any codec that decodes without side information, e.g. sign:b=512).
// Each peer keeps 1 + (number of neighbours) more model-sized vectors: its
// public copy x^_i and a copy x^_j of each neighbour's. A step, in float32
// and this order:
//   x_i = x_i - lr g_i;  q_i = decode(encode(x_i - x^_i));  send q_i
//   x^_i = x^_i + q_i;  x^_j = x^_j + q_j for each neighbour j heard
//   x_i = x_i + sum_j (gamma W_ij) (x^_j - x^_i)       (MoniquaMixStep's order)
// The compression error stays in x_i - x^_i and is sent later, so 1-bit
// codecs reach consensus. All copies start at 0 and restart at 0 whenever
// the group's members change (every survivor does the same).
struct ChocoSpec {
  float gamma = 0.5f;
  std::string codec;  // the inner codec spec
};
bool IsChocoSpec(const std::string& spec);
// kInvalidArgument for a malformed spec (the inner codec is not checked here).
Result<ChocoSpec> ParseChocoSpec(const std::string& spec);

// What a gossip step does with the mixing (Gossip::SetAlgorithm).
//   kDpsgd  D-PSGD: x = x + sum_j W_ij (x'_j - x'_self) - lr g
//   kD2     D2 (Tang, Lian, Yan, Zhang and Liu 2018), which removes the
//           drift that label-skewed peers keep under D-PSGD: the peer sends
//           and mixes the half step
//             x_{k+1/2} = 2 x_k - x_{k-1} - lr (g_k - g_{k-1})
//           written as x_k - lr g_k + c_k, c_k the sum of the peer's mixing
//           corrections so far (c_0 = 0, so the first step is D-PSGD's);
//           then M_k = sum_j W_ij (x'_j - x'_self) of the half steps and
//             x_{k+1} = x_{k+1/2} + M_k,   c_{k+1} = (1 - leak) c_k + gain M_k
//           in float32 and this order. gain 1, leak 0 is the paper's D2.
//           A gain below 1 and a leak are ours, for 1-bit Moniqua: D2 keeps
//           the recovery errors that enter M in c, so the neighbours'
//           distance they keep up does not shrink with the consensus step
//           (D-PSGD's does), coordinates wrap, and a wrap (seen by one
//           receiver only) moves the peers' mean of c, which D2 then adds to
//           every later step; a gain of 0.05 integrates 20 times less of the
//           errors and a leak of 0.005 forgets a wrap's share in about 200
//           steps (docs/design/peer.md, "Moniqua on D2"). Each peer keeps c
//           and the half step (two more model-sized vectors); c restarts at 0
//           when the group's members change (a lost peer's share of the sum
//           of the c's would otherwise stay as a bias). Full precision,
//           Moniqua (the codec's consensus step gamma scales W) or any codec
//           that decodes the models; not CHOCO replicas, not a defense.
enum class GossipAlgorithm : uint8_t { kDpsgd, kD2 };
// "dpsgd" or "d2"; kInvalidArgument otherwise.
Result<GossipAlgorithm> ParseGossipAlgorithm(const std::string& name);

struct GossipStats {
  // Moniqua, all neighbours: with check=N, the checked coordinates that
  // wrapped (exact: MoniquaWraps); without, the coordinates recovered near
  // the wrap boundary (a heuristic that misses wraps beyond B/2 and, at 1
  // bit, counts some that did not wrap).
  uint64_t wrap_count = 0;
  uint64_t wrap_checked = 0;  // Moniqua with check=N: coordinates checked
  uint64_t bytes_sent = 0;  // payload bytes sent this step
};

// One decentralized SGD (D-PSGD) step on the context's gossip graph with its
// Metropolis weights (ring: 1/3 per neighbour, 1/2 with two peers; torus:
// MetropolisWeights): this peer sends `model` to its neighbours, raw fp32
// when `codec_spec` is empty, else as that codec's payload (e.g.
// "moniqua:bits=1,theta=0.5", or a ChocoSpec); recovers theirs (Moniqua: with
// its own model as side information) and applies, in place,
//   x += sum_i W_i (x'_i - x'_self) - lr * grad      (MoniquaMixStep)
// where x'_self is its own model passed through the same channel. Every peer
// calls it with the same step number and codec. After a re-formation (the
// second Form() on) a neighbour's model of another step is taken too (peers
// that re-formed after a failure may be steps apart; it is decoded with the
// sender's step). A neighbour that has left (Close()) is skipped and its
// weight stays with this peer. A failed step leaves a replica-gossip model as
// it was (the caller repeats the step).
//
// Byzantine-robust gossip (SetDefense; runtime/README.md, "Robust
// aggregation and differential privacy"): a peer cannot trust the models its
// neighbours send. With `clip` > 0 each neighbour's model counts as
// x'_self + clip(x'_i - x'_self) (its deviation scaled to L2 norm at most
// clip: ClippedGossip, He, Karimireddy and Jaggi 2022); with a rule other
// than mean the step becomes
//   x = x + (Rule({x'_self, x'_i ...}, weights {W_self, W_i ...}) - x'_self) / 2 - lr * grad
// (robust_aggregation.h; BRIDGE, Yang and Bajwa 2019, with the own model in
// the set, taken half way: the whole step swaps the two sides of a bipartite
// graph every step, which the gradient step then grows; gossip.cc). The rule
// needs MinimumUpdates models among own + neighbours.
// Only full-precision gossip and codecs that decode without side
// information take a defense (Moniqua decodes against the own model, CHOCO
// mixes replicas of sums: neither recovers a neighbour's model to judge).
struct GossipDefense {
  AggregationRule rule;  // mean: the Metropolis mixing above
  double clip = 0;       // 0: the neighbours' models as received
};

class Gossip {
 public:
  explicit Gossip(CollectiveContext& context);
  ~Gossip();

  // Memory (collectives.h, "Memory"): for models of shape.d floats with
  // shape.neighbours neighbours and the codec shape.codec over
  // shape.tensor_sizes (SetTensorTable first): the codec in place, the
  // encoded model, the own and the neighbours' recovered models, their
  // received payloads and, for CHOCO, the replicas. A defense's and a send
  // transform's copies stay on the heap (grown at first use).
  static Result<std::size_t> RequiredBytes(const CollectiveShape& shape);
  Status Bind(void* memory, std::size_t size, const CollectiveShape& shape);

  // kInvalidArgument for a clip that is negative or not finite. Checked
  // against the neighbour count and the codec at every Step.
  Status SetDefense(const GossipDefense& defense);
  // D-PSGD (the default) or D2 with its correction's gain in (0, 1] and
  // leak in [0, 1) (GossipAlgorithm; kInvalidArgument outside). Checked
  // against the codec and the defense at every Step. Every peer sets the same.
  Status SetAlgorithm(GossipAlgorithm algorithm, float d2_gain = 1.0f, float d2_leak = 0.0f);
  // Tests of the defense: what this peer sends in place of its model (a
  // copy of the model, changed in place by `transform`); its own model and
  // mixing stay honest. Empty: the model itself. Replica (CHOCO) gossip
  // sends no model and refuses it.
  void SetSendTransform(std::function<void(uint64_t step, float* values, std::size_t d)> transform) {
    send_transform_ = std::move(transform);
  }

  Status Step(float* model, const float* grad, std::size_t d, float lr, const std::string& codec_spec,
              uint64_t step, GossipStats* stats);
  // The model's tensor table (lengths, in order): a codec that encodes per
  // tensor (EncodesPerTensor: dqsg, ndqsg, qsgd, ...) then sends one stream
  // with its own scales per tensor (tensor_set.h) instead of one for the
  // whole model; Step refuses a d that is not the table's total. Empty (the
  // default): one vector. Every peer sets the same table.
  void SetTensorTable(std::vector<std::size_t> tensor_sizes);
  // What every successful Step sent.
  uint64_t total_bytes_sent() const { return total_bytes_sent_; }

 private:
  // Receives one neighbour's model; *sender_step is the step it was sent at.
  // Receives one neighbour's model into out[0 .. max_size), its size into
  // *size; *sender_step is the step it was sent at.
  Status Receive(uint32_t from, Deadline deadline, uint64_t step, std::size_t max_size, uint8_t* out,
                 std::size_t* size, uint64_t* sender_step);
  Status Send(uint32_t to, uint64_t step, std::string_view spec, const uint8_t* bytes, std::size_t size,
              uint64_t* sent, Deadline deadline);
  // The codec for `codec_spec` (null: fp32), made when the spec changed.
  Status Prepare(const std::string& codec_spec, std::size_t d);
  void ClipToOwn(float* x, std::size_t d) const;
  void Defend(float* model, const float* grad, std::size_t d, float lr, std::size_t heard);

  CollectiveContext& context_;
  internal::CodecHolder made_;  // the codec of spec_ (the inner one of CHOCO)
  // Over tensor_sizes_ when the codec encodes per tensor (made with the
  // table, pointed at each new codec).
  std::unique_ptr<TensorSetCodec> per_tensor_;
  Codec* codec_ = nullptr;  // made_'s codec or per_tensor_; null: fp32
  std::string spec_;        // reserved: a new spec (Moniqua's theta) allocates nothing
  std::vector<std::size_t> tensor_sizes_;
  internal::Scratch<uint8_t> encoded_;
  internal::Scratch<float> own_recovered_;
  internal::Scratch<float> recovered_;  // neighbours x d
  internal::Scratch<uint8_t> received_;  // neighbours x the largest payload
  internal::Scratch<std::size_t> received_sizes_;
  internal::Scratch<uint8_t> got_;  // neighbours: heard this step
  internal::Scratch<MoniquaNeighbour> mix_;
  // Replica gossip (ChocoSpec): gamma (0: not in use), x^_i, the neighbours'
  // x^_j (one per neighbour, in the context's order, d floats each), x_i -
  // x^_i, and the members the copies belong to.
  float choco_gamma_ = 0;
  internal::Scratch<float> choco_public_;
  internal::Scratch<float> choco_replicas_;
  internal::Scratch<float> choco_diff_;
  internal::Scratch<uint32_t> choco_members_;
  GossipDefense defense_;
  // D2 (GossipAlgorithm::kD2): the sum of the mixing corrections, the half
  // step sent and mixed, and the members c belongs to.
  GossipAlgorithm algorithm_ = GossipAlgorithm::kDpsgd;
  float d2_gain_ = 1.0f;
  float d2_leak_ = 0.0f;
  internal::Scratch<float> d2_correction_;
  internal::Scratch<float> d2_half_;
  internal::Scratch<uint32_t> d2_members_;
  std::function<void(uint64_t, float*, std::size_t)> send_transform_;
  internal::Scratch<float> sent_;     // send_transform_'s copy
  std::vector<const float*> models_;  // the defense's set: own, then the neighbours heard
  std::vector<double> weights_;
  internal::Scratch<float> combined_;
  uint64_t total_bytes_sent_ = 0;
};

// After Form(): every member passes the step it would run next and gets the
// largest of them (the same on every member), so peers that re-formed after
// a failure resume at one step (a peer that finished the failed step before
// the failure is one step ahead of those that did not). Flooded over the
// gossip links (ring or graph), members - 1 rounds. Every member calls it
// right after the same Form(), before any other collective.
Result<uint64_t> AgreeStep(CollectiveContext& context, uint64_t step);

}  // namespace peer
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_COLLECTIVES_H_
