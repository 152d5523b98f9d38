// Gossip D-PSGD (collectives.h, Gossip): full precision, Moniqua-coded, or
// with CHOCO replicas. A model goes to each neighbour as GossipModel chunks
// {step, source rank, codec, chunk} of at most one frame each.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "common/block_carver.h"
#include "fedrt/codecs/codec_spec.h"
#include "fedrt/codecs/tensor_set.h"
#include "fedrt/runtime/collectives.h"

namespace fedrt {
namespace peer {

bool IsChocoSpec(const std::string& spec) {
  return spec.rfind("choco+", 0) == 0 || spec.rfind("choco:", 0) == 0;
}

Result<ChocoSpec> ParseChocoSpec(const std::string& spec) {
  const std::size_t plus = spec.find('+');
  if (!IsChocoSpec(spec) || plus == std::string::npos || plus + 1 == spec.size()) {
    return InvalidArgument("'" + spec + "': a replica gossip spec is choco[:gamma=G]+CODEC");
  }
  auto head = CodecSpec::Parse(spec.substr(0, plus));
  if (!head.ok()) return head.status();
  Status keys = head->CheckKeys({"gamma"});
  if (!keys.ok()) return keys;
  auto gamma = head->GetDouble("gamma", 0.5, 1e-6, 1.0);
  if (!gamma.ok()) return gamma.status();
  ChocoSpec out;
  out.gamma = static_cast<float>(*gamma);
  out.codec = spec.substr(plus + 1);
  return out;
}

Result<GossipAlgorithm> ParseGossipAlgorithm(const std::string& name) {
  if (name == "dpsgd") return GossipAlgorithm::kDpsgd;
  if (name == "d2") return GossipAlgorithm::kD2;
  return InvalidArgument("gossip algorithm '" + name + "': dpsgd or d2");
}

namespace {

// What a gossip step keeps, for models of d floats (collectives.h, Gossip::RequiredBytes).
struct GossipSizes {
  std::size_t codec = 0;    // the codec in place (the inner one of CHOCO)
  std::size_t payload = 0;  // the largest payload: encoded, and each neighbour's received
  std::size_t d = 0;
  std::size_t neighbours = 0;
  std::size_t members = 0;
  bool choco = false;
  bool d2 = false;
};

Result<GossipSizes> MeasureGossip(const CollectiveShape& shape) {
  GossipSizes sizes;
  sizes.d = shape.d;
  sizes.neighbours = shape.neighbours;
  sizes.members = shape.members;
  sizes.d2 = shape.gossip_d2;
  sizes.payload = shape.d * sizeof(float);
  if (shape.codec.empty() || shape.d == 0) return sizes;
  std::string_view inner = shape.codec;
  std::string choco_codec;
  if (IsChocoSpec(shape.codec)) {
    Result<ChocoSpec> choco = ParseChocoSpec(shape.codec);
    if (!choco.ok()) return choco.status();
    choco_codec = choco->codec;
    inner = choco_codec;
    sizes.choco = true;
  }
  Result<std::unique_ptr<Codec>> probe = MakeCodec(std::string(inner));
  if (!probe.ok()) return probe.status();
  // A codec that cannot be placed (none in the registry today) is made on the heap.
  Result<std::size_t> storage = internal::CodecHolder::StorageBytes(inner, shape.d);
  sizes.codec = storage.ok() ? *storage : 0;
  // A codec placed with working space for d stages there: the payload's
  // bound is what it encodes into (per tensor: the framing's too).
  sizes.payload = (*probe)->MaxPayloadSize(shape.d);
  if (!shape.tensor_sizes.empty() && EncodesPerTensor(**probe)) {
    Result<std::unique_ptr<TensorSetCodec>> tensors = TensorSetCodec::Borrow(**probe, shape.tensor_sizes);
    if (!tensors.ok()) return tensors.status();
    sizes.payload = (*tensors)->MaxPayloadSize(shape.d);
  }
  return sizes;
}

// The block's pieces in order (null base: measuring); returns the bytes.
struct GossipLayout {
  unsigned char* codec = nullptr;
  uint8_t* encoded = nullptr;
  uint8_t* received = nullptr;
  std::size_t* received_sizes = nullptr;
  uint8_t* got = nullptr;
  MoniquaNeighbour* mix = nullptr;
  float* own = nullptr;
  float* recovered = nullptr;
  float* choco_public = nullptr;
  float* choco_diff = nullptr;
  float* choco_replicas = nullptr;
  uint32_t* choco_members = nullptr;
  float* d2_correction = nullptr;
  float* d2_half = nullptr;
  uint32_t* d2_members = nullptr;
};

std::size_t CarveGossip(unsigned char* base, const GossipSizes& z, GossipLayout* l) {
  Carver carve(base);
  const std::size_t a = kCollectiveAlignment;
  l->codec = carve.Take<unsigned char>(z.codec, a);
  l->encoded = carve.Take<uint8_t>(z.codec > 0 ? z.payload : 0, a);
  l->received = carve.Take<uint8_t>(z.neighbours * z.payload, a);
  l->received_sizes = carve.Take<std::size_t>(z.neighbours);
  l->got = carve.Take<uint8_t>(z.neighbours);
  l->mix = carve.Take<MoniquaNeighbour>(z.neighbours);
  l->own = carve.Take<float>(z.d, a);
  l->recovered = carve.Take<float>(z.neighbours * z.d, a);
  if (z.choco) {
    l->choco_public = carve.Take<float>(z.d, a);
    l->choco_diff = carve.Take<float>(z.d, a);
    l->choco_replicas = carve.Take<float>(z.neighbours * z.d, a);
    l->choco_members = carve.Take<uint32_t>(z.members);
  }
  if (z.d2) {
    l->d2_correction = carve.Take<float>(z.d, a);
    l->d2_half = carve.Take<float>(z.d, a);
    l->d2_members = carve.Take<uint32_t>(z.members);
  }
  return AlignUp(carve.used(), a);
}

}  // namespace

Gossip::Gossip(CollectiveContext& context) : context_(context) { spec_.reserve(kMaxCodecSpecSize); }

Result<std::size_t> Gossip::RequiredBytes(const CollectiveShape& shape) {
  Result<GossipSizes> sizes = MeasureGossip(shape);
  if (!sizes.ok()) return sizes.status();
  GossipLayout layout;
  return CarveGossip(nullptr, *sizes, &layout);
}

Status Gossip::Bind(void* memory, std::size_t size, const CollectiveShape& shape) {
  Result<GossipSizes> sizes = MeasureGossip(shape);
  if (!sizes.ok()) return sizes.status();
  GossipLayout l;
  const std::size_t needed = CarveGossip(nullptr, *sizes, &l);
  FEDRT_RETURN_IF_ERROR(internal::CheckCollectiveMemory(memory, size, needed, kCollectiveAlignment, "Gossip"));
  CarveGossip(static_cast<unsigned char*>(memory), *sizes, &l);
  const GossipSizes& z = *sizes;
  codec_ = nullptr;
  spec_.clear();
  made_.Bind(l.codec, z.codec, z.d);
  encoded_.Bind(l.encoded, z.codec > 0 ? z.payload : 0);
  received_.Bind(l.received, z.neighbours * z.payload);
  received_sizes_.Bind(l.received_sizes, z.neighbours);
  got_.Bind(l.got, z.neighbours);
  mix_.Bind(l.mix, z.neighbours);
  own_recovered_.Bind(l.own, z.d);
  recovered_.Bind(l.recovered, z.neighbours * z.d);
  choco_public_.Bind(l.choco_public, z.choco ? z.d : 0);
  choco_diff_.Bind(l.choco_diff, z.choco ? z.d : 0);
  choco_replicas_.Bind(l.choco_replicas, z.choco ? z.neighbours * z.d : 0);
  choco_members_.Bind(l.choco_members, z.choco ? z.members : 0);
  d2_correction_.Bind(l.d2_correction, z.d2 ? z.d : 0);
  d2_half_.Bind(l.d2_half, z.d2 ? z.d : 0);
  d2_members_.Bind(l.d2_members, z.d2 ? z.members : 0);
  return Status::Ok();
}

Gossip::~Gossip() = default;

Status Gossip::Send(uint32_t to, uint64_t step, std::string_view spec, const uint8_t* bytes, std::size_t size,
                    uint64_t* sent, Deadline deadline) {
  const std::size_t chunk = context_.limits().MaxChunkBytes();
  const std::size_t count = std::max<std::size_t>(1, (size + chunk - 1) / chunk);
  for (std::size_t k = 0; k < count; ++k) {
    transport::GossipModelMessage m;
    m.step = step;
    m.source_rank = context_.rank();
    m.codec_spec = spec;
    m.payload.index = static_cast<uint32_t>(k);
    m.payload.count = static_cast<uint32_t>(count);
    m.payload.total_size = size;
    m.payload.offset = k * chunk;
    m.payload.data = bytes + k * chunk;
    m.payload.size = std::min(chunk, size - k * chunk);
    *sent += m.payload.size;
    // Copied into a reusable slot: the bytes (the model or encoded_) change
    // before the next step, and the send queue may still hold them.
    auto slot = context_.FreeSlot(to, deadline, "the model");
    if (!slot.ok()) return slot.status();
    if (*slot == nullptr) return Status::Ok();  // the neighbour has left
    FEDRT_RETURN_IF_ERROR(context_.Send(to, Encode(m, context_.limits(), **slot, transport::PayloadMode::kCopy)));
  }
  return Status::Ok();
}

Status Gossip::Receive(uint32_t from, Deadline deadline, uint64_t step, std::size_t max_size, uint8_t* out,
                       std::size_t* size, uint64_t* sender_step) {
  // After a re-formation neighbours may be steps apart.
  const bool lenient_step = context_.generation() > 1;
  uint32_t count = 1;
  uint64_t received = 0;
  for (uint32_t k = 0; k < count; ++k) {
    auto frame = context_.Receive(from, deadline, /*leaving_is_ok=*/true);
    if (!frame.ok()) return frame.status();
    auto m = transport::DecodeGossipModel(*frame, context_.limits());
    if (!m.ok()) return context_.Fail(static_cast<int>(from), context_.Named(from, m.status()));
    const auto& p = m->payload;
    if (k == 0) {
      count = p.count;
      if (p.total_size > max_size) {
        return context_.Fail(static_cast<int>(from),
                             context_.Named(from, Corrupt("gossip model larger than this model's payload")));
      }
      *size = static_cast<std::size_t>(p.total_size);  // bounded by max_size above
      *sender_step = m->step;
    }
    const bool step_ok = k == 0 ? (m->step == step || lenient_step) : m->step == *sender_step;
    if (!step_ok || m->source_rank != from || p.index != k || p.count != count || p.offset != received ||
        p.total_size != *size || p.size > *size - received) {
      return context_.Fail(static_cast<int>(from), context_.Named(from, Corrupt("unexpected gossip chunk (step " +
                                                                                std::to_string(m->step) + ")")));
    }
    if (p.size > 0) std::memcpy(out + received, p.data, p.size);
    received += p.size;
  }
  if (received != *size) {
    return context_.Fail(static_cast<int>(from), context_.Named(from, Corrupt("short gossip model")));
  }
  return Status::Ok();
}

Status Gossip::SetDefense(const GossipDefense& defense) {
  if (!(defense.clip >= 0) || !std::isfinite(defense.clip)) {
    return InvalidArgument("the gossip clip norm must be finite and not negative (0: no clipping)");
  }
  defense_ = defense;
  return Status::Ok();
}

Status Gossip::SetAlgorithm(GossipAlgorithm algorithm, float d2_gain, float d2_leak) {
  if (!(d2_gain > 0.0f && d2_gain <= 1.0f) || !(d2_leak >= 0.0f && d2_leak < 1.0f)) {
    return InvalidArgument("D2's correction gain must be in (0, 1] and its leak in [0, 1)");
  }
  algorithm_ = algorithm;
  d2_gain_ = d2_gain;
  d2_leak_ = d2_leak;
  return Status::Ok();
}

void Gossip::SetTensorTable(std::vector<std::size_t> tensor_sizes) {
  tensor_sizes_ = std::move(tensor_sizes);
  // The wrapper is made here, once; each new codec is bound to it.
  per_tensor_.reset();
  if (!tensor_sizes_.empty()) {
    Result<std::unique_ptr<TensorSetCodec>> unbound = TensorSetCodec::Unbound(tensor_sizes_);
    if (unbound.ok()) per_tensor_ = std::move(*unbound);
  }
  made_.Reset();  // made again, over the new table, by the next Step
  codec_ = nullptr;
  spec_.clear();
}

// GossipDefense::clip: x = x'_self + clip(x - x'_self), in double.
void Gossip::ClipToOwn(float* x, std::size_t d) const {
  double norm2 = 0;
  for (std::size_t k = 0; k < d; ++k) {
    const double diff = static_cast<double>(x[k]) - static_cast<double>(own_recovered_.data()[k]);
    norm2 += diff * diff;
  }
  const double norm = std::sqrt(norm2);
  if (!(norm > defense_.clip)) return;
  const double scale = defense_.clip / norm;
  for (std::size_t k = 0; k < d; ++k) {
    const double own = static_cast<double>(own_recovered_.data()[k]);
    x[k] = static_cast<float>(own + scale * (static_cast<double>(x[k]) - own));
  }
}

// The defended mixing (GossipDefense): the `heard` neighbours are first in
// mix_ (their models, clipped already, and Metropolis weights). A rule other than
// the mean moves the own model half way to the rule's result, then steps:
//   x = x + (Rule(x'_self, neighbours) - x'_self) / 2 - lr g.
// Why half way: a rule picks among the neighbourhood's values and so ignores
// the own weight that keeps a Metropolis matrix away from eigenvalue -1. On a
// bipartite graph (an even ring, the 2 x 4 torus) the two colour classes then
// swap values every step (own a, neighbours b, b: the median is b), and the
// gradient computed at a is applied to b: the swap mode grows by 1 + lr h per
// step where plain gossip shrinks it. The median took a clean 8-peer ring from
// 81.43% to 40.71% and diverged on the 2 x 4 torus; half way cancels the swap
// (docs/benchmarks/robust-dp.md, "Gossip median").
void Gossip::Defend(float* model, const float* grad, std::size_t d, float lr, std::size_t heard) {
  const MoniquaNeighbour* const mix = mix_.data();
  double neighbour_weight = 0;
  for (std::size_t i = 0; i < heard; ++i) neighbour_weight += static_cast<double>(mix[i].weight);
  if (defense_.rule.kind == AggregationKind::kMean) {
    MoniquaMixStep(model, own_recovered_.data(), mix, heard, lr, grad, d);
    return;
  }
  models_.assign(1, own_recovered_.data());
  // The own weight is what the neighbours leave (Metropolis: positive).
  weights_.assign(1, std::max(1e-6, 1.0 - neighbour_weight));
  for (std::size_t i = 0; i < heard; ++i) {
    models_.push_back(mix[i].recovered);
    weights_.push_back(static_cast<double>(mix[i].weight));
  }
  float* const combined_values = combined_.Resize(d);
  const Status combined = Aggregate(defense_.rule, models_, weights_, d, combined_values);
  // Too few models (neighbours left) or a value that is not finite: this
  // step keeps the own model (what a peer alone does).
  if (!combined.ok()) {
    for (std::size_t k = 0; k < d; ++k) model[k] = model[k] - lr * grad[k];
    return;
  }
  // As the mean path, against x'_self (the own model through the channel), so
  // a codec's error cancels where the neighbourhood agrees.
  for (std::size_t k = 0; k < d; ++k) {
    model[k] = model[k] + 0.5f * (combined_values[k] - own_recovered_.data()[k]) - lr * grad[k];
  }
}

// The codec of `codec_spec`, made when the spec changed: in place when it
// fits the bound storage (a new Moniqua theta then allocates nothing), over
// the tensor table when it encodes per tensor.
Status Gossip::Prepare(const std::string& codec_spec, std::size_t d) {
  if (codec_spec == spec_ && (codec_ != nullptr || codec_spec.empty())) return Status::Ok();
  made_.Reset();
  codec_ = nullptr;
  spec_.clear();
  choco_gamma_ = 0;
  choco_public_.Resize(0);
  if (!codec_spec.empty()) {
    std::string_view inner = codec_spec;
    std::string choco_codec;  // CHOCO's spec is parsed once, at its first step
    if (IsChocoSpec(codec_spec)) {
      auto choco = ParseChocoSpec(codec_spec);
      if (!choco.ok()) return choco.status();
      choco_gamma_ = choco->gamma;
      choco_codec = std::move(choco->codec);
      inner = choco_codec;
    }
    auto made = made_.Make(inner, d);
    if (!made.ok()) return made.status();
    if (choco_gamma_ > 0 && (*made)->needs_side_info()) {
      made_.Reset();
      return InvalidArgument("'" + codec_spec +
                             "': replica gossip needs a codec that decodes without side information");
    }
    codec_ = *made;
    if (!tensor_sizes_.empty() && EncodesPerTensor(*codec_)) {
      if (per_tensor_ == nullptr) {
        auto tensors = TensorSetCodec::Unbound(tensor_sizes_);
        if (!tensors.ok()) return tensors.status();
        per_tensor_ = std::move(*tensors);
      }
      per_tensor_->Rebind(*codec_);
      codec_ = per_tensor_.get();
    }
  }
  spec_.assign(codec_spec);  // within the reserved capacity for registry specs
  return Status::Ok();
}

Status Gossip::Step(float* model, const float* grad, std::size_t d, float lr, const std::string& codec_spec,
                    uint64_t step, GossipStats* stats) {
  const Deadline deadline = context_.StepDeadline();
  *stats = GossipStats{};
  FEDRT_RETURN_IF_ERROR(context_.CheckUsable());
  FEDRT_RETURN_IF_ERROR(Prepare(codec_spec, d));
  if (!tensor_sizes_.empty()) {
    std::size_t total = 0;
    for (std::size_t size : tensor_sizes_) total += size;
    if (d != total) {
      return InvalidArgument("a model of " + std::to_string(d) + " parameters for a tensor table of " +
                             std::to_string(total));
    }
  }
  Codec* codec = codec_;
  const bool choco = choco_gamma_ > 0;
  bool moniqua = false;
  float gamma = 1.0f;  // Moniqua's consensus step size: x_j += gamma sum_i W_ji (x'_i - x'_j)
  if (codec != nullptr && codec->id() == CodecId::kMoniqua) {
    auto parameters = GetMoniquaParameters(*codec);
    moniqua = parameters.ok();
    if (moniqua) gamma = parameters->gamma;
  }
  const bool defended = defense_.clip > 0 || defense_.rule.kind != AggregationKind::kMean;
  if (defended && (choco || moniqua || (codec != nullptr && codec->needs_side_info()))) {
    return InvalidArgument("gossip codec '" + codec_spec +
                           "' does not recover the neighbours' models: robust rules and clipping need fp32 gossip "
                           "or a codec that decodes without side information");
  }
  const bool d2 = algorithm_ == GossipAlgorithm::kD2;
  if (d2 && (choco || defended)) {
    return InvalidArgument(choco ? "D2 gossip mixes models: '" + codec_spec + "' sends replica differences"
                                 : std::string("D2 gossip takes no robust rule or clipping: its sum of corrections "
                                               "would keep what a rule drops"));
  }
  if (send_transform_ && choco) {
    return InvalidArgument("gossip codec '" + codec_spec + "' sends replica differences, not models: no send transform");
  }
  if (defended && context_.neighbours().size() + 1 < MinimumUpdates(defense_.rule)) {
    return InvalidArgument("aggregation " + AggregationRuleName(defense_.rule) + " needs " +
                           std::to_string(MinimumUpdates(defense_.rule)) + " models per gossip step; this peer has " +
                           std::to_string(context_.neighbours().size()) + " neighbours (" +
                           std::to_string(context_.neighbours().size() + 1) + " with its own)");
  }
  float* const own_recovered = own_recovered_.Resize(d);
  CodecContext context;
  context.round = static_cast<uint32_t>(step);
  context.sender_id = context_.rank();
  // What is sent, decoded against and mixed: the model, or D2's half step.
  float* mixed_model = model;
  const std::vector<uint32_t>& members = context_.members();
  if (d2) {
    const bool same_members =
        d2_members_.size() == members.size() && std::equal(members.begin(), members.end(), d2_members_.data());
    if (d2_correction_.size() != d || !same_members) {
      float* c = d2_correction_.Resize(d);
      std::fill(c, c + d, 0.0f);
      std::copy(members.begin(), members.end(), d2_members_.Resize(members.size()));
    }
    const float* c = d2_correction_.data();
    mixed_model = d2_half_.Resize(d);
    for (std::size_t k = 0; k < d; ++k) mixed_model[k] = (model[k] - lr * grad[k]) + c[k];
  }
  const float* to_send = mixed_model;
  if (send_transform_) {
    float* sent = sent_.Resize(d);
    std::copy(mixed_model, mixed_model + d, sent);
    send_transform_(step, sent, d);
    to_send = sent;
  }
  const uint8_t* payload = reinterpret_cast<const uint8_t*>(to_send);
  std::size_t payload_size = d * sizeof(float);
  std::size_t max_size = payload_size;
  if (choco) {
    const bool same_members = choco_members_.size() == members.size() &&
                              std::equal(members.begin(), members.end(), choco_members_.data());
    if (choco_public_.size() != d || !same_members) {
      float* x_public = choco_public_.Resize(d);
      std::fill(x_public, x_public + d, 0.0f);
      choco_replicas_.Resize(0);
      std::copy(members.begin(), members.end(), choco_members_.Resize(members.size()));
    }
    // x_i - lr g_i is written into the model only once the step succeeds:
    // a failed step leaves the model as it was (the caller repeats it).
    float* diff = choco_diff_.Resize(d);
    const float* x_public = choco_public_.data();
    for (std::size_t k = 0; k < d; ++k) {
      const float stepped = model[k] - lr * grad[k];
      diff[k] = stepped - x_public[k];
    }
    to_send = diff;
  }
  if (codec != nullptr) {
    max_size = codec->MaxEncodedSize(d);
    uint8_t* encoded = encoded_.size() < max_size ? encoded_.Resize(max_size) : encoded_.data();
    auto size = codec->Encode(to_send, d, context, encoded, encoded_.size());
    if (!size.ok()) return size.status();
    payload = encoded;
    payload_size = *size;
    // x'_self: the own model through the same channel.
    FEDRT_RETURN_IF_ERROR(codec->Decode(payload, payload_size, context, own_recovered, d,
                                        codec->needs_side_info() ? mixed_model : nullptr));
    if (send_transform_) std::copy(mixed_model, mixed_model + d, own_recovered);  // it mixes its honest model
  } else {
    std::copy(mixed_model, mixed_model + d, own_recovered);
  }
  const std::vector<Neighbour>& neighbours = context_.neighbours();
  const std::size_t count = neighbours.size();
  // The ring sends right first, then left.
  const std::string_view spec = codec != nullptr ? codec->spec().view() : std::string_view();
  for (std::size_t i = count; i-- > 0;) {
    FEDRT_RETURN_IF_ERROR(Send(neighbours[i].rank, step, spec, payload, payload_size, &stats->bytes_sent, deadline));
  }
  uint8_t* const received = received_.Resize(count * max_size);
  std::size_t* const received_sizes = received_sizes_.Resize(count);
  float* const recovered = recovered_.Resize(count * d);
  uint8_t* const got = got_.Resize(count);
  MoniquaNeighbour* const mix = mix_.Resize(count);
  std::fill(got, got + count, uint8_t{0});
  std::size_t mixed = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const uint32_t from = neighbours[i].rank;
    uint8_t* in = received + i * max_size;
    float* x = recovered + i * d;
    uint64_t sender_step = step;
    Status s = Receive(from, deadline, step, max_size, in, &received_sizes[i], &sender_step);
    if (s.code() == StatusCode::kCancelled && context_.failed_rank() < 0) continue;  // it left: its weight stays here
    if (!s.ok()) return s;
    const std::size_t in_size = received_sizes[i];
    if (codec == nullptr) {
      if (in_size != d * sizeof(float)) {
        return context_.Fail(static_cast<int>(from), context_.Named(from, Corrupt("gossip model of the wrong size")));
      }
      std::memcpy(x, in, in_size);
    } else {
      CodecContext c = context;
      c.round = static_cast<uint32_t>(sender_step);
      c.sender_id = from;
      if (moniqua) {
        std::size_t near_wrap = 0;
        MoniquaWraps checked;
        s = MoniquaDecode(*codec, in, in_size, c, mixed_model, x, d, -1.0f, &near_wrap, &checked);
        // With check=N the exact count over the checked coordinates, else
        // the near-boundary heuristic.
        stats->wrap_count += checked.checked > 0 ? checked.wrapped : near_wrap;
        stats->wrap_checked += checked.checked;
      } else {
        s = codec->Decode(in, in_size, c, x, d, codec->needs_side_info() ? mixed_model : nullptr);
      }
      if (!s.ok()) return context_.Fail(static_cast<int>(from), context_.Named(from, s));
    }
    if (defense_.clip > 0) ClipToOwn(x, d);
    mix[mixed++] = {x, gamma * neighbours[i].weight};
    got[i] = 1;
  }
  if (choco) {
    // Every copy of x^_j is the same sum of the same decoded q_j, bit for
    // bit, so the mixing keeps the mean up to one step's rounding. A
    // neighbour that left keeps its last copy (it no longer changes).
    if (choco_replicas_.size() < count * d) {
      const std::size_t had = choco_replicas_.size();
      float* replicas = choco_replicas_.Resize(count * d);
      std::fill(replicas + had, replicas + count * d, 0.0f);
    }
    float* const replicas = choco_replicas_.data();
    float* const x_public = choco_public_.data();
    for (std::size_t k = 0; k < d; ++k) model[k] = model[k] - lr * grad[k];
    for (std::size_t k = 0; k < d; ++k) x_public[k] = x_public[k] + own_recovered[k];
    mixed = 0;
    for (std::size_t i = 0; i < count; ++i) {
      float* replica = replicas + i * d;
      if (got[i] != 0) {
        const float* q = recovered + i * d;
        for (std::size_t k = 0; k < d; ++k) replica[k] = replica[k] + q[k];
      }
      mix[mixed++] = {replica, choco_gamma_ * neighbours[i].weight};
    }
    // x_i = x_i + sum_j gamma W_ij (x^_j - x^_i): the mixing step without a gradient (taken before).
    MoniquaMixStep(model, x_public, mix, mixed, 0.0f, own_recovered, d);
  } else if (defended) {
    Defend(model, grad, d, lr, mixed);
  } else if (d2) {
    // M, the mixing correction of the half steps; x = the half step + M.
    float* const c = d2_correction_.data();
    float* const m = d2_half_.data();  // the half step is no longer needed: recomputed below
    std::fill(m, m + d, 0.0f);
    MoniquaMixStep(m, own_recovered, mix, mixed, 0.0f, own_recovered, d);
    const float keep = 1.0f - d2_leak_;
    for (std::size_t k = 0; k < d; ++k) {
      model[k] = ((model[k] - lr * grad[k]) + c[k]) + m[k];
      c[k] = keep * c[k] + d2_gain_ * m[k];
    }
  } else {
    MoniquaMixStep(model, own_recovered, mix, mixed, lr, grad, d);
  }
  total_bytes_sent_ += stats->bytes_sent;
  return Status::Ok();
}

}  // namespace peer
}  // namespace fedrt
