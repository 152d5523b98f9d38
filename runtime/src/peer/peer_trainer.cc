// The peer training loop (peer_trainer.h).
#include "fedrt/runtime/peer_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "fedrt/codecs/codec_spec.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/peer.h"
#include "fedrt/runtime/privacy.h"
#include "fedrt/runtime/robust_aggregation.h"
#include "fedrt/runtime/trainer.h"
#include "common/block_carver.h"

namespace fedrt {
namespace peer {
namespace {

bool TakesCodec(PeerReduce reduce) {
  return reduce == PeerReduce::kCodec || reduce == PeerReduce::kCompressed || reduce == PeerReduce::kGossip;
}

bool RingReduce(PeerReduce reduce) {
  return reduce == PeerReduce::kDense || reduce == PeerReduce::kCodec || reduce == PeerReduce::kCompressed;
}

// Room for ",theta=<%.9g>,check=<uint32>" after the options' codec spec.
constexpr std::size_t kThetaSpecBytes = 64;

// The consensus step size a moniqua spec names (`gamma`, default 1); an
// unreadable spec gives 1 here and its error when the codec is made.
double MoniquaConsensusStep(const std::string& spec) {
  auto parsed = CodecSpec::Parse(spec);
  if (!parsed.ok()) return 1.0;
  auto gamma = parsed->GetDouble("gamma", 1.0, 1e-6, 1.0);
  return gamma.ok() ? *gamma : 1.0;
}

// Moniqua at 1 bit with no theta named and no --moniqua-theta-per-lr: the
// bound's theta is far above the neighbours' distance (about 1.5 at lr 0.05
// on a ring of 8, where 0.03..0.1 work), and at 1 bit nearest rounding's
// error reaches theta and does not average out. The runtime's rule instead
// (docs/design/peer.md, "Moniqua at 1 bit"): round=dither, theta = lr
// (kOneBitThetaPerLr) and the consensus step gamma = 1 - lambda of the
// gossip matrix, at most kOneBitFastMix / (1 - lambda_min), each unless the
// spec names it.
constexpr double kOneBitThetaPerLr = 1.0;
// The recovery errors (uniform on [-theta, theta] at 1 bit) enter the mixing
// as gamma (W - I) e every step; the neighbours' distance they keep up is set
// by W's most negative mode, gamma (1 - lambda_min): 0.4 keeps it near 0.35
// theta (RMS), with about 1e-4 of the recoveries wrapping (measured on the
// ring of 8 at gamma 0.3). gamma = 1 - lambda alone gave 0.5 on the 2 x 4
// torus (gamma (1 - lambda_min) = 0.75) and ended 8 points below fp32 gossip.
constexpr double kOneBitFastMix = 0.4;
// D2 under the 1-bit rule (docs/design/peer.md, "Moniqua on D2"): the gain
// of the sum of corrections and its leak. The paper's gain 1 diverged within
// 52 steps (its c keeps every step's recovery errors, the neighbours drift
// to the wrap boundary); 0.1 ended 4 points below 0.05 after 3 epochs with
// 30 times the wraps, 0.03 removed the drift too slowly (2.5 points below
// fp32 gossip on two of three seeds). Without a leak the wraps' share of c
// grew the model's norm from 29 to 36 in 6 epochs; 0.005 kept it at 30.
constexpr double kD2OneBitGain = 0.05;
constexpr double kD2OneBitLeak = 0.005;

bool MoniquaOneBitRule(const PeerTrainerOptions& o) {
  if (o.reduce != PeerReduce::kGossip || o.codec.rfind("moniqua", 0) != 0) return false;
  if (o.codec.find("theta=") != std::string::npos || o.moniqua_theta_per_lr > 0) return false;
  auto parsed = CodecSpec::Parse(o.codec);
  if (!parsed.ok()) return false;
  auto bits = parsed->GetInt("bits", 1, 1, 8);
  return bits.ok() && *bits == 1;
}

}  // namespace

Status CheckCompressedRingCodec(const std::string& codec, double momentum) {
  auto made = MakeCodec(codec);
  if (!made.ok()) return made.status();
  if ((*made)->needs_side_info()) {
    return InvalidArgument("codec '" + codec + "' needs side information: it does not compose with ring reduction");
  }
  // rTop-k's step is plain SGD on the mean of the error-fed sparse
  // gradients. A random pick sends a coordinate about every r/k steps with
  // its residual in one lump, and momentum on the mean multiplies the lump
  // by up to 1 / (1 - m): on LeNet-300-100 at k = 1% and momentum 0.9,
  // rtopk ended 20 points below the dense ring and randk diverged; at
  // momentum 0 both end within a point of it (docs/design/peer.md).
  const CodecId id = (*made)->id();
  if ((id == CodecId::kRandK || id == CodecId::kRTopK) && momentum > 0) {
    return InvalidArgument("codec '" + codec +
                           "' picks coordinates at random: on the ring it takes rTop-k's plain SGD step, so it needs "
                           "--momentum 0 (momentum multiplies the lumps of residual a random pick releases)");
  }
  return Status::Ok();
}

Status CheckGossipCodec(const std::string& codec) {
  if (codec.empty()) return Status::Ok();
  auto refused = [&codec](const Status& status) {
    return Status(status.code(), "gossip codec '" + codec + "': " + status.message());
  };
  std::string inner = codec;
  const bool choco = IsChocoSpec(codec);
  if (choco) {
    Result<ChocoSpec> parsed = ParseChocoSpec(codec);
    if (!parsed.ok()) return refused(parsed.status());
    inner = parsed->codec;
  }
  // The theta the trainer derives (its bound, or per lr) is not known yet; any stands in.
  if (inner.rfind("moniqua", 0) == 0 && inner.find("theta=") == std::string::npos) {
    inner += inner.find(':') == std::string::npos ? ":theta=1" : ",theta=1";
  }
  Result<std::unique_ptr<Codec>> made = MakeCodec(inner);
  if (!made.ok()) return refused(made.status());
  if (choco && (*made)->needs_side_info()) {
    return refused(InvalidArgument("replica gossip needs a codec that decodes without side information"));
  }
  return Status::Ok();
}

// What the inputs make of a trainer, checked once: the sizes RequiredBytes,
// CreateIn and Create share.
struct PeerTrainer::Plan {
  std::size_t d = 0;
  std::size_t steps_per_epoch = 0;
  SgdOptions sgd_options;
  LrSchedule schedule;       // IWP updates' learning rate
  std::size_t sgd_floats = 0;
  bool iwp = false;
  IwpOptions iwp_options;
  std::size_t tensors = 1;   // IWP: thresholds per tensor
  std::size_t iwp_floats = 0;
  std::size_t batch = 0;
  std::size_t example_size = 0;
  std::size_t order = 0;     // uint32s of an epoch's order
  bool saved = false;        // ring modes keep the gradient of a step that may fail
  bool dp = false;
  bool resync = false;       // repair of the ring modes (IWP too)
  std::size_t peer_count = 0;
  // The collectives this trainer calls, their shapes and memory
  // (collectives.h, "Memory"; 0 bytes: not called).
  CollectiveShape dense_shape, compressed_shape, gathered_shape, iwp_shape, gossip_shape;
  std::size_t dense_bytes = 0, compressed_bytes = 0, gathered_bytes = 0, iwp_bytes = 0, gossip_bytes = 0;
};

// Where the block's pieces lie (null base: measuring).
struct PeerTrainer::Layout {
  PeerTrainer* trainer = nullptr;  // CreateIn only
  PeerGroup* group = nullptr;
  float* velocity = nullptr;
  IwpAccumulator* accumulator = nullptr;
  float* iwp_memory = nullptr;
  float* features = nullptr;
  uint8_t* labels = nullptr;
  uint32_t* batch_indices = nullptr;
  uint32_t* order = nullptr;
  float* saved = nullptr;
  double* dp_noise = nullptr;
  float* resync_steps = nullptr;
  float* resync_state = nullptr;
  unsigned char* dense_memory = nullptr;
  unsigned char* compressed_memory = nullptr;
  unsigned char* gathered_memory = nullptr;
  unsigned char* iwp_memory_ring = nullptr;  // IwpAllReduce's (iwp_memory: the accumulator's)
  unsigned char* gossip_memory = nullptr;
  std::size_t used = 0;
};

Result<PeerTrainer::Plan> PeerTrainer::MakePlan(const Model& model, const PeerData& data,
                                                const CollectiveContext& context,
                                                const PeerTrainerOptions& options) {
  FEDRT_RETURN_IF_ERROR(data.set.Validate());
  if (data.share == nullptr || data.share_size == 0) return InvalidArgument("this peer's share of the data is empty");
  for (std::size_t i = 0; i < data.share_size; ++i) {
    if (data.share[i] >= data.set.count) {
      return InvalidArgument("example " + std::to_string(data.share[i]) + " of this peer's share is not in a data set of " +
                             std::to_string(data.set.count));
    }
  }
  if (model.input_size() != data.set.example_size) {
    return InvalidArgument("the model takes " + std::to_string(model.input_size()) + " inputs, the data has " +
                           std::to_string(data.set.example_size) + " features per example");
  }
  FEDRT_RETURN_IF_ERROR(CheckClassCount(model, data.set.num_classes, "the data"));
  if (options.epochs < 1 || options.batch < 1 || options.evals_per_epoch < 1) {
    return InvalidArgument("epochs, batch and evaluations per epoch must be positive");
  }
  if ((options.reduce == PeerReduce::kCodec || options.reduce == PeerReduce::kCompressed) && options.codec.empty()) {
    return InvalidArgument("a codec all-reduce needs a codec (e.g. fp16, dqsg:s=2)");
  }
  if (options.reduce == PeerReduce::kCompressed) {
    // Refused here, not at the first step.
    FEDRT_RETURN_IF_ERROR(CheckCompressedRingCodec(options.codec, options.sgd.momentum));
  }
  if (options.reduce == PeerReduce::kGossip) FEDRT_RETURN_IF_ERROR(CheckGossipCodec(options.codec));
  if (!TakesCodec(options.reduce) && !options.codec.empty()) {
    return InvalidArgument("codec '" + options.codec + "' does not apply: only gossip and the codec all-reduces take one");
  }
  const bool defended = options.gossip_defense.clip != 0 || options.gossip_defense.rule.kind != AggregationKind::kMean;
  if ((defended || options.gossip_send_transform) && options.reduce != PeerReduce::kGossip) {
    return InvalidArgument(
        "robust rules and clipping of the neighbours' models apply to gossip only: the ring all-reduces sum, so no "
        "peer sees another's gradient to judge it");
  }
  if (options.gossip_algorithm != GossipAlgorithm::kD2 && (options.d2_gain != 0 || options.d2_leak >= 0)) {
    return InvalidArgument("a correction gain and leak apply to the D2 gossip algorithm only");
  }
  if (options.gossip_algorithm == GossipAlgorithm::kD2) {
    if (!(options.d2_gain == 0 || (options.d2_gain > 0 && options.d2_gain <= 1)) || !(options.d2_leak < 1)) {
      return InvalidArgument("D2's correction gain must be in (0, 1] and its leak in [0, 1)");
    }
    if (options.reduce != PeerReduce::kGossip) {
      return InvalidArgument("the D2 gossip algorithm applies to gossip only: the other reduces mix no models");
    }
    if (IsChocoSpec(options.codec)) {
      return InvalidArgument("D2 gossip mixes models: '" + options.codec + "' sends replica differences");
    }
    if (defended) {
      return InvalidArgument("D2 gossip takes no robust rule or clipping: its sum of corrections would keep what a "
                             "rule drops");
    }
  }
  if (options.dp.noise_multiplier > 0) {
    FEDRT_RETURN_IF_ERROR(ValidateDpOptions(options.dp));
    if (options.reduce == PeerReduce::kLocal) {
      return InvalidArgument("local DP protects what a peer sends; --reduce local sends nothing");
    }
    if (options.dp.noise_seed == 0) return InvalidArgument("local DP needs a noise seed that is not 0");
  } else if (options.dp.noise_multiplier < 0 || options.dp.clip != 0 || options.dp.epsilon_budget != 0 ||
             options.dp.noise_seed != 0) {
    return InvalidArgument("the DP clip, budget and noise seed apply only with a DP noise multiplier above 0");
  }
  if (context.members().empty()) return Status(StatusCode::kFailedPrecondition, "the context is not formed yet");
  if (options.gossip_algorithm == GossipAlgorithm::kD2) {
    // D2 is stable only while the mixing matrix I + gamma (W - I) keeps its
    // smallest eigenvalue at -1/3 or above (Tang et al. 2018): fp32 D2 on
    // the 2 x 4 torus (-0.5) ended at 10% after one epoch. The 1-bit rule's
    // gamma keeps it at 0.6 or above. Even rings sit at -1/3 exactly with
    // gamma 1 (stable in our runs; docs/design/peer.md).
    const uint32_t n = static_cast<uint32_t>(context.members().size());
    const std::vector<double> eigenvalues =
        SymmetricEigenvalues(MetropolisWeights(GraphNeighbours(context.graph(), n)), n);
    const bool moniqua = options.codec.rfind("moniqua", 0) == 0;
    const bool rule_gamma = MoniquaOneBitRule(options) && options.codec.find("gamma=") == std::string::npos;
    const double gamma = moniqua ? MoniquaConsensusStep(options.codec) : 1.0;
    const double smallest = eigenvalues.empty() ? 1.0 : 1.0 - gamma * (1.0 - eigenvalues.front());
    if (!rule_gamma && smallest < -1.0 / 3.0 - 1e-9) {
      char text[200];
      std::snprintf(text, sizeof text,
                    "D2 gossip needs the mixing matrix's smallest eigenvalue at -1/3 or above; this graph's is %.3g "
                    "at gamma %.3g (a moniqua spec's gamma scales it)",
                    smallest, gamma);
      return InvalidArgument(text);
    }
  }
  Plan plan;
  const std::size_t n = context.members().size();
  plan.batch = static_cast<std::size_t>(options.batch);
  plan.steps_per_epoch = (data.set.count / n) / plan.batch;
  plan.d = model.parameter_count();
  plan.example_size = data.set.example_size;
  plan.peer_count = context.peer_count();

  // IWP accumulating updates: the schedule scales what goes into the
  // accumulator, and the optimizer applies the reduced mean at rate 1; with
  // momentum correction the momentum lives in the accumulator.
  plan.iwp = options.reduce == PeerReduce::kIwp;
  const bool corrected = plan.iwp && options.iwp.momentum_correction;
  plan.sgd_options = options.sgd;
  if (plan.sgd_options.schedule.kind == LrScheduleKind::kCosine && plan.sgd_options.schedule.total_steps == 0) {
    plan.sgd_options.schedule.total_steps = plan.steps_per_epoch * static_cast<std::size_t>(options.epochs);
  }
  plan.schedule = plan.sgd_options.schedule;
  if (plan.iwp && options.iwp.accumulate_updates) {
    plan.sgd_options.schedule = LrSchedule();
    plan.sgd_options.schedule.base_lr = 1.0;
  }
  plan.sgd_options.momentum = corrected ? 0.0f : options.sgd.momentum;
  // The options checked on a one-parameter optimizer over a local float.
  float probe = 0;
  if (Result<Sgd> checked = Sgd::CreateInBuffer(plan.sgd_options, 1, FloatSpan{&probe, 1}); !checked.ok()) {
    return checked.status();
  }
  plan.sgd_floats = Sgd::StateFloats(plan.sgd_options, plan.d);
  if (plan.iwp) {
    IwpOptions& io = plan.iwp_options;
    io.target_fraction = options.iwp.density;
    io.momentum = corrected ? options.sgd.momentum : 0.0f;
    io.dense_below = static_cast<std::size_t>(options.iwp.dense_below);
    io.warmup_steps = options.iwp.warmup_steps < 0 ? static_cast<uint32_t>(plan.steps_per_epoch)
                                                   : static_cast<uint32_t>(options.iwp.warmup_steps);
    io.warmup_fraction =
        options.iwp.warmup_density > 0 ? options.iwp.warmup_density : std::min(1.0f, 4 * options.iwp.density);
    io.warmup_exponential = options.iwp.warmup_exponential;
    io.clip_norm = options.iwp.clip;
    io.eps = options.iwp.eps;
    io.threshold = options.iwp.threshold;
    io.probabilistic = options.iwp.probabilistic;
    FEDRT_RETURN_IF_ERROR(IwpAccumulator::Check(plan.d, io));
    plan.tensors = options.iwp.per_tensor ? std::max<std::size_t>(1, model.tensors().size()) : 1;
    plan.iwp_floats = IwpAccumulator::MemoryFloats(plan.d, io, plan.tensors);
  }
  plan.order = plan.steps_per_epoch * plan.batch + data.share_size;
  plan.saved = RingReduce(options.reduce);
  plan.dp = options.dp.noise_multiplier > 0;
  plan.resync = options.repair && (plan.saved || plan.iwp);
  FEDRT_RETURN_IF_ERROR(PlanCollectives(model, context, options, &plan));
  return plan;
}

// The shapes and memory of the collectives the trainer calls: the dense
// ring for kDense, IWP's sums and the repair's resync (the step vector and
// the model with its momentum), the codec ring for kCodec, the all-gather
// over the model's tensor table for kCompressed, IWP's index
// broadcast, gossip with the codec the steps will run (Moniqua with the
// longest theta text: its footprint does not depend on theta, its payload
// bound on the spec's length).
Status PeerTrainer::PlanCollectives(const Model& model, const CollectiveContext& context,
                                    const PeerTrainerOptions& options, Plan* plan) {
  auto Take = [](Result<std::size_t> bytes, std::size_t* out) {
    if (bytes.ok()) *out = *bytes;
    return bytes.status();
  };
  CollectiveShape base;
  base.members = context.members().size();
  base.neighbours = context.neighbours().size();
  base.chunk_floats = options.chunk_floats;
  base.limits = context.limits();
  std::size_t dense_d = 0;
  if (options.reduce == PeerReduce::kDense || plan->iwp) dense_d = plan->d;
  if (plan->resync) dense_d = std::max({dense_d, plan->peer_count, plan->d + plan->sgd_floats});
  if (dense_d > 0) {
    plan->dense_shape = base;
    plan->dense_shape.d = dense_d;
    FEDRT_RETURN_IF_ERROR(Take(RingAllReduce::RequiredBytes(plan->dense_shape), &plan->dense_bytes));
  }
  if (options.reduce == PeerReduce::kCodec) {
    plan->compressed_shape = base;
    plan->compressed_shape.d = plan->d;
    plan->compressed_shape.codec = options.codec;
    FEDRT_RETURN_IF_ERROR(Take(CompressedRingAllReduce::RequiredBytes(plan->compressed_shape), &plan->compressed_bytes));
  }
  if (options.reduce == PeerReduce::kCompressed) {
    plan->gathered_shape = base;
    plan->gathered_shape.d = plan->d;
    plan->gathered_shape.tensor_sizes = ModelTensorSizes(model);
    plan->gathered_shape.codec = options.codec;
    FEDRT_RETURN_IF_ERROR(Take(AllGatherAllReduce::RequiredBytes(plan->gathered_shape), &plan->gathered_bytes));
  }
  if (plan->iwp) {
    plan->iwp_shape = base;
    plan->iwp_shape.d = plan->d;
    FEDRT_RETURN_IF_ERROR(Take(IwpAllReduce::RequiredBytes(plan->iwp_shape), &plan->iwp_bytes));
  }
  if (options.reduce == PeerReduce::kGossip) {
    plan->gossip_shape = base;
    plan->gossip_shape.d = plan->d;
    plan->gossip_shape.tensor_sizes = ModelTensorSizes(model);
    plan->gossip_shape.codec = options.codec;
    plan->gossip_shape.gossip_d2 = options.gossip_algorithm == GossipAlgorithm::kD2;
    if (options.codec.rfind("moniqua", 0) == 0 && options.codec.find("theta=") == std::string::npos) {
      const bool checked = !(options.moniqua_theta_per_lr > 0) && options.moniqua_check > 0 &&
                           options.codec.find("check=") == std::string::npos;
      // The longest theta a payload's spec can spell (9 significant digits
      // and a two-digit exponent): the payload bound grows with the spec.
      const char* theta = "theta=1.23456787e-25";
      plan->gossip_shape.codec += options.codec.find(':') == std::string::npos ? ":" : ",";
      plan->gossip_shape.codec += theta;
      if (checked) plan->gossip_shape.codec += ",check=" + std::to_string(options.moniqua_check);
    }
    FEDRT_RETURN_IF_ERROR(Take(Gossip::RequiredBytes(plan->gossip_shape), &plan->gossip_bytes));
  }
  return Status::Ok();
}

// Hands each collective its piece of the block.
Status PeerTrainer::BindCollectives(const Plan& plan, const Layout& layout) {
  if (plan.dense_bytes > 0) {
    FEDRT_RETURN_IF_ERROR(group_->dense().Bind(layout.dense_memory, plan.dense_bytes, plan.dense_shape));
  }
  if (plan.compressed_bytes > 0) {
    FEDRT_RETURN_IF_ERROR(
        group_->compressed().Bind(layout.compressed_memory, plan.compressed_bytes, plan.compressed_shape));
  }
  if (plan.gathered_bytes > 0) {
    FEDRT_RETURN_IF_ERROR(group_->gathered().Bind(layout.gathered_memory, plan.gathered_bytes, plan.gathered_shape));
  }
  if (plan.iwp_bytes > 0) {
    FEDRT_RETURN_IF_ERROR(group_->iwp().Bind(layout.iwp_memory_ring, plan.iwp_bytes, plan.iwp_shape));
  }
  if (plan.gossip_bytes > 0) {
    FEDRT_RETURN_IF_ERROR(group_->gossip().Bind(layout.gossip_memory, plan.gossip_bytes, plan.gossip_shape));
  }
  return Status::Ok();
}

PeerTrainer::Layout PeerTrainer::Carve(unsigned char* base, const Plan& plan, bool with_trainer) {
  Carver carve(base);
  Layout l;
  if (with_trainer) l.trainer = carve.Take<PeerTrainer>(1);
  l.group = carve.Take<PeerGroup>(1);
  l.velocity = carve.Take<float>(plan.sgd_floats, kBlockAlignment);
  if (plan.iwp) {
    l.accumulator = carve.Take<IwpAccumulator>(1);
    l.iwp_memory = carve.Take<float>(plan.iwp_floats, kBlockAlignment);
  }
  l.features = carve.Take<float>(plan.batch * plan.example_size, kBlockAlignment);
  l.labels = carve.Take<uint8_t>(plan.batch);
  l.batch_indices = carve.Take<uint32_t>(plan.batch);
  l.order = carve.Take<uint32_t>(plan.order);
  if (plan.saved) l.saved = carve.Take<float>(plan.d, kBlockAlignment);
  if (plan.dp) l.dp_noise = carve.Take<double>(plan.d, kBlockAlignment);
  if (plan.resync) {
    l.resync_steps = carve.Take<float>(plan.peer_count);
    l.resync_state = carve.Take<float>(plan.d + plan.sgd_floats, kBlockAlignment);
  }
  static_assert(kCollectiveAlignment <= kBlockAlignment, "the block aligns the collectives' memory");
  l.dense_memory = carve.Take<unsigned char>(plan.dense_bytes, kCollectiveAlignment);
  l.compressed_memory = carve.Take<unsigned char>(plan.compressed_bytes, kCollectiveAlignment);
  l.gathered_memory = carve.Take<unsigned char>(plan.gathered_bytes, kCollectiveAlignment);
  l.iwp_memory_ring = carve.Take<unsigned char>(plan.iwp_bytes, kCollectiveAlignment);
  l.gossip_memory = carve.Take<unsigned char>(plan.gossip_bytes, kCollectiveAlignment);
  l.used = carve.used() + kBlockAlignment - 1;  // any alignment of the caller's memory
  return l;
}

Result<std::size_t> PeerTrainer::RequiredBytes(const Model& model, const PeerData& data,
                                               const CollectiveContext& context, const PeerTrainerOptions& options) {
  Result<Plan> plan = MakePlan(model, data, context, options);
  if (!plan.ok()) return plan.status();
  return Carve(nullptr, *plan, true).used;
}

Result<PeerTrainer*> PeerTrainer::CreateIn(void* memory, std::size_t size, Model& model, const PeerData& data,
                                           CollectiveContext& context, const PeerTrainerOptions& options) {
  Result<Plan> plan = MakePlan(model, data, context, options);
  if (!plan.ok()) return plan.status();
  const std::size_t needed = Carve(nullptr, *plan, true).used;
  if (memory == nullptr || size < needed) {
    return OutOfRange("the peer trainer needs " + std::to_string(needed) + " bytes of memory, it was given " +
                      std::to_string(memory == nullptr ? 0 : size));
  }
  return Place(*plan, Carve(AlignedBlock(memory), *plan, true), nullptr, model, data, context, options);
}

void PeerTrainer::Destroy(PeerTrainer* trainer) {
  if (trainer != nullptr) trainer->~PeerTrainer();
}

Result<std::unique_ptr<PeerTrainer>> PeerTrainer::Create(Model& model, const PeerData& data,
                                                         CollectiveContext& context,
                                                         const PeerTrainerOptions& options) {
  Result<Plan> plan = MakePlan(model, data, context, options);
  if (!plan.ok()) return plan.status();
  const std::size_t bytes = Carve(nullptr, *plan, false).used;
  std::unique_ptr<unsigned char[]> block(new (std::nothrow) unsigned char[bytes]);
  if (block == nullptr) {
    return Status(StatusCode::kResourceExhausted, "cannot allocate the peer trainer's " + std::to_string(bytes) + " bytes");
  }
  const Layout layout = Carve(AlignedBlock(block.get()), *plan, false);
  Result<PeerTrainer*> trainer = Place(*plan, layout, std::move(block), model, data, context, options);
  if (!trainer.ok()) return trainer.status();
  return std::unique_ptr<PeerTrainer>(*trainer);
}

// Builds the trainer on a carved layout: in it (layout.trainer) or on the
// heap (Create, which hands over its block).
Result<PeerTrainer*> PeerTrainer::Place(const Plan& plan, const Layout& layout,
                                        std::unique_ptr<unsigned char[]> block, Model& model, const PeerData& data,
                                        CollectiveContext& context, const PeerTrainerOptions& options) {
  Result<Sgd> sgd = Sgd::CreateInBuffer(plan.sgd_options, plan.d, FloatSpan{layout.velocity, plan.sgd_floats});
  if (!sgd.ok()) return sgd.status();
  FEDRT_RETURN_IF_ERROR(model.Reserve(options.batch));
  PeerTrainer* trainer =
      layout.trainer != nullptr
          ? new (layout.trainer) PeerTrainer(model, data, context, options, std::move(*sgd), plan, layout, nullptr)
          : new PeerTrainer(model, data, context, options, std::move(*sgd), plan, layout, std::move(block));
  Status placed = trainer->BindCollectives(plan, layout);
  if (placed.ok() && options.reduce == PeerReduce::kGossip) {
    placed = trainer->group_->SetGossipDefense(options.gossip_defense);
    if (placed.ok()) {
      placed = trainer->group_->SetGossipAlgorithm(options.gossip_algorithm, trainer->d2_gain_, trainer->d2_leak_);
    }
    trainer->group_->SetGossipSendTransform(options.gossip_send_transform);
  }
  if (placed.ok() && plan.iwp && options.iwp.per_tensor) {
    placed = trainer->accumulator_->SetTensors(ModelTensorSizes(model));
  }
  if (!placed.ok()) {
    if (layout.trainer != nullptr) {
      Destroy(trainer);
    } else {
      delete trainer;
    }
    return placed;
  }
  return trainer;
}

PeerTrainer::PeerTrainer(Model& model, const PeerData& data, CollectiveContext& context,
                         const PeerTrainerOptions& options, Sgd sgd, const Plan& plan, const Layout& layout,
                         std::unique_ptr<unsigned char[]> block)
    : model_(model), data_(data), context_(context), options_(options),
      derived_theta_(options.reduce == PeerReduce::kGossip && options.codec.rfind("moniqua", 0) == 0 &&
                     options.codec.find("theta=") == std::string::npos),
      one_bit_rule_(MoniquaOneBitRule(options)),
      d2_gain_(static_cast<float>(options.d2_gain > 0 ? options.d2_gain : one_bit_rule_ ? kD2OneBitGain : 1.0)),
      d2_leak_(static_cast<float>(options.d2_leak >= 0 ? options.d2_leak : one_bit_rule_ ? kD2OneBitLeak : 0.0)),
      bound_theta_(derived_theta_ && !(options.moniqua_theta_per_lr > 0) && !one_bit_rule_),
      theta_per_lr_(one_bit_rule_ ? kOneBitThetaPerLr : options.moniqua_theta_per_lr),
      sgd_(std::move(sgd)), schedule_(plan.schedule), steps_per_epoch_(plan.steps_per_epoch),
      peer_count_(context.peer_count()), features_(layout.features), labels_(layout.labels),
      batch_indices_(layout.batch_indices), order_(layout.order), saved_(layout.saved), dp_noise_(layout.dp_noise),
      resync_steps_(layout.resync_steps), resync_state_(layout.resync_state), block_(std::move(block)) {
  group_ = new (layout.group) PeerGroup(context, options.chunk_floats);
  if (plan.iwp) {
    accumulator_ = new (layout.accumulator) IwpAccumulator(plan.d, plan.iwp_options, plan.tensors, layout.iwp_memory);
    indices_.reserve(plan.d);
    sums_.reserve(plan.d);
  }
  // Gossip codecs that encode per tensor send one stream per tensor.
  group_->SetTensorTable(ModelTensorSizes(model));
  if (one_bit_rule_) {
    // Dither and the consensus step, each unless the spec names it: gamma =
    // 1 - lambda, capped so that gamma (1 - lambda_min) <= kOneBitFastMix
    // (the recovery errors' own disagreement stays well inside theta).
    const std::string& spec = options.codec;
    const char separator = spec.find(':') == std::string::npos ? ':' : ',';
    std::string extra;
    if (spec.find("round=") == std::string::npos) extra += "round=dither";
    if (spec.find("gamma=") == std::string::npos) {
      const uint32_t n = static_cast<uint32_t>(context.members().size());
      const std::vector<double> w = MetropolisWeights(GraphNeighbours(context.graph(), n));
      const double lambda = SecondLargestEigenvalueModulus(w, n);
      const std::vector<double> eigenvalues = SymmetricEigenvalues(w, n);
      const double fastest = eigenvalues.empty() ? 0.0 : 1.0 - eigenvalues.front();  // 1 - lambda_min
      double step = 1.0 - lambda;
      if (fastest > 0) step = std::min(step, kOneBitFastMix / fastest);
      char gamma[40];
      std::snprintf(gamma, sizeof gamma, "%sgamma=%.4g", extra.empty() ? "" : ",",
                    std::min(1.0, std::max(0.01, step)));
      extra += gamma;
    }
    one_bit_spec_ = extra.empty() ? spec : spec + separator + extra;
  }
  if (options.reduce == PeerReduce::kGossip) {
    gossip_codec_.reserve(std::max(options.codec.size(), one_bit_spec_.size()) + kThetaSpecBytes);
    SetGossipCodec(options.sgd.schedule.base_lr);
    interval_step_wraps_.reserve(plan.steps_per_epoch + 1);
    progress_.step_wraps.reserve(plan.steps_per_epoch + 1);
  }
  if (bound_theta_) {
    const uint32_t n = static_cast<uint32_t>(context.members().size());
    // The step mixes with I + gamma (W - I) (gamma: Moniqua's consensus step
    // size, the spec's `gamma`, 1 unless named), so the bound takes that
    // matrix's mixing time: a gamma below 1 slows the averaging by about
    // 1 / gamma, and the neighbours drift that much further apart.
    std::vector<double> w = MetropolisWeights(GraphNeighbours(context.graph(), n));
    const double gamma = MoniquaConsensusStep(options.codec);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) w[i * n + j] = gamma * w[i * n + j] + (i == j ? 1.0 - gamma : 0.0);
    }
    mixing_time_ = MixingTime(SecondLargestEigenvalueModulus(w, n), n);
  }
}

