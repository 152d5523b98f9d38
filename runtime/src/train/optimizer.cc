#include "fedrt/runtime/optimizer.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

namespace fedrt {

double LrSchedule::LearningRate(uint64_t step) const {
  switch (kind) {
    case LrScheduleKind::kConstant: return base_lr;
    case LrScheduleKind::kStep:
      return base_lr * std::pow(gamma, static_cast<double>(step / (step_size == 0 ? 1 : step_size)));
    case LrScheduleKind::kCosine: {
      if (total_steps == 0 || step >= total_steps) return min_lr;
      const double progress = static_cast<double>(step) / static_cast<double>(total_steps);
      return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + std::cos(3.141592653589793 * progress));
    }
  }
  return base_lr;
}

Status ValidateSgdOptions(const SgdOptions& o) {
  const LrSchedule& s = o.schedule;
  if (!(s.base_lr > 0.0) || !std::isfinite(s.base_lr)) return InvalidArgument("learning rate must be positive and finite");
  if (!(o.momentum >= 0.0f && o.momentum < 1.0f)) return InvalidArgument("momentum must be in [0, 1)");
  if (o.nesterov && o.momentum == 0.0f) return InvalidArgument("Nesterov momentum needs momentum > 0");
  if (!(o.weight_decay >= 0.0f) || !std::isfinite(o.weight_decay)) return InvalidArgument("weight decay must be >= 0");
  if (!(o.clip_norm >= 0.0f) || !std::isfinite(o.clip_norm)) return InvalidArgument("clip norm must be >= 0 (0: off)");
  if (s.kind == LrScheduleKind::kStep && (s.step_size == 0 || !(s.gamma > 0.0))) {
    return InvalidArgument("step schedule needs step_size > 0 and gamma > 0");
  }
  if (s.kind == LrScheduleKind::kCosine && (s.total_steps == 0 || !(s.min_lr >= 0.0) || s.min_lr > s.base_lr)) {
    return InvalidArgument("cosine schedule needs total_steps > 0 and 0 <= min_lr <= base_lr");
  }
  return Status::Ok();
}

std::size_t Sgd::StateFloats(const SgdOptions& options, std::size_t parameter_count) {
  return options.momentum > 0.0f ? parameter_count : 0;
}

Result<Sgd> Sgd::Unbound(const SgdOptions& options, std::size_t parameter_count) {
  FEDRT_RETURN_IF_ERROR(ValidateSgdOptions(options));
  Sgd sgd;
  sgd.options_ = options;
  sgd.count_ = parameter_count;
  sgd.velocity_size_ = StateFloats(options, parameter_count);
  return sgd;
}

Result<Sgd> Sgd::Create(const SgdOptions& options, std::size_t parameter_count) {
  Result<Sgd> unbound = Unbound(options, parameter_count);
  if (!unbound.ok()) return unbound.status();
  Sgd sgd = std::move(unbound).value();
  if (sgd.velocity_size_ > 0) {
    if (!sgd.owned_velocity_.Resize(sgd.velocity_size_)) {
      return Status(StatusCode::kResourceExhausted, "cannot allocate the momentum buffer");
    }
    sgd.velocity_ = sgd.owned_velocity_.data();
  }
  return sgd;
}

Result<Sgd> Sgd::CreateInBuffer(const SgdOptions& options, std::size_t parameter_count, FloatSpan state) {
  Result<Sgd> unbound = Unbound(options, parameter_count);
  if (!unbound.ok()) return unbound.status();
  Sgd sgd = std::move(unbound).value();
  if (sgd.velocity_size_ > 0) {
    if (state.data == nullptr || state.size < sgd.velocity_size_) {
      return InvalidArgument("optimizer state buffer holds " + std::to_string(state.data == nullptr ? 0 : state.size) +
                             " floats, momentum needs " + std::to_string(sgd.velocity_size_));
    }
    sgd.velocity_ = state.data;
    std::memset(sgd.velocity_, 0, sizeof(float) * sgd.velocity_size_);
  }
  return sgd;
}

namespace {

enum class MomentumKind { kNone, kHeavyBall, kNesterov };

// One pass over the parameters, in the float operations (and order) of the
// update rule in optimizer.h, so the result is the same as separate passes
// for clipping, decay and the update. Specialised per option so that the
// loop vectorises.
template <bool kDecay, MomentumKind kMomentum>
void Update(std::size_t n, float* w, float* g, float* v, float scale, float decay, float lr, float mu) {
  for (std::size_t i = 0; i < n; ++i) {
    float gi = g[i] * scale;
    if (kDecay) gi = gi + decay * w[i];
    g[i] = gi;
    if (kMomentum == MomentumKind::kNone) {
      w[i] = w[i] - lr * gi;
    } else {
      const float vi = mu * v[i] + gi;
      v[i] = vi;
      const float d = kMomentum == MomentumKind::kNesterov ? gi + mu * vi : vi;
      w[i] = w[i] - lr * d;
    }
  }
}

template <bool kDecay>
void UpdateWith(MomentumKind kind, std::size_t n, float* w, float* g, float* v, float scale, float decay,
                float lr, float mu) {
  switch (kind) {
    case MomentumKind::kNone: Update<kDecay, MomentumKind::kNone>(n, w, g, v, scale, decay, lr, mu); break;
    case MomentumKind::kHeavyBall: Update<kDecay, MomentumKind::kHeavyBall>(n, w, g, v, scale, decay, lr, mu); break;
    case MomentumKind::kNesterov: Update<kDecay, MomentumKind::kNesterov>(n, w, g, v, scale, decay, lr, mu); break;
  }
}

}  // namespace

double Sgd::Step(float* w, float* g) {
  const std::size_t n = count_;
  double norm = 0.0;
  float scale = 1.0f;  // exact: g * 1.0f == g
  if (options_.clip_norm > 0.0f) {
    double sum2 = 0.0;
    for (std::size_t i = 0; i < n; ++i) sum2 += static_cast<double>(g[i]) * g[i];
    norm = std::sqrt(sum2);
    if (norm > options_.clip_norm) scale = static_cast<float>(options_.clip_norm / norm);
  }
  const float decay = options_.weight_decay;
  const float lr = static_cast<float>(current_lr());
  const float mu = options_.momentum;
  const MomentumKind kind = mu == 0.0f ? MomentumKind::kNone
                            : options_.nesterov ? MomentumKind::kNesterov : MomentumKind::kHeavyBall;
  if (decay > 0.0f) {
    UpdateWith<true>(kind, n, w, g, velocity_, scale, decay, lr, mu);
  } else {
    UpdateWith<false>(kind, n, w, g, velocity_, scale, decay, lr, mu);
  }
  ++step_;
  return norm;
}

}  // namespace fedrt
