// The peer trainer: the training loop of a peer that trains together with
// others without an aggregator, over an injected collective context
// (collective_context.h: TCP from peer.h, or the in-process loopback).
//
// Every step it computes the gradient of one batch of this peer's share of
// the data, then, by PeerTrainerOptions::reduce:
//   kDense, kCodec  all-reduces the gradients (fp32, or a codec on every hop)
//                   and applies their mean: every peer holds the same model;
//   kCompressed     the same with every peer's gradient compressed once
//                   (AllGatherAllReduce: quantizers per tensor, sparsifiers,
//                   error feedback by the codec's `ef` key);
//   kIwp            accumulates the update (or gradient) in an IWP accumulator
//                   and all-reduces the leader's index set of it (IWP-sparse,
//                   with momentum correction by default);
//   kGossip         one D-PSGD step with the neighbours (fp32, Moniqua with
//                   theta following the learning rate, or CHOCO replicas);
//   kLocal          plain SGD alone (a baseline; nothing is sent).
// With `repair`, a step that fails because a peer failed drops that peer,
// re-forms the group over the survivors (Form) and resumes: ring modes agree
// on the step and take the model (and momentum) of a survivor that finished
// it (Resync: two dense all-reduces); gossip agrees on the step (AgreeStep)
// and repeats it or takes its own SGD step alone to catch up.
//
// An "epoch" is (data count / peers) / batch steps on every peer, whatever
// the size of its share (a smaller non-IID share is passed over more than
// once, each pass in a fresh order); every peer's order depends on (seed,
// rank, epoch) only.
//
// The trainer opens no file, dials nothing and starts no thread: the
// application owns the data, the model and the context, and hears about
// progress through PeerTrainerObserver (evaluations, failures, re-formations).
//
// Memory (TFLM's arena, zstd's size query then init, as the device client
// and the aggregator): RequiredBytes measures one block and CreateIn places
// the trainer in the caller's memory (any alignment); Create does the same on
// one heap block. The block holds what the trainer keeps across steps: the
// optimizer's velocity, the IWP accumulator (accumulator, velocity, threshold
// samples), the batch, the epoch's example order, the saved gradient of a
// ring step, the DP noise, the repair's step and model vectors, the
// collectives' objects (PeerGroup) and the memory of the collectives it
// calls (collectives.h, "Memory": codecs in place, encode buffers, the
// neighbours' models, CHOCO replicas, the compressed all-gather's payloads
// and error-feedback residual). Moniqua's theta is a value of the trainer;
// its codec spec is a string reserved at creation.
//
// Ownership: the model, the data and the context are the caller's and must
// outlive the trainer (and the block, for CreateIn).
// Allocation besides the block: creation copies the options and the
// collectives' shapes, reserves the gossip codec spec, the IWP index vectors
// (d each: the collective's interface takes vectors), the report's per-step
// wrap counts and the per-tensor bookkeeping, and grows the model's
// workspace for the batch; a step allocates nothing, the collectives'
// included (over the loopback binding, every thread counted:
// runtime_peer_arena_test; docs/design/peer.md, "Memory"); a re-formation
// builds the survivor list.
// Thread-safety: one thread (the context's).
#ifndef FEDRT_RUNTIME_PEER_TRAINER_H_
#define FEDRT_RUNTIME_PEER_TRAINER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/codecs/iwp.h"
#include "fedrt/platform/status.h"
#include "fedrt/runtime/collective_context.h"
#include "fedrt/runtime/collectives.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/runtime/privacy.h"
#include "fedrt/runtime/robust_aggregation.h"