PeerTrainer::~PeerTrainer() {
  if (accumulator_ != nullptr) accumulator_->~IwpAccumulator();
  group_->~PeerGroup();
}

uint64_t PeerTrainer::total_bytes_sent() const { return group_->total_bytes_sent(); }

// Moniqua's theta bounds the neighbours' distance, which scales with the
// learning rate (codecs/README.md, "Moniqua"): a codec spec without theta
// gets theta = moniqua_theta_per_lr * lr. Every peer computes the same
// schedule, so all use the same theta in a step.
void PeerTrainer::SetGossipCodec(double lr) {
  if (!derived_theta_) {
    gossip_codec_ = options_.codec;
    return;
  }
  gossip_codec_.clear();
  if (bound_theta_) return;  // RefreshTheta sets it
  const std::string& spec = one_bit_rule_ ? one_bit_spec_ : options_.codec;
  char theta[40];
  // At 1 bit theta = the base rate: it stays put under a decaying schedule,
  // since the neighbours' distance does not fall as fast as the rate (with
  // theta = lr under cosine, wraps grew to 2 M a step near the end).
  std::snprintf(theta, sizeof theta, "%ctheta=%.6g", spec.find(':') == std::string::npos ? ':' : ',',
                theta_per_lr_ * (one_bit_rule_ ? options_.sgd.schedule.base_lr : lr));
  gossip_codec_.assign(spec).append(theta);  // within the reserved capacity
}

