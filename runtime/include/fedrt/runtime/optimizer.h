// Stochastic gradient descent for the training core: momentum (heavy ball or
// Nesterov), L2 weight decay, learning-rate schedules and clipping of the
// gradient by its global L2 norm. One update, with g the gradient:
//   g = g * min(1, clip_norm / ||g||)     (clip_norm > 0)
//   g = g + weight_decay * w
//   v = momentum * v + g                   (momentum > 0)
//   d = nesterov ? g + momentum * v : v    (d = g without momentum)
//   w = w - lr(step) * d;  step = step + 1
// The velocity v and the step counter are the optimizer's state; checkpoints
// store both (checkpoint.h), so a resumed run continues exactly. The velocity
// (StateFloats floats) is allocated by Create or lives in caller memory
// (CreateInBuffer); Step allocates nothing.
//
// Thread-safety: an Sgd is not synchronized; one per model.
#ifndef FEDRT_RUNTIME_OPTIMIZER_H_
#define FEDRT_RUNTIME_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/platform/memory.h"
#include "fedrt/platform/status.h"

namespace fedrt {

enum class LrScheduleKind : int { kConstant = 0, kStep = 1, kCosine = 2 };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  double base_lr = 0.01;
  uint64_t step_size = 1000;  // kStep: multiply by gamma every step_size steps
  double gamma = 0.1;         // kStep
  uint64_t total_steps = 0;   // kCosine: from base_lr down to min_lr over total_steps
  double min_lr = 0.0;        // kCosine

  // The learning rate of update number `step` (0-based).
  double LearningRate(uint64_t step) const;
};

struct SgdOptions {
  LrSchedule schedule;
  float momentum = 0.0f;      // 0: plain SGD
  bool nesterov = false;      // needs momentum > 0
  float weight_decay = 0.0f;  // L2 coefficient, applied to every parameter
  float clip_norm = 0.0f;     // 0: no clipping
};

// InvalidArgument naming the bad field, or OK.
Status ValidateSgdOptions(const SgdOptions& options);

class Sgd {
 public:
  static Result<Sgd> Create(const SgdOptions& options, std::size_t parameter_count);
  // Floats of state (the velocity): parameter_count with momentum, else 0.
  static std::size_t StateFloats(const SgdOptions& options, std::size_t parameter_count);
  // The optimizer on caller memory: `state` holds at least StateFloats()
  // floats (may be empty without momentum), is zeroed here and must outlive
  // the optimizer.
  static Result<Sgd> CreateInBuffer(const SgdOptions& options, std::size_t parameter_count,
                                    FloatSpan state);

  // One update of parameters[0 .. parameter_count) from gradients, which are
  // modified in place (clipping and decay are folded into them), in one pass.
  // With clipping on, returns the gradient's global L2 norm before clipping;
  // without, 0 (the norm is not computed: it would cost one more pass).
  double Step(float* parameters, float* gradients);

  const SgdOptions& options() const { return options_; }
  std::size_t parameter_count() const { return count_; }
  uint64_t step() const { return step_; }
  void set_step(uint64_t step) { step_ = step; }
  double current_lr() const { return options_.schedule.LearningRate(step_); }
  // The momentum buffer (parameter_count() floats; empty without momentum).
  float* velocity() { return velocity_; }
  const float* velocity() const { return velocity_; }
  std::size_t velocity_size() const { return velocity_size_; }

 private:
  Sgd() = default;
  static Result<Sgd> Unbound(const SgdOptions& options, std::size_t parameter_count);  // no velocity yet
  SgdOptions options_;
  std::size_t count_ = 0;
  uint64_t step_ = 0;
  float* velocity_ = nullptr;
  std::size_t velocity_size_ = 0;
  AlignedArray<float> owned_velocity_;  // Create: the buffer behind velocity_
};

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_OPTIMIZER_H_