namespace fedrt {
namespace peer {

class PeerGroup;
struct GossipStats;

// The training data as the caller holds it: the whole training set (every
// peer's share, dataset.h's DataView, caller memory), of which this peer
// trains on the examples `share` lists.
struct PeerData {
  DataView set;
  const uint32_t* share = nullptr;  // indices below set.count
  std::size_t share_size = 0;
};

enum class PeerReduce : uint8_t { kDense, kCodec, kCompressed, kIwp, kGossip, kLocal };

struct PeerTrainerOptions {
  PeerReduce reduce = PeerReduce::kDense;
  // kCodec: the codec of every hop (e.g. "fp16"). kCompressed: the
  // gradients' codec (e.g. "dqsg:s=2", "topk:k=0.01"). kGossip: the models' codec
  // (empty: fp32; "moniqua:bits=1,theta=0.5"; "choco:gamma=G+CODEC").
  // Another reduce takes none.
  std::string codec;
  // kGossip with a moniqua codec that names no theta: theta from Moniqua's
  // bound on the neighbours' distance, theta = moniqua_c * lr * G * t_mix
  // (MoniquaTheta), with G the largest |gradient coordinate| any peer saw
  // since the last refresh and t_mix the gossip matrix's mixing time
  // (MixingTime of its SecondLargestEigenvalueModulus). Every
  // moniqua_refresh_steps steps (and at the first) the peers agree on theta
  // (max-flooding, AgreeStep), doubling it for every refresh after which a
  // peer saw a wrap among the moniqua_check coordinates each payload carries
  // at full precision (check=N: exact), and halving it again after four
  // quiet refreshes, down to the bound. moniqua_theta_per_lr > 0 replaces
  // the bound by theta = that times the step's learning rate. At 1 bit the
  // bound is not used (its theta is tens of times the neighbours' distance
  // and 1-bit recovery errors are theta): a 1-bit spec without theta, with
  // no moniqua_theta_per_lr, gets round=dither, theta = lr and the
  // consensus step gamma = 1 - lambda (lambda: the gossip matrix's second
  // largest eigenvalue modulus), at most 0.4 / (1 - lambda_min) (lambda_min:
  // its smallest eigenvalue), each unless the spec names it.
  double moniqua_theta_per_lr = 0;
  double moniqua_c = 2.0;
  uint32_t moniqua_refresh_steps = 16;
  uint32_t moniqua_check = 32;
  // The optimizer: learning-rate schedule (a cosine one without total_steps
  // runs over all epochs) and momentum.
  SgdOptions sgd;
  int epochs = 1;
  int batch = 32;
  uint64_t seed = 1;            // batch order (with the rank) and the IWP leader
  uint32_t max_steps = 0;       // stop after this many steps; 0: whole epochs
  bool repair = false;          // re-form without a failed peer and go on
  int evals_per_epoch = 1;      // PeerProgress reports per epoch, the last at its end
  uint32_t chunk_floats = 0;    // ring all-reduce pipelining (RingAllReduce; 0: automatic)