// Moniqua's theta from its bound (PeerTrainerOptions::moniqua_theta_per_lr
// says the rule): this peer's candidate is c * lr * G * t_mix, doubled per
// widening; the peers take the largest (max-flooding of its float bits,
// which order like the values for positive floats).
Status PeerTrainer::RefreshTheta(double lr) {
  if (wraps_since_refresh_ > 0) {
    ++widen_;
    quiet_refreshes_ = 0;
  } else if (widen_ > 0 && ++quiet_refreshes_ >= 4) {
    --widen_;
    quiet_refreshes_ = 0;
  }
  double candidate = std::ldexp(MoniquaTheta(options_.moniqua_c, lr, grad_bound_, mixing_time_), widen_);
  if (!(candidate >= 1e-30)) candidate = 1e-30;  // a zero gradient: any theta does
  if (!(candidate <= 1e30)) candidate = 1e30;
  const float value = static_cast<float>(candidate);
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  Result<uint64_t> agreed = AgreeStep(context_, bits);
  if (!agreed.ok()) return agreed.status();
  const uint32_t agreed_bits = static_cast<uint32_t>(*agreed);
  float theta = 0;
  std::memcpy(&theta, &agreed_bits, sizeof theta);
  theta_ = theta;
  // Within gossip_codec_'s reserved capacity: no allocation per refresh.
  const char separator = options_.codec.find(':') == std::string::npos ? ':' : ',';
  char text[kThetaSpecBytes];
  if (options_.moniqua_check > 0 && options_.codec.find("check=") == std::string::npos) {
    std::snprintf(text, sizeof text, "%ctheta=%.9g,check=%u", separator, static_cast<double>(theta),
                  static_cast<unsigned>(options_.moniqua_check));
  } else {
    std::snprintf(text, sizeof text, "%ctheta=%.9g", separator, static_cast<double>(theta));
  }
  gossip_codec_.assign(options_.codec).append(text);
  grad_bound_ = 0;
  wraps_since_refresh_ = 0;
  theta_agreed_ = true;
  return Status::Ok();
}

