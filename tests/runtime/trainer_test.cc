#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fedrt/runtime/checkpoint.h"
#include "fedrt/runtime/trainer.h"
#include "train_support.h"

namespace fedrt {
namespace {

SgdOptions FullOptions() {
  SgdOptions o;
  o.schedule.kind = LrScheduleKind::kCosine;
  o.schedule.base_lr = 0.05;
  o.schedule.total_steps = 400;
  o.momentum = 0.9f;
  o.nesterov = true;
  o.weight_decay = 1e-4f;
  o.clip_norm = 5.0f;
  return o;
}

std::vector<float> TrainSteps(const char* spec, const Dataset& data, std::size_t steps) {
  Result<Model> model = Model::Create(spec, 21);
  REQUIRE(model.ok());
  Result<Sgd> sgd = Sgd::Create(FullOptions(), model->parameter_count());
  REQUIRE(sgd.ok());
  TrainOptions options;
  options.batch = 8;
  options.seed = 99;
  options.max_steps = steps;
  Result<EpochStats> stats = TrainEpoch(*model, *sgd, data, 0, options);
  REQUIRE(stats.ok());
  CHECK(stats->steps == steps);
  return std::vector<float>(model->parameters(), model->parameters() + model->parameter_count());
}

TEST_CASE("the same seed gives bit-identical weights after 100 steps, twice") {
  const Dataset flat = testing::Clusters(800, 1, 1, 16, 4, 1);
  const std::vector<float> a = TrainSteps("mlp:16-32-4", flat, 100);
  const std::vector<float> b = TrainSteps("mlp:16-32-4", flat, 100);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  const Dataset images = testing::Clusters(800, 2, 6, 6, 4, 2);
  const std::vector<float> c = TrainSteps("cnn:6x6x2-c4k3-p2-d8-4", images, 100);
  const std::vector<float> d = TrainSteps("cnn:6x6x2-c4k3-p2-d8-4", images, 100);
  CHECK(std::memcmp(c.data(), d.data(), c.size() * sizeof(float)) == 0);
}

TEST_CASE("training learns separable clusters and evaluation reports per-class accuracy") {
  const Dataset train = testing::Clusters(600, 1, 1, 12, 3, 3);
  const Dataset test = testing::Clusters(300, 1, 1, 12, 3, 4);
  Result<Model> model = Model::Create("mlp:12-16-3", 5);
  REQUIRE(model.ok());
  SgdOptions o;
  o.schedule.base_lr = 0.1;
  o.momentum = 0.9f;
  Result<Sgd> sgd = Sgd::Create(o, model->parameter_count());
  REQUIRE(sgd.ok());
  Result<Evaluation> before = EvaluateModel(*model, test, 64);
  REQUIRE(before.ok());
  TrainOptions options;
  options.batch = 32;
  double first_loss = 0;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    Result<EpochStats> stats = TrainEpoch(*model, *sgd, train, epoch, options);
    REQUIRE(stats.ok());
    CHECK(stats->examples == 600);
    CHECK(stats->steps == 19);  // 18 full batches and one of 24
    if (epoch == 0) first_loss = stats->loss;
  }
  Result<Evaluation> after = EvaluateModel(*model, test, 64);
  REQUIRE(after.ok());
  CHECK(after->loss < before->loss);
  CHECK(after->loss < first_loss);
  CHECK(after->accuracy > 0.95);
  REQUIRE(after->class_examples.size() == 3);
  CHECK(after->class_examples[0] + after->class_examples[1] + after->class_examples[2] == 300);
  for (std::size_t c = 0; c < 3; ++c) CHECK(after->ClassAccuracy(c) > 0.9);
  CHECK(after->ClassAccuracy(7) == 0.0);
}

TEST_CASE("training on a subset visits only that subset") {
  const Dataset train = testing::Clusters(100, 1, 1, 4, 2, 3);
  Result<Model> model = Model::Create("mlp:4-2", 5);
  Result<Sgd> sgd = Sgd::Create(SgdOptions{}, model->parameter_count());
  const std::vector<uint32_t> subset = {1, 5, 7, 99};
  TrainOptions options;
  options.batch = 3;
  options.subset = &subset;
  Result<EpochStats> stats = TrainEpoch(*model, *sgd, train, 0, options);
  REQUIRE(stats.ok());
  CHECK(stats->examples == 4);
  CHECK(stats->steps == 2);
  const std::vector<uint32_t> bad = {100};
  options.subset = &bad;
  CHECK(TrainEpoch(*model, *sgd, train, 0, options).status().code() == StatusCode::kOutOfRange);
}

TEST_CASE("a data set of the wrong shape is rejected before training") {
  const Dataset train = testing::Clusters(10, 1, 1, 5, 2, 3);
  Result<Model> model = Model::Create("mlp:4-2", 5);
  Result<Sgd> sgd = Sgd::Create(SgdOptions{}, model->parameter_count());
  Result<EpochStats> stats = TrainEpoch(*model, *sgd, train, 0, TrainOptions{});
  CHECK(stats.status().code() == StatusCode::kInvalidArgument);
  CHECK(stats.status().message().find("expects 4") != std::string::npos);
}

TEST_CASE("resuming from a checkpoint continues bit for bit like an uninterrupted run") {
  const Dataset train = testing::Clusters(160, 1, 1, 8, 4, 6);
  TrainOptions options;
  options.batch = 16;
  Result<Model> straight = Model::Create("mlp:8-8-4", 2);
  Result<Sgd> straight_sgd = Sgd::Create(FullOptions(), straight->parameter_count());
  for (uint64_t epoch = 0; epoch < 2; ++epoch) REQUIRE(TrainEpoch(*straight, *straight_sgd, train, epoch, options).ok());

  Result<Model> first = Model::Create("mlp:8-8-4", 2);
  Result<Sgd> first_sgd = Sgd::Create(FullOptions(), first->parameter_count());
  REQUIRE(TrainEpoch(*first, *first_sgd, train, 0, options).ok());
  const std::vector<uint8_t> bytes = EncodeCheckpoint(CaptureCheckpoint(*first, *first_sgd, 1));
  Result<Checkpoint> decoded = DecodeCheckpoint(bytes.data(), bytes.size(), "memory");
  REQUIRE(decoded.ok());
  CHECK(decoded->epoch == 1);
  CHECK(decoded->step == 10);

  Result<Model> resumed = Model::Create("mlp:8-8-4", 777);  // another init, overwritten
  Result<Sgd> resumed_sgd = Sgd::Create(FullOptions(), resumed->parameter_count());
  REQUIRE(RestoreCheckpoint(*decoded, *resumed, *resumed_sgd).ok());
  REQUIRE(TrainEpoch(*resumed, *resumed_sgd, train, decoded->epoch, options).ok());
  CHECK(resumed_sgd->step() == straight_sgd->step());
  CHECK(std::memcmp(resumed->parameters(), straight->parameters(), straight->parameter_count() * sizeof(float)) == 0);
}

}  // namespace
}  // namespace fedrt