  // Robust gossip (kGossip only; collectives.h, GossipDefense): a rule over
  // the own and the neighbours' models and a clip of each neighbour's
  // deviation. Any other reduce refuses a rule other than mean and a clip:
  // the ring all-reduces sum, a peer sees partial sums and never another
  // peer's gradient, so no rule has anything to judge.
  GossipDefense gossip_defense;
  // kGossip: D-PSGD (the default) or D2 (collectives.h, GossipAlgorithm).
  // Any other reduce, a replica (CHOCO) codec or a defense refuses kD2.
  // D2's correction gain in (0, 1] and leak in [0, 1) (0 and a negative
  // leak: unset): unset, the paper's D2 (gain 1, leak 0), except with
  // Moniqua's 1-bit rule (a 1-bit spec without theta), which takes gain
  // 0.05 and leak 0.005 (docs/design/peer.md, "Moniqua on D2").
  GossipAlgorithm gossip_algorithm = GossipAlgorithm::kDpsgd;
  double d2_gain = 0;
  double d2_leak = -1;
  // Tests of the defense (kGossip): what this peer sends in place of its
  // model (Gossip::SetSendTransform). Empty: its model.
  std::function<void(uint64_t step, float* values, std::size_t d)> gossip_send_transform;
  // Local differential privacy (dp.noise_multiplier > 0; every reduce but
  // kLocal): every step this peer clips its batch gradient to L2 norm
  // dp.clip and adds Gaussian noise of std dp.noise_multiplier * dp.clip
  // before anything leaves it, so whatever it sends is post-processing of
  // that release. Accounting: one Gaussian mechanism per step (q = 1; the
  // peer takes part in every step) with sensitivity 2 * clip (any change of
  // the peer's data moves a clipped gradient by at most that), composed in
  // RDP (privacy.h); PeerProgress::dp_epsilon at dp.delta. With
  // dp.epsilon_budget the training ends before the step that would pass it
  // (every peer computes the same accountant, so all stop at that step).
  // dp.noise_seed must not be 0: the application draws it from its random
  // source (each peer its own; the rank is mixed in as well).
  DpOptions dp;
  // IWP (codecs/README.md; defaults in runtime/README.md).
  struct Iwp {
    float density = 1.0f / 64;     // share of coordinates per step
    // Momentum lives in the accumulator (DGC) and the step is plain SGD;
    // else momentum SGD on the mean.
    bool momentum_correction = true;
    // true: the accumulator holds lr * (velocity or gradient) and the reduced
    // mean is applied at rate 1; false: it holds raw gradients, applied at
    // the learning rate of the step that sends them.
    bool accumulate_updates = true;
    bool per_tensor = true;        // one threshold per tensor
    // The paper's method by default (docs/design/peer.md, IWP): each
    // tensor's threshold from the dispersion of its importances, the
    // probabilistic update of low-importance coordinates, a warm-up over
    // the first epoch (density falling geometrically from 4 x density) and
    // local gradient clipping (L2 norm 5). Within 0.36 points of the dense
    // ring at 41x on LeNet-300-100. kQuantile (a fixed share of every
    // tensor) stays as an option; dense_below (small tensors whole) is an
    // extra beyond the paper, off unless set.
    IwpThreshold threshold = IwpThreshold::kDispersion;
    bool probabilistic = true;
    float eps = 1e-8f;             // importance = |a| / (|w| + eps)
    uint64_t dense_below = 0;      // tensors smaller than this are sent whole (0: none)
    int warmup_steps = -1;         // -1: one epoch; 0: none
    float warmup_density = 0;      // 0: 4 x density (at most 1)
    bool warmup_exponential = true;  // density falls geometrically (else constant)
    float clip = 5;                // local gradient clipping to this L2 norm; 0: off
  } iwp;
};

// Where training stands, at each of the evals_per_epoch points of an epoch.
struct PeerProgress {
  int epoch = 0;                    // 0-based
  std::size_t steps_done = 0;       // steps of this epoch so far
  std::size_t steps_per_epoch = 0;
  uint32_t step = 0;                // steps run so far, all epochs
  bool epoch_end = false;
  std::size_t members = 0;          // peers in the group now
  double train_loss = 0;            // mean batch loss since the last report (0: no step)
  uint64_t total_bytes_sent = 0;    // payload bytes of every collective so far
  // What a dense fp32 exchange of the same steps would have sent: the ring's
  // 2 (p - 1) / p of the model per all-reduce, gossip's model once per neighbour.
  uint64_t fp32_bytes = 0;
  uint64_t wraps = 0;               // gossip: Moniqua wrap counts since the last report (GossipStats)
  double moniqua_theta = 0;         // gossip, theta from Moniqua's bound: the one in use (0: another rule)
  std::vector<uint64_t> step_wraps; //   and per step
  double dp_epsilon = -1;           // local DP: epsilon spent so far at dp.delta (-1: DP off)
  // At the epoch's end: its mean batch loss, wrap count and wall time.
  double epoch_loss = 0;
  uint64_t epoch_wraps = 0;
  double epoch_seconds = 0;
};

// What the trainer reports. Callbacks run on the trainer's thread.
// Whether `codec` can run the compressed ring (PeerReduce::kCompressed) with
// SGD momentum `momentum`: it must exist and decode without side information
// (a ring member has none of another's gradient), and a random sparsifier
// (randk, rtopk) takes rTop-k's plain SGD step, momentum 0. PeerTrainer::Create
// checks it; the command line checks it before anything is read or dialled.
Status CheckCompressedRingCodec(const std::string& codec, double momentum);
// Whether `codec` can run gossip (PeerReduce::kGossip; empty: fp32): it
// must exist, CHOCO's wrapper must parse and its inner codec decode without
// side information (replicas are mixed from decoded differences); a Moniqua
// spec without theta gets the trainer's, so any theta stands in. The error
// names the spec. PeerTrainer::RequiredBytes, Create and CreateIn check it
// (so the C API's fedrt_peer_size and fedrt_peer_init refuse it up front).
Status CheckGossipCodec(const std::string& codec);

class PeerTrainerObserver {
 public:
  virtual ~PeerTrainerObserver() = default;
  // An evaluation point (the application evaluates the model, logs); an
  // error ends Run with it.
  virtual Status OnProgress(const PeerProgress& progress) {
    (void)progress;
    return Status::Ok();
  }
  // A collective of step `step` failed (repaired next, if repair is on and a
  // peer failed; else Run returns `status`).
  virtual void OnStepFailed(uint64_t step, const Status& status) {
    (void)step;
    (void)status;
  }
  virtual void OnReforming(int failed_rank, std::size_t survivors) {
    (void)failed_rank;
    (void)survivors;
  }
  virtual void OnReformed(std::size_t members) { (void)members; }
  // After a re-formation: the group resumes at `step`.
  virtual void OnResumed(uint64_t step) { (void)step; }
  // Gossip: one step done, with its Moniqua wrap count.
  virtual void OnGossipStep(uint64_t step, uint64_t wraps) {
    (void)step;
    (void)wraps;
  }
  // Before each step: `steps_done` of the epoch's `steps_per_epoch` are done
  // (a progress line; called every step, so keep it cheap).
  virtual void OnStep(int epoch, std::size_t steps_done, std::size_t steps_per_epoch) {
    (void)epoch;
    (void)steps_done;
    (void)steps_per_epoch;
  }
};

class PeerTrainer {
 public:
  // kInvalidArgument for options that do not fit (a codec for a reduce that
  // takes none, a model that does not fit the data, an empty share, ...).
  // The context must be formed (Form) already; its members now set the
  // length of an epoch.
  static Result<std::unique_ptr<PeerTrainer>> Create(Model& model, const PeerData& data, CollectiveContext& context,
                                                     const PeerTrainerOptions& options);
  // The bytes CreateIn needs (at any alignment), with Create's errors.
  static Result<std::size_t> RequiredBytes(const Model& model, const PeerData& data, const CollectiveContext& context,
                                           const PeerTrainerOptions& options);
  // Places the trainer in memory[0 .. size) (kOutOfRange when size is below
  // RequiredBytes), which must stay valid and untouched until Destroy.
  static Result<PeerTrainer*> CreateIn(void* memory, std::size_t size, Model& model, const PeerData& data,
                                       CollectiveContext& context, const PeerTrainerOptions& options);
  // Ends a trainer from CreateIn (nullptr is a no-op); frees nothing.
  static void Destroy(PeerTrainer* trainer);
  ~PeerTrainer();
  PeerTrainer(const PeerTrainer&) = delete;
  PeerTrainer& operator=(const PeerTrainer&) = delete;