Status PeerTrainer::MoniquaGossipStep(float* x, const float* g, std::size_t d, float lr, uint32_t step,
                                      GossipStats* gossip) {
  if (bound_theta_) {
    for (std::size_t i = 0; i < d; ++i) grad_bound_ = std::max(grad_bound_, std::fabs(g[i]));
    if (!theta_agreed_ || step % std::max<uint32_t>(1, options_.moniqua_refresh_steps) == 0) {
      FEDRT_RETURN_IF_ERROR(RefreshTheta(lr));
    }
  }
  Status mixed = group_->GossipStep(x, g, d, lr, gossip_codec_, step, gossip);
  if (mixed.ok() && bound_theta_) wraps_since_refresh_ += gossip->wrap_count;
  return mixed;
}

void PeerTrainer::CountFp32Step() {
  const double p = static_cast<double>(context_.members().size());
  const double model_bytes = static_cast<double>(model_.parameter_count()) * sizeof(float);
  if (options_.reduce == PeerReduce::kGossip || options_.reduce == PeerReduce::kLocal) {
    fp32_bytes_ += model_bytes * static_cast<double>(context_.neighbours().size());
  } else {
    fp32_bytes_ += model_bytes * 2.0 * (p - 1.0) / p;
  }
}

// Drops the failed peer and re-forms the group (ring or graph) over the rest.
Status PeerTrainer::Reform(PeerTrainerObserver& observer) {
  std::vector<uint32_t> survivors;
  for (uint32_t r : context_.members()) {
    if (static_cast<int>(r) != context_.failed_rank()) survivors.push_back(r);
  }
  observer.OnReforming(context_.failed_rank(), survivors.size());
  FEDRT_RETURN_IF_ERROR(context_.Form(survivors));
  observer.OnReformed(survivors.size());
  return Status::Ok();
}

