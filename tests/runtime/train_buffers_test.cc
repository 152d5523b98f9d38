// Training on caller-provided buffers: the size queries, the parameters in
// the caller's memory, no allocation during a step, and the same bits as the
// owning API.
//
// Heap allocations are counted with tests/support/allocation_counter.h (the
// malloc family too on glibc builds without AddressSanitizer), so that every
// one the process makes while counting is seen, including fedrt's aligned
// buffers and any made by OpenBLAS.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "allocation_counter.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/runtime/trainer.h"

namespace fedrt {
namespace {

constexpr int kBatch = 16;
const char* const kSpecs[] = {"mlp:64-32-16-10", "cnn:8x8x1-c4k3-p2-d16-10"};

SgdOptions Options() {
  SgdOptions o;
  o.schedule.base_lr = 0.05;
  o.momentum = 0.9f;
  o.weight_decay = 1e-4f;
  o.clip_norm = 5.0f;
  return o;
}

// A deterministic batch for step `s`.
void MakeBatch(std::size_t inputs, int step, std::vector<float>* x, std::vector<uint8_t>* y) {
  x->resize(inputs * kBatch);
  y->resize(kBatch);
  uint32_t state = 12345u + static_cast<uint32_t>(step) * 7919u;
  for (float& v : *x) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
  }
  for (int n = 0; n < kBatch; ++n) (*y)[static_cast<std::size_t>(n)] = static_cast<uint8_t>((n + step) % 10);
}

// Memory for one spec, carved from one arena, as firmware would.
struct Arena {
  TrainingBufferSizes sizes;
  std::vector<float> memory;
  TrainingBuffers buffers;
};

Arena MakeArena(const std::string& spec) {
  Arena a;
  Result<TrainingBufferSizes> sizes = QueryTrainingBufferSizes(spec, Options(), kBatch);
  REQUIRE(sizes.ok());
  a.sizes = *sizes;
  a.memory.assign(a.sizes.total_floats(), -1.0f);  // garbage the model must not rely on
  Result<TrainingBuffers> carved = CarveTrainingBuffers(a.sizes, {a.memory.data(), a.memory.size()});
  REQUIRE(carved.ok());
  a.buffers = *carved;
  return a;
}

// A model and optimizer built on an arena, as firmware would build them.
struct OnArena {
  Arena arena;
  Result<Model> model = Status(StatusCode::kNotFound, "not built");
  Result<Sgd> sgd = Status(StatusCode::kNotFound, "not built");
};

std::unique_ptr<OnArena> BuildOnArena(const std::string& spec, uint64_t seed) {
  auto t = std::make_unique<OnArena>();
  t->arena = MakeArena(spec);
  const TrainingBuffers& b = t->arena.buffers;
  t->model = Model::CreateInBuffers(spec, seed, kBatch, b.parameters, b.gradients, b.workspace);
  REQUIRE(t->model.ok());
  t->sgd = Sgd::CreateInBuffer(Options(), t->model->parameter_count(), b.optimizer_state);
  REQUIRE(t->sgd.ok());
  return t;
}

TEST_CASE("the size queries agree with what an owning model and optimizer hold") {
  for (const char* spec : kSpecs) {
    CAPTURE(spec);
    Result<Model> owning = Model::Create(spec, 3);
    REQUIRE(owning.ok());
    Result<ModelBufferSizes> sizes = QueryModelBufferSizes(spec, kBatch);
    REQUIRE(sizes.ok());
    CHECK(sizes->parameters == owning->parameter_count());
    CHECK(sizes->gradients == owning->parameter_count());
    // At least the logits and the two gradient buffers (no buffer is the input's size: its gradient is never computed).
    CHECK(sizes->workspace >= 3 * kBatch * static_cast<std::size_t>(owning->num_classes()));
    Result<ModelBufferSizes> larger = QueryModelBufferSizes(spec, 2 * kBatch);
    REQUIRE(larger.ok());
    CHECK(larger->workspace > sizes->workspace);
    Result<TrainingBufferSizes> training = QueryTrainingBufferSizes(spec, Options(), kBatch);
    REQUIRE(training.ok());
    CHECK(training->optimizer_state == owning->parameter_count());
    CHECK(training->workspace == sizes->workspace);
    SgdOptions plain = Options();
    plain.momentum = 0.0f;
    CHECK(QueryTrainingBufferSizes(spec, plain, kBatch)->optimizer_state == 0);
  }
  CHECK(QueryModelBufferSizes("mlp:10", kBatch).status().code() == StatusCode::kInvalidArgument);
  CHECK(QueryModelBufferSizes("mlp:64-10", 0).status().code() == StatusCode::kInvalidArgument);
  SgdOptions bad = Options();
  bad.momentum = 2.0f;
  CHECK(QueryTrainingBufferSizes("mlp:64-10", bad, kBatch).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a model and optimizer on caller buffers keep their state in the caller's memory") {
  for (const char* spec : kSpecs) {
    CAPTURE(spec);
    std::unique_ptr<OnArena> t = BuildOnArena(spec, 3);
    const Arena& a = t->arena;
    const TrainingBuffers& b = a.buffers;
    Result<Model>& model = t->model;
    Result<Sgd>& sgd = t->sgd;
    CHECK(model->uses_caller_buffers());
    CHECK(model->batch_capacity() == kBatch);
    CHECK(model->parameters() == b.parameters.data);
    CHECK(model->gradients() == b.gradients.data);
    CHECK(sgd->velocity() == b.optimizer_state.data);
    // The pieces are in the arena, in order, 64-byte apart from its start.
    CHECK(b.parameters.data == a.memory.data());
    CHECK(b.gradients.data >= b.parameters.data + b.parameters.size);
    CHECK(b.workspace.data + b.workspace.size <= a.memory.data() + a.memory.size());
    CHECK((b.gradients.data - a.memory.data()) % 16 == 0);
    CHECK((b.workspace.data - a.memory.data()) % 16 == 0);
    // Initialised in place: weights set, velocity zeroed.
    CHECK(a.memory[0] != -1.0f);
    CHECK(sgd->velocity()[0] == 0.0f);

    std::vector<float> x;
    std::vector<uint8_t> y;
    MakeBatch(model->input_size(), 0, &x, &y);
    const std::vector<float> before(b.parameters.data, b.parameters.data + b.parameters.size);
    REQUIRE(TrainStep(*model, *sgd, x.data(), y.data(), kBatch).ok());
    CHECK(std::memcmp(before.data(), b.parameters.data, sizeof(float) * before.size()) != 0);
    CHECK(b.optimizer_state.data[0] != 0.0f);
    // A moved model still works on the same memory.
    Model moved = std::move(model).value();
    CHECK(moved.parameters() == b.parameters.data);
    CHECK(TrainStep(moved, *sgd, x.data(), y.data(), kBatch).ok());
    // Smaller batches fit; larger ones do not, and nothing grows.
    CHECK(TrainStep(moved, *sgd, x.data(), y.data(), kBatch / 2).ok());
    std::vector<float> big(2 * x.size());
    std::vector<uint8_t> big_labels(2 * y.size());
    Result<BatchLoss> too_big = TrainStep(moved, *sgd, big.data(), big_labels.data(), 2 * kBatch);
    CHECK(too_big.status().code() == StatusCode::kOutOfRange);
    CHECK(moved.batch_capacity() == kBatch);
  }
}

TEST_CASE("buffers that are too small or missing are refused with the sizes") {
  const char* spec = kSpecs[1];
  Arena a = MakeArena(spec);
  TrainingBuffers b = a.buffers;
  FloatSpan short_workspace{b.workspace.data, b.workspace.size - 1};
  Result<Model> model = Model::CreateInBuffers(spec, 3, kBatch, b.parameters, b.gradients, short_workspace);
  CHECK(model.status().code() == StatusCode::kInvalidArgument);
  CHECK(model.status().message().find("workspace") != std::string::npos);
  CHECK(model.status().message().find(std::to_string(b.workspace.size)) != std::string::npos);
  CHECK(Model::CreateInBuffers(spec, 3, kBatch, {}, b.gradients, b.workspace).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(Model::CreateInBuffers(spec, 3, kBatch, b.parameters, {b.gradients.data, 3}, b.workspace).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(Model::CreateInBuffers(spec, 3, 0, b.parameters, b.gradients, b.workspace).status().code() ==
        StatusCode::kInvalidArgument);
  // A workspace for 16 examples does not serve a model built for 32.
  CHECK_FALSE(Model::CreateInBuffers(spec, 3, 2 * kBatch, b.parameters, b.gradients, b.workspace).ok());
  CHECK(Sgd::CreateInBuffer(Options(), b.parameters.size, {b.optimizer_state.data, 10}).status().code() ==
        StatusCode::kInvalidArgument);
  SgdOptions plain = Options();
  plain.momentum = 0.0f;
  Result<Sgd> no_state = Sgd::CreateInBuffer(plain, b.parameters.size, {});
  REQUIRE(no_state.ok());
  CHECK(no_state->velocity_size() == 0);
  CHECK(CarveTrainingBuffers(a.sizes, {a.memory.data(), a.sizes.total_floats() - 1}).status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("a training step on caller buffers allocates nothing") {
  if (testing::CountsMalloc()) {
    MESSAGE("counting operator new and the malloc family");
    // The counter works: an aligned buffer goes through posix_memalign.
    CHECK(testing::AllocationsDuring([] { AlignedArray<float> probe(100); CHECK(probe.ok()); }) >= 1);
  } else {
    MESSAGE("counting operator new only (the sanitizer owns malloc)");
  }
  CHECK(testing::AllocationsDuring([] { std::vector<int> probe(3); CHECK(probe.size() == 3); }) >= 1);
  for (const char* spec : kSpecs) {
    CAPTURE(spec);
    std::unique_ptr<OnArena> t = BuildOnArena(spec, 5);
    Result<Model>& model = t->model;
    Result<Sgd>& sgd = t->sgd;
    std::vector<float> x;
    std::vector<uint8_t> y;
    MakeBatch(model->input_size(), 0, &x, &y);
    // One step first: OpenBLAS sets up its thread buffers on its first call.
    REQUIRE(TrainStep(*model, *sgd, x.data(), y.data(), kBatch).ok());
    bool ok = true;
    std::vector<int> predictions(kBatch);
    const long allocations = testing::AllocationsDuring([&] {
      for (int s = 0; s < 10; ++s) ok = ok && TrainStep(*model, *sgd, x.data(), y.data(), kBatch - s % 3).ok();
      ok = ok && model->Evaluate(x.data(), y.data(), kBatch, predictions.data()).ok();
    });
    CHECK(ok);
    CHECK(allocations == 0);
  }
}

TEST_CASE("an owning model allocates nothing in a step once its workspace holds the batch") {
  Result<Model> model = Model::Create(kSpecs[1], 5);
  REQUIRE(model.ok());
  Result<Sgd> sgd = Sgd::Create(Options(), model->parameter_count());
  REQUIRE(sgd.ok());
  REQUIRE(model->Reserve(kBatch).ok());
  std::vector<float> x;
  std::vector<uint8_t> y;
  MakeBatch(model->input_size(), 0, &x, &y);
  REQUIRE(TrainStep(*model, *sgd, x.data(), y.data(), kBatch).ok());
  bool ok = true;
  const long allocations = testing::AllocationsDuring([&] {
    for (int s = 0; s < 5; ++s) ok = ok && TrainStep(*model, *sgd, x.data(), y.data(), kBatch).ok();
  });
  CHECK(ok);
  CHECK(allocations == 0);
}

TEST_CASE("caller buffers and the owning API train to the same bits from the same seed") {
  for (const char* spec : kSpecs) {
    CAPTURE(spec);
    std::unique_ptr<OnArena> t = BuildOnArena(spec, 9);
    Result<Model>& in_buffers = t->model;
    Result<Sgd>& in_buffers_sgd = t->sgd;
    Result<Model> owning = Model::Create(spec, 9);
    REQUIRE(owning.ok());
    Result<Sgd> owning_sgd = Sgd::Create(Options(), owning->parameter_count());
    REQUIRE(owning_sgd.ok());
    const std::size_t count = owning->parameter_count();
    CHECK(std::memcmp(owning->parameters(), in_buffers->parameters(), sizeof(float) * count) == 0);
    std::vector<float> x;
    std::vector<uint8_t> y;
    for (int step = 0; step < 30; ++step) {
      MakeBatch(owning->input_size(), step, &x, &y);
      const int batch = kBatch - step % 4;
      Result<BatchLoss> l1 = TrainStep(*owning, *owning_sgd, x.data(), y.data(), batch);
      Result<BatchLoss> l2 = TrainStep(*in_buffers, *in_buffers_sgd, x.data(), y.data(), batch);
      REQUIRE(l1.ok());
      REQUIRE(l2.ok());
      CHECK(l1->loss == l2->loss);
    }
    CHECK(std::memcmp(owning->parameters(), in_buffers->parameters(), sizeof(float) * count) == 0);
    CHECK(std::memcmp(owning_sgd->velocity(), in_buffers_sgd->velocity(), sizeof(float) * count) == 0);
    CHECK(std::memcmp(owning->parameters(), Model::Create(spec, 9)->parameters(), sizeof(float) * count) != 0);
  }
}

}  // namespace
}  // namespace fedrt