  // Trains all epochs (or max_steps). Returns the first error that is not
  // repaired (a step that failed without `repair`, a failed re-formation, an
  // observer's error). Leaves the context formed: Close() it when done.
  Status Run(PeerTrainerObserver& observer);
  Status Run(const std::function<Status(const PeerProgress&)>& on_progress);

  std::size_t steps_per_epoch() const { return steps_per_epoch_; }
  // The gossip codec of the first step (with a derived theta).
  const std::string& gossip_codec() const { return gossip_codec_; }
  // Moniqua at 1 bit without theta: the runtime's rule (PeerTrainerOptions::moniqua_theta_per_lr).
  bool moniqua_one_bit_rule() const { return one_bit_rule_; }
  // D2's correction gain and leak in use (PeerTrainerOptions::d2_gain).
  float d2_gain() const { return d2_gain_; }
  float d2_leak() const { return d2_leak_; }
  // Gossip with theta from Moniqua's bound: the gossip matrix's mixing time
  // (0: another rule; the codec then names its theta from the start).
  uint32_t moniqua_mixing_time() const { return bound_theta_ ? mixing_time_ : 0; }
  const Sgd& optimizer() const { return sgd_; }
  uint64_t total_bytes_sent() const;

 private:
  struct Plan;    // what the inputs make of a trainer (sizes, optimizer and IWP options)
  struct Layout;  // where the block's pieces lie
  static Result<Plan> MakePlan(const Model& model, const PeerData& data, const CollectiveContext& context,
                               const PeerTrainerOptions& options);
  static Status PlanCollectives(const Model& model, const CollectiveContext& context,
                                const PeerTrainerOptions& options, Plan* plan);
  static Layout Carve(unsigned char* base, const Plan& plan, bool with_trainer);
  Status BindCollectives(const Plan& plan, const Layout& layout);
  static Result<PeerTrainer*> Place(const Plan& plan, const Layout& layout, std::unique_ptr<unsigned char[]> block,
                                    Model& model, const PeerData& data, CollectiveContext& context,
                                    const PeerTrainerOptions& options);
  PeerTrainer(Model& model, const PeerData& data, CollectiveContext& context, const PeerTrainerOptions& options,
              Sgd sgd, const Plan& plan, const Layout& layout, std::unique_ptr<unsigned char[]> block);
  // The gossip codec for a step at learning rate `lr`, into gossip_codec_.
  void SetGossipCodec(double lr);
  // Moniqua's bound: agrees on the next theta (RefreshTheta) when due, then
  // gossips.
  Status MoniquaGossipStep(float* x, const float* g, std::size_t d, float lr, uint32_t step, GossipStats* gossip);
  Status RefreshTheta(double lr);
  void CountFp32Step();
  Status Reform(PeerTrainerObserver& observer);
  Status Resync(uint32_t* step, bool* behind);
  Status Report(PeerTrainerObserver& observer, int epoch, std::size_t steps_done, uint32_t step, bool epoch_end,
                double epoch_loss, uint64_t epoch_wraps, double epoch_seconds);