// After a re-formation the survivors agree where to resume: a peer may have
// finished the step the others failed (the lost peer's last data reached it
// before it died). Every survivor learns every survivor's step; the first
// peer at the furthest step sends its model and momentum (an all-reduce to
// which the others add zeros, so the values arrive exactly) and everyone
// resumes at that step. *behind: this peer's failed step is done already.
Status PeerTrainer::Resync(uint32_t* step, bool* behind) {
  const uint32_t rank = context_.rank();
  float* steps = resync_steps_;  // peer_count_ floats of the block
  std::fill(steps, steps + peer_count_, 0.0f);
  steps[rank] = static_cast<float>(*step) + 1.0f;  // 0: not a member
  FEDRT_RETURN_IF_ERROR(group_->AllReduce(steps, peer_count_));
  uint32_t resume = 0, root = rank;
  for (uint32_t r : context_.members()) resume = std::max(resume, static_cast<uint32_t>(steps[r]) - 1);
  for (uint32_t r : context_.members()) {
    if (static_cast<uint32_t>(steps[r]) - 1 == resume) {
      root = r;
      break;
    }
  }
  const std::size_t d = model_.parameter_count(), v = sgd_.velocity_size();
  float* state = resync_state_;  // d + v floats of the block
  std::fill(state, state + d + v, 0.0f);
  if (rank == root) {
    std::copy(model_.parameters(), model_.parameters() + d, state);
    std::copy(sgd_.velocity(), sgd_.velocity() + v, state + d);
  }
  FEDRT_RETURN_IF_ERROR(group_->AllReduce(state, d + v));
  std::copy(state, state + d, model_.parameters());
  std::copy(state + d, state + d + v, sgd_.velocity());
  *behind = *step < resume;
  *step = resume;
  sgd_.set_step(resume);
  return Status::Ok();
}

