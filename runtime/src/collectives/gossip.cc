// Gossip D-PSGD (collectives.h, Gossip): full precision, Moniqua-coded, or
// with CHOCO replicas. A model goes to each neighbour as GossipModel chunks
// {step, source rank, codec, chunk} of at most one frame each.
#include <algorithm>
#include <cmath>
#include <cstring>

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

Gossip::Gossip(CollectiveContext& context) : context_(context) {}

Gossip::~Gossip() = default;

Status Gossip::Send(uint32_t to, uint64_t step, const std::string& spec, const uint8_t* bytes, std::size_t size,
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

Status Gossip::Receive(uint32_t from, Deadline deadline, uint64_t step, std::size_t max_size,
                       std::vector<uint8_t>* out, uint64_t* sender_step) {
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
      out->resize(static_cast<std::size_t>(p.total_size));  // bounded by max_size above
      *sender_step = m->step;
    }
    const bool step_ok = k == 0 ? (m->step == step || lenient_step) : m->step == *sender_step;
    if (!step_ok || m->source_rank != from || p.index != k || p.count != count || p.offset != received ||
        p.total_size != out->size() || p.size > out->size() - received) {
      return context_.Fail(static_cast<int>(from), context_.Named(from, Corrupt("unexpected gossip chunk (step " +
                                                                                std::to_string(m->step) + ")")));
    }
    if (p.size > 0) std::memcpy(out->data() + received, p.data, p.size);
    received += p.size;
  }
  if (received != out->size()) {
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

void Gossip::SetTensorTable(std::vector<std::size_t> tensor_sizes) {
  tensor_sizes_ = std::move(tensor_sizes);
  codec_.reset();  // made again, over the new table, by the next Step
}

// GossipDefense::clip: x = x'_self + clip(x - x'_self), in double.
void Gossip::ClipToOwn(float* x, std::size_t d) const {
  double norm2 = 0;
  for (std::size_t k = 0; k < d; ++k) {
    const double diff = static_cast<double>(x[k]) - static_cast<double>(own_recovered_[k]);
    norm2 += diff * diff;
  }
  const double norm = std::sqrt(norm2);
  if (!(norm > defense_.clip)) return;
  const double scale = defense_.clip / norm;
  for (std::size_t k = 0; k < d; ++k) {
    const double own = static_cast<double>(own_recovered_[k]);
    x[k] = static_cast<float>(own + scale * (static_cast<double>(x[k]) - own));
  }
}

// The defended mixing (GossipDefense): the neighbours heard are in mix_
// (their models, clipped already, and Metropolis weights). A rule other than
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
void Gossip::Defend(float* model, const float* grad, std::size_t d, float lr) {
  double neighbour_weight = 0;
  for (const MoniquaNeighbour& n : mix_) neighbour_weight += static_cast<double>(n.weight);
  if (defense_.rule.kind == AggregationKind::kMean) {
    MoniquaMixStep(model, own_recovered_.data(), mix_.data(), mix_.size(), lr, grad, d);
    return;
  }
  models_.assign(1, own_recovered_.data());
  // The own weight is what the neighbours leave (Metropolis: positive).
  weights_.assign(1, std::max(1e-6, 1.0 - neighbour_weight));
  for (const MoniquaNeighbour& n : mix_) {
    models_.push_back(n.recovered);
    weights_.push_back(static_cast<double>(n.weight));
  }
  combined_.resize(d);
  const Status combined = Aggregate(defense_.rule, models_, weights_, d, combined_.data());
  // Too few models (neighbours left) or a value that is not finite: this
  // step keeps the own model (what a peer alone does).
  if (!combined.ok()) {
    for (std::size_t k = 0; k < d; ++k) model[k] = model[k] - lr * grad[k];
    return;
  }
  // As the mean path, against x'_self (the own model through the channel), so
  // a codec's error cancels where the neighbourhood agrees.
  for (std::size_t k = 0; k < d; ++k) {
    model[k] = model[k] + 0.5f * (combined_[k] - own_recovered_[k]) - lr * grad[k];
  }
}

Status Gossip::Step(float* model, const float* grad, std::size_t d, float lr, const std::string& codec_spec,
                    uint64_t step, GossipStats* stats) {
  const Deadline deadline = context_.StepDeadline();
  *stats = GossipStats{};
  FEDRT_RETURN_IF_ERROR(context_.CheckUsable());
  if (codec_spec != spec_ || (codec_ == nullptr && !codec_spec.empty())) {
    codec_.reset();
    spec_ = codec_spec;
    choco_gamma_ = 0;
    choco_public_.clear();
    if (!codec_spec.empty()) {
      std::string inner = codec_spec;
      if (IsChocoSpec(codec_spec)) {
        auto choco = ParseChocoSpec(codec_spec);
        if (!choco.ok()) return choco.status();
        choco_gamma_ = choco->gamma;
        inner = choco->codec;
      }
      auto made = MakeCodec(inner);
      if (!made.ok()) return made.status();
      if (choco_gamma_ > 0 && (*made)->needs_side_info()) {
        return InvalidArgument("'" + codec_spec +
                               "': replica gossip needs a codec that decodes without side information");
      }
      codec_ = std::move(*made);
      if (!tensor_sizes_.empty() && EncodesPerTensor(*codec_)) {
        auto tensors = TensorSetCodec::Create(std::move(codec_), tensor_sizes_);
        if (!tensors.ok()) return tensors.status();
        codec_ = std::move(*tensors);
      }
    }
  }
  if (!tensor_sizes_.empty()) {
    std::size_t total = 0;
    for (std::size_t size : tensor_sizes_) total += size;
    if (d != total) {
      return InvalidArgument("a model of " + std::to_string(d) + " parameters for a tensor table of " +
                             std::to_string(total));
    }
  }
  Codec* codec = codec_.get();
  const bool choco = choco_gamma_ > 0;
  bool moniqua = false;
  float gamma = 1.0f;  // Moniqua's consensus step size: x_j += gamma sum_i W_ji (x'_i - x'_j)
  if (codec != nullptr) {
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
  if (send_transform_ && choco) {
    return InvalidArgument("gossip codec '" + codec_spec + "' sends replica differences, not models: no send transform");
  }
  if (defended && context_.neighbours().size() + 1 < MinimumUpdates(defense_.rule)) {
    return InvalidArgument("aggregation " + AggregationRuleName(defense_.rule) + " needs " +
                           std::to_string(MinimumUpdates(defense_.rule)) + " models per gossip step; this peer has " +
                           std::to_string(context_.neighbours().size()) + " neighbours (" +
                           std::to_string(context_.neighbours().size() + 1) + " with its own)");
  }
  own_recovered_.resize(d);
  CodecContext context;
  context.round = static_cast<uint32_t>(step);
  context.sender_id = context_.rank();
  const float* to_send = model;
  if (send_transform_) {
    sent_.assign(model, model + d);
    send_transform_(step, sent_.data(), d);
    to_send = sent_.data();
  }
  const uint8_t* payload = reinterpret_cast<const uint8_t*>(to_send);
  std::size_t payload_size = d * sizeof(float);
  std::size_t max_size = payload_size;
  if (choco) {
    if (choco_public_.size() != d || choco_members_ != context_.members()) {
      choco_public_.assign(d, 0.0f);
      choco_replicas_.clear();
      choco_members_ = context_.members();
    }
    // x_i - lr g_i is written into the model only once the step succeeds:
    // a failed step leaves the model as it was (the caller repeats it).
    choco_diff_.resize(d);
    for (std::size_t k = 0; k < d; ++k) {
      const float stepped = model[k] - lr * grad[k];
      choco_diff_[k] = stepped - choco_public_[k];
    }
    to_send = choco_diff_.data();
  }
  if (codec != nullptr) {
    max_size = codec->MaxEncodedSize(d);
    if (encoded_.size() < max_size) encoded_.resize(max_size);
    auto size = codec->Encode(to_send, d, context, encoded_.data(), encoded_.size());
    if (!size.ok()) return size.status();
    payload = encoded_.data();
    payload_size = *size;
    // x'_self: the own model through the same channel.
    FEDRT_RETURN_IF_ERROR(codec->Decode(payload, payload_size, context, own_recovered_.data(), d,
                                        codec->needs_side_info() ? model : nullptr));
    if (send_transform_) std::copy(model, model + d, own_recovered_.begin());  // it mixes its honest model
  } else {
    std::copy(model, model + d, own_recovered_.begin());
  }
  const std::vector<Neighbour>& neighbours = context_.neighbours();
  // The ring sends right first, then left.
  for (std::size_t i = neighbours.size(); i-- > 0;) {
    FEDRT_RETURN_IF_ERROR(Send(neighbours[i].rank, step, codec ? codec->spec() : std::string(), payload,
                               payload_size, &stats->bytes_sent, deadline));
  }
  if (received_.size() < neighbours.size()) {
    received_.resize(neighbours.size());
    recovered_.resize(neighbours.size());
  }
  mix_.clear();
  std::vector<bool> got(neighbours.size(), false);
  for (std::size_t i = 0; i < neighbours.size(); ++i) {
    const uint32_t from = neighbours[i].rank;
    uint64_t sender_step = step;
    Status s = Receive(from, deadline, step, max_size, &received_[i], &sender_step);
    if (s.code() == StatusCode::kCancelled && context_.failed_rank() < 0) continue;  // it left: its weight stays here
    if (!s.ok()) return s;
    recovered_[i].resize(d);
    if (codec == nullptr) {
      if (received_[i].size() != d * sizeof(float)) {
        return context_.Fail(static_cast<int>(from), context_.Named(from, Corrupt("gossip model of the wrong size")));
      }
      std::memcpy(recovered_[i].data(), received_[i].data(), received_[i].size());
    } else {
      CodecContext c = context;
      c.round = static_cast<uint32_t>(sender_step);
      c.sender_id = from;
      if (moniqua) {
        std::size_t near_wrap = 0;
        MoniquaWraps checked;
        s = MoniquaDecode(*codec, received_[i].data(), received_[i].size(), c, model, recovered_[i].data(), d,
                          -1.0f, &near_wrap, &checked);
        // With check=N the exact count over the checked coordinates, else
        // the near-boundary heuristic.
        stats->wrap_count += checked.checked > 0 ? checked.wrapped : near_wrap;
        stats->wrap_checked += checked.checked;
      } else {
        s = codec->Decode(received_[i].data(), received_[i].size(), c, recovered_[i].data(), d,
                          codec->needs_side_info() ? model : nullptr);
      }
      if (!s.ok()) return context_.Fail(static_cast<int>(from), context_.Named(from, s));
    }
    if (defense_.clip > 0) ClipToOwn(recovered_[i].data(), d);
    mix_.push_back({recovered_[i].data(), gamma * neighbours[i].weight});
    got[i] = true;
  }
  if (choco) {
    // Every copy of x^_j is the same sum of the same decoded q_j, bit for
    // bit, so the mixing keeps the mean up to one step's rounding. A
    // neighbour that left keeps its last copy (it no longer changes).
    choco_replicas_.resize(neighbours.size(), std::vector<float>(d, 0.0f));
    for (std::size_t k = 0; k < d; ++k) model[k] = model[k] - lr * grad[k];
    for (std::size_t k = 0; k < d; ++k) choco_public_[k] = choco_public_[k] + own_recovered_[k];
    mix_.clear();
    for (std::size_t i = 0; i < neighbours.size(); ++i) {
      if (got[i]) {
        std::vector<float>& replica = choco_replicas_[i];
        for (std::size_t k = 0; k < d; ++k) replica[k] = replica[k] + recovered_[i][k];
      }
      mix_.push_back({choco_replicas_[i].data(), choco_gamma_ * neighbours[i].weight});
    }
    // x_i = x_i + sum_j gamma W_ij (x^_j - x^_i): the mixing step without a gradient (taken before).
    MoniquaMixStep(model, choco_public_.data(), mix_.data(), mix_.size(), 0.0f, own_recovered_.data(), d);
  } else if (defended) {
    Defend(model, grad, d, lr);
  } else {
    MoniquaMixStep(model, own_recovered_.data(), mix_.data(), mix_.size(), lr, grad, d);
  }
  total_bytes_sent_ += stats->bytes_sent;
  return Status::Ok();
}

}  // namespace peer
}  // namespace fedrt