  Model& model_;
  const PeerData data_;
  CollectiveContext& context_;
  const PeerTrainerOptions options_;
  const bool derived_theta_;
  const bool one_bit_rule_;      // Moniqua at 1 bit, theta not named: dither, theta = lr, gamma = 1 - lambda (capped)
  const float d2_gain_;          // D2's correction gain and leak (the 1-bit rule's unless named)
  const float d2_leak_;
  const bool bound_theta_;       // derived_theta_ from Moniqua's bound (not per lr, not 1 bit)
  const double theta_per_lr_;    // derived_theta_ and not bound_theta_: theta = this * lr
  std::string one_bit_spec_;     // one_bit_rule_: the spec with the rule's round and gamma
  uint32_t mixing_time_ = 1;     // t_mix of the gossip matrix (bound_theta_)
  float grad_bound_ = 0;         // max |g_i| since the last refresh
  uint64_t wraps_since_refresh_ = 0;
  int widen_ = 0;                // theta doublings after detected wraps
  int quiet_refreshes_ = 0;      // refreshes without a wrap since the last change of widen_
  bool theta_agreed_ = false;    // a refresh happened since Run started (or the last re-formation)
  double theta_ = 0;             // the agreed theta
  Sgd sgd_;
  LrSchedule schedule_;  // the learning rate of IWP updates (the optimizer's is 1 then)
  const std::size_t steps_per_epoch_;
  const std::size_t peer_count_;
  // In the block (Layout): the collectives, the IWP accumulator (null but
  // for kIwp) and the arrays below.
  PeerGroup* group_ = nullptr;
  IwpAccumulator* accumulator_ = nullptr;
  std::string gossip_codec_;
  float* features_ = nullptr;        // batch x example_size
  uint8_t* labels_ = nullptr;        // batch
  uint32_t* batch_indices_ = nullptr;
  uint32_t* order_ = nullptr;        // an epoch's example order: steps x batch, plus one pass
  float* saved_ = nullptr;           // ring modes: the gradient before a failed all-reduce
  double* dp_noise_ = nullptr;       // local DP: one step's noise
  float* resync_steps_ = nullptr;    // repair of ring modes: peer_count floats
  float* resync_state_ = nullptr;    //   and the model and momentum
  std::vector<uint32_t> indices_;    // IWP: the step's index set and sums (IwpAllReduce's vectors)
  std::vector<float> sums_;
  double fp32_bytes_ = 0;
  double interval_loss_ = 0;
  std::size_t interval_steps_ = 0;
  uint64_t interval_wraps_ = 0;
  std::vector<uint64_t> interval_step_wraps_;
  PeerProgress progress_;         // the report, reused (its step_wraps reserved at creation)
  RdpAccountant accountant_;      // local DP
  std::unique_ptr<unsigned char[]> block_;  // Create's heap block; null for CreateIn
};

}  // namespace peer
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_PEER_TRAINER_H_