Status PeerTrainer::Report(PeerTrainerObserver& observer, int epoch, std::size_t steps_done, uint32_t step,
                           bool epoch_end, double epoch_loss, uint64_t epoch_wraps, double epoch_seconds) {
  // The trainer's own report, reused: its per-step wrap counts go into the
  // capacity reserved at creation (no allocation per report).
  std::vector<uint64_t> step_wraps;
  step_wraps.swap(progress_.step_wraps);
  progress_ = PeerProgress();
  PeerProgress& progress = progress_;
  progress.step_wraps.swap(step_wraps);
  progress.epoch = epoch;
  progress.steps_done = steps_done;
  progress.steps_per_epoch = steps_per_epoch_;
  progress.step = step;
  progress.epoch_end = epoch_end;
  progress.members = context_.members().size();
  progress.train_loss = interval_steps_ ? interval_loss_ / static_cast<double>(interval_steps_) : 0.0;
  progress.total_bytes_sent = group_->total_bytes_sent();
  progress.fp32_bytes = static_cast<uint64_t>(fp32_bytes_);
  progress.wraps = interval_wraps_;
  progress.moniqua_theta = theta_;
  progress.step_wraps.assign(interval_step_wraps_.begin(), interval_step_wraps_.end());
  progress.epoch_loss = epoch_loss;
  progress.epoch_wraps = epoch_wraps;
  progress.epoch_seconds = epoch_seconds;
  if (options_.dp.noise_multiplier > 0) progress.dp_epsilon = accountant_.Epsilon(options_.dp.delta);
  FEDRT_RETURN_IF_ERROR(observer.OnProgress(progress));
  interval_loss_ = 0;
  interval_steps_ = 0;
  interval_wraps_ = 0;
  interval_step_wraps_.clear();
  return Status::Ok();
}

