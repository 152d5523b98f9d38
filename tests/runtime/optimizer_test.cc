#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "fedrt/runtime/optimizer.h"

namespace fedrt {
namespace {

TEST_CASE("learning-rate schedules follow constant, step and cosine shapes") {
  LrSchedule s;
  s.base_lr = 0.1;
  CHECK(s.LearningRate(0) == 0.1);
  CHECK(s.LearningRate(12345) == 0.1);
  s.kind = LrScheduleKind::kStep;
  s.step_size = 10;
  s.gamma = 0.5;
  CHECK(s.LearningRate(9) == doctest::Approx(0.1));
  CHECK(s.LearningRate(10) == doctest::Approx(0.05));
  CHECK(s.LearningRate(25) == doctest::Approx(0.025));
  s.kind = LrScheduleKind::kCosine;
  s.total_steps = 100;
  s.min_lr = 0.01;
  CHECK(s.LearningRate(0) == doctest::Approx(0.1));
  CHECK(s.LearningRate(50) == doctest::Approx(0.055));
  CHECK(s.LearningRate(100) == doctest::Approx(0.01));
  CHECK(s.LearningRate(1000) == doctest::Approx(0.01));
}

TEST_CASE("sgd with momentum and nesterov follows the documented update rule") {
  for (bool nesterov : {false, true}) {
    SgdOptions o;
    o.schedule.base_lr = 0.5;
    o.momentum = 0.9f;
    o.nesterov = nesterov;
    o.weight_decay = 0.1f;
    Result<Sgd> sgd = Sgd::Create(o, 2);
    REQUIRE(sgd.ok());
    std::vector<float> w = {1.0f, -2.0f};
    double v0 = 0, w0 = 1.0;
    for (int step = 0; step < 3; ++step) {
      std::vector<float> g = {0.25f, 0.0f};
      sgd->Step(w.data(), g.data());
      const double gd = 0.25 + 0.1 * w0;
      v0 = 0.9 * v0 + gd;
      w0 -= 0.5 * (nesterov ? gd + 0.9 * v0 : v0);
      CHECK(w[0] == doctest::Approx(w0).epsilon(1e-5));
    }
    CHECK(sgd->step() == 3);
    CHECK(sgd->velocity_size() == 2);
  }
}

TEST_CASE("clipping scales the gradient down to the global norm limit and reports the norm") {
  SgdOptions o;
  o.schedule.base_lr = 1.0;
  o.clip_norm = 1.0f;
  Result<Sgd> sgd = Sgd::Create(o, 2);
  REQUIRE(sgd.ok());
  std::vector<float> w = {0.0f, 0.0f}, g = {3.0f, 4.0f};
  CHECK(sgd->Step(w.data(), g.data()) == doctest::Approx(5.0));
  CHECK(w[0] == doctest::Approx(-0.6));
  CHECK(w[1] == doctest::Approx(-0.8));
  std::vector<float> small = {0.3f, 0.4f};
  sgd->Step(w.data(), small.data());
  CHECK(w[0] == doctest::Approx(-0.9));  // under the limit: unchanged
  CHECK(sgd->velocity_size() == 0);      // no momentum, no buffer
}

TEST_CASE("invalid optimizer options are rejected") {
  SgdOptions o;
  o.schedule.base_lr = 0.0;
  CHECK_FALSE(Sgd::Create(o, 1).ok());
  o.schedule.base_lr = 0.1;
  o.momentum = 1.0f;
  CHECK_FALSE(Sgd::Create(o, 1).ok());
  o.momentum = 0.0f;
  o.nesterov = true;
  CHECK_FALSE(Sgd::Create(o, 1).ok());
  o.nesterov = false;
  o.schedule.kind = LrScheduleKind::kCosine;
  CHECK(Sgd::Create(o, 1).status().code() == StatusCode::kInvalidArgument);
  o.schedule.total_steps = 10;
  CHECK(Sgd::Create(o, 1).ok());
}

}  // namespace
}  // namespace fedrt