Status PeerTrainer::Run(const std::function<Status(const PeerProgress&)>& on_progress) {
  struct Forward : PeerTrainerObserver {
    explicit Forward(const std::function<Status(const PeerProgress&)>& f) : fn(f) {}
    Status OnProgress(const PeerProgress& progress) override { return fn ? fn(progress) : Status::Ok(); }
    const std::function<Status(const PeerProgress&)>& fn;
  } observer(on_progress);
  return Run(observer);
}

Status PeerTrainer::Run(PeerTrainerObserver& observer) {
  const std::size_t d = model_.parameter_count();
  const std::size_t batch = static_cast<std::size_t>(options_.batch);
  const std::size_t evals = static_cast<std::size_t>(options_.evals_per_epoch);
  const bool iwp_updates = options_.reduce == PeerReduce::kIwp && options_.iwp.accumulate_updates;
  const std::string ring_codec = options_.reduce == PeerReduce::kCodec ? options_.codec : std::string();
  const uint64_t order_seed = options_.seed + static_cast<uint64_t>(context_.rank());
  // Local DP: sensitivity 2 clip, so the mechanism's noise multiplier is z / 2.
  const bool dp = options_.dp.noise_multiplier > 0;
  const double dp_sigma = options_.dp.noise_multiplier / 2.0;
  const uint64_t dp_key = options_.dp.noise_seed ^ (0x9e3779b97f4a7c15ull * (context_.rank() + 1ull));
  bool out_of_budget = false;
  uint32_t step = 0;
  uint32_t skip_steps = 0;  // gossip: batches the survivors took while this peer failed (step counts them)
  const uint32_t* order = order_;
  for (int epoch = 0; epoch < options_.epochs; ++epoch) {
    const std::size_t needed = steps_per_epoch_ * batch;
    // Passes over the share until the epoch's steps are covered: at most
    // needed + share_size indices, the block's order_.
    for (std::size_t filled = 0, pass = 0; filled < needed; filled += data_.share_size, ++pass) {
      // Pass 0 of every epoch is the order an equal share always had.
      ShuffleIndicesInto(order_ + filled, data_.share_size, order_seed,
                         static_cast<uint64_t>(epoch) + (static_cast<uint64_t>(pass) << 32));
    }
    double loss_sum = 0;
    uint64_t wraps = 0;
    std::size_t steps_done = 0;
    const uint64_t start = context_.clock().NowNanos();
    for (std::size_t s = 0; s < steps_per_epoch_; ++s) {
      if (options_.max_steps > 0 && step >= options_.max_steps) break;
      if (dp && options_.dp.epsilon_budget > 0 &&
          accountant_.EpsilonAfter(1.0, dp_sigma, options_.dp.delta) > options_.dp.epsilon_budget) {
        out_of_budget = true;
        break;
      }
      if (skip_steps > 0) {
        --skip_steps;
        continue;
      }
      // Reports inside the epoch (the epoch's end is reported below).
      if (s > 0 && (s * evals) / steps_per_epoch_ != ((s - 1) * evals) / steps_per_epoch_) {
        FEDRT_RETURN_IF_ERROR(Report(observer, epoch, s, step, false, 0, 0, 0));
      }
      observer.OnStep(epoch, s, steps_per_epoch_);
      for (std::size_t b = 0; b < batch; ++b) batch_indices_[b] = data_.share[order[s * batch + b]];
      GatherBatch(data_.set, batch_indices_, batch, features_, labels_);
      auto loss = model_.ComputeGradients(features_, labels_, options_.batch);
      if (!loss.ok()) return loss.status();
      loss_sum += loss->loss;
      interval_loss_ += loss->loss;
      ++interval_steps_;
      ++steps_done;
      float* g = model_.gradients();
      float* x = model_.parameters();
      if (dp) {
        // The release: clipped and noised before any collective sees it.
        ClipToNorm(g, d, options_.dp.clip);
        std::fill(dp_noise_, dp_noise_ + d, 0.0);
        AddGaussianNoise(dp_key, step, options_.dp.noise_multiplier * options_.dp.clip, dp_noise_, d);
        for (std::size_t i = 0; i < d; ++i) g[i] = static_cast<float>(static_cast<double>(g[i]) + dp_noise_[i]);
        accountant_.Compose(1.0, dp_sigma);
      }
      if (options_.reduce == PeerReduce::kLocal) {
        // The no-communication baseline: gossip's plain SGD step without mixing.
        const float lr = static_cast<float>(sgd_.current_lr());
        for (std::size_t i = 0; i < d; ++i) x[i] = x[i] - lr * g[i];
        sgd_.set_step(sgd_.step() + 1);
        ++step;
        continue;
      }
      if (options_.reduce == PeerReduce::kGossip) {
        // D-PSGD: the mixing step applies the plain SGD step itself.
        GossipStats gossip;
        const float lr = static_cast<float>(sgd_.current_lr());
        if (derived_theta_ && !bound_theta_ && options_.sgd.schedule.kind != LrScheduleKind::kConstant) {
          SetGossipCodec(sgd_.current_lr());
        }
        Status mixed = MoniquaGossipStep(x, g, d, lr, step, &gossip);
        bool done_elsewhere = false;
        while (!mixed.ok()) {
          // A failed step leaves the model as it was: re-form, agree with the
          // survivors on the step to resume at, and repeat this one or (the
          // others finished it before the failure) take its plain SGD step
          // alone and join them.
          observer.OnStepFailed(step, mixed);
          if (!options_.repair || context_.failed_rank() < 0) return mixed;
          FEDRT_RETURN_IF_ERROR(Reform(observer));
          auto agreed = AgreeStep(context_, step);
          if (!agreed.ok()) {
            mixed = agreed.status();
            continue;
          }
          observer.OnResumed(*agreed);
          if (*agreed > step) {
            for (std::size_t i = 0; i < d; ++i) x[i] = x[i] - lr * g[i];
            skip_steps = static_cast<uint32_t>(*agreed) - step - 1;
            step = static_cast<uint32_t>(*agreed);
            sgd_.set_step(step);
            done_elsewhere = true;
            break;
          }
          theta_agreed_ = false;  // the survivors agree again
          mixed = MoniquaGossipStep(x, g, d, lr, step, &gossip);
        }
        if (done_elsewhere) continue;
        CountFp32Step();
        wraps += gossip.wrap_count;
        interval_wraps_ += gossip.wrap_count;
        interval_step_wraps_.push_back(gossip.wrap_count);
        observer.OnGossipStep(step, gossip.wrap_count);
        sgd_.set_step(sgd_.step() + 1);
        ++step;
        continue;
      }
      bool accumulated = false;  // IWP: this step's gradient is in the accumulator
      bool done_elsewhere = false;
      for (;;) {
        Status reduced;
        const float members = static_cast<float>(context_.members().size());
        if (options_.reduce == PeerReduce::kIwp) {
          if (!accumulated) {
            reduced = accumulator_->Accumulate(
                g, iwp_updates ? static_cast<float>(schedule_.LearningRate(sgd_.step())) : 1.0f);
          }
          accumulated = true;
          if (reduced.ok()) reduced = group_->IwpAllReduce(*accumulator_, x, options_.seed, step, &indices_, &sums_);
          if (reduced.ok()) {
            std::fill(g, g + d, 0.0f);
            for (std::size_t j = 0; j < indices_.size(); ++j) g[indices_[j]] = sums_[j] / members;
          }
        } else {
          std::copy(g, g + d, saved_);
          reduced = options_.reduce == PeerReduce::kCompressed ? group_->CompressedAllReduce(g, d, options_.codec)
                                                              : group_->AllReduce(g, d, ring_codec);
          if (reduced.ok()) {
            for (std::size_t i = 0; i < d; ++i) g[i] /= members;
          } else {
            std::copy(saved_, saved_ + d, g);
          }
        }
        if (reduced.ok()) break;
        observer.OnStepFailed(step, reduced);
        if (!options_.repair || context_.failed_rank() < 0) return reduced;
        FEDRT_RETURN_IF_ERROR(Reform(observer));
        bool behind = false;
        FEDRT_RETURN_IF_ERROR(Resync(&step, &behind));
        if (options_.reduce == PeerReduce::kIwp && !behind && !sums_.empty()) {
          // The sum never completed anywhere: what this peer gathered goes
          // back into its accumulator (those slots are zero since).
          FEDRT_RETURN_IF_ERROR(accumulator_->Restore(indices_.data(), sums_.size(), sums_.data()));
        }
        if (behind) {
          // Another peer finished this step; its model (sent by Resync) has it.
          observer.OnResumed(step);
          done_elsewhere = true;
          break;
        }
      }
      if (done_elsewhere) continue;
      CountFp32Step();
      sgd_.Step(x, g);
      ++step;
    }
    const double seconds = static_cast<double>(context_.clock().NowNanos() - start) * 1e-9;
    FEDRT_RETURN_IF_ERROR(Report(observer, epoch, steps_done, step, true,
                                 loss_sum / static_cast<double>(std::max<std::size_t>(1, steps_done)), wraps, seconds));
    if (out_of_budget) break;
  }
  return Status::Ok();
}

}  // namespace peer
}  // namespace fedrt
