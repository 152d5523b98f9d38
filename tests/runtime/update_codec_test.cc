// Updates travel tensor by tensor (MakeUpdateCodec, codecs/tensor_set.h):
// on real FedAvg updates, one scale per tensor is what makes dqsg with b=0
// accurate.
#include <doctest/doctest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/tensor_set.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/trainer.h"
#include "train_support.h"

namespace fedrt {
namespace {

// One device's FedAvg update: `steps` SGD steps from a fixed-seed model.
std::vector<float> TrainedUpdate(const Model& initial, const Dataset& data, std::size_t steps) {
  Result<Model> model = Model::Create(initial.spec().text, 7);
  REQUIRE(model.ok());
  const std::size_t d = model->parameter_count();
  std::vector<float> start(model->parameters(), model->parameters() + d);
  testing::TrainSteps(*model, data, steps);
  std::vector<float> update(d);
  for (std::size_t i = 0; i < d; ++i) update[i] = model->parameters()[i] - start[i];
  return update;
}

struct Measured {
  double error = 0;     // ||decoded - g||^2 / ||g||^2, mean over rounds
  std::size_t bytes = 0;
};

Measured Measure(Codec& codec, const std::vector<float>& g, int rounds) {
  Measured m;
  std::vector<uint8_t> payload(codec.MaxEncodedSize(g.size()));
  std::vector<float> decoded(g.size());
  double norm = 0;
  for (float v : g) norm += static_cast<double>(v) * v;
  for (int r = 0; r < rounds; ++r) {
    CodecContext context;
    context.session_seed = 11;
    context.round = static_cast<uint32_t>(r);
    context.sender_id = 5;
    Result<std::size_t> size = codec.Encode(g.data(), g.size(), context, payload.data(), payload.size());
    REQUIRE(size.ok());
    m.bytes = *size;
    REQUIRE(codec.Decode(payload.data(), *size, context, decoded.data(), decoded.size()).ok());
    double err = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const double e = static_cast<double>(decoded[i]) - g[i];
      err += e * e;
    }
    m.error += err / norm / rounds;
  }
  return m;
}

void CheckPerTensorBeatsOneScale(const char* model_spec, std::size_t steps) {
  Result<Model> model = Model::Create(model_spec, 7);
  REQUIRE(model.ok());
  const std::vector<float> g = TrainedUpdate(*model, testing::FashionMnistOrClusters(), steps);
  const std::vector<std::size_t> tensors = ModelTensorSizes(*model);
  REQUIRE(tensors.size() >= 4);
  // ec=pack: both spend exactly 3 bits per coordinate on symbols, so the
  // bytes differ only by each tensor's header, spec and scale (under 100
  // bytes a tensor: 0.5% of LeNet-300-100's update, 1.6% of the CNN's).
  std::unique_ptr<Codec> whole = std::move(MakeCodec("dqsg:s=2,b=0,ec=pack").value());
  std::unique_ptr<TensorSetCodec> per_tensor =
      std::move(MakeUpdateCodec(std::move(MakeCodec("dqsg:s=2,b=0,ec=pack").value()), tensors).value());
  REQUIRE(per_tensor->tensor_sizes() == tensors);
  const Measured one = Measure(*whole, g, 4);
  const Measured each = Measure(*per_tensor, g, 4);
  MESSAGE(std::string(model_spec) << ": normalized error, one scale " << one.error << " (" << one.bytes << " bytes), one per tensor "
                     << each.error << " (" << each.bytes << " bytes)");
  CHECK(each.error * 5 <= one.error);
  CHECK(each.bytes <= one.bytes + 100 * tensors.size());
}

TEST_CASE("on a trained lenet-300-100 update one dqsg scale per tensor has at most a fifth of one scale's error") {
  CheckPerTensorBeatsOneScale("mlp:784-300-100-10", 20);
}

TEST_CASE("on a trained cnn update one dqsg scale per tensor has at most a fifth of one scale's error") {
  CheckPerTensorBeatsOneScale("cnn:28x28x1-c8k5-p2-c16k5-p2-d128-10", 10);
}

// The star downlink's error: what the devices hold after `base` receives
// `model - base` encoded with `codec` (ApplyModelDelta, as the aggregator and
// the devices apply it), as ||held - model||^2 / ||model - base||^2.
double DownlinkError(Codec& codec, const std::vector<float>& model, const std::vector<float>& base) {
  const std::size_t d = model.size();
  std::vector<float> delta(d), held(d), scratch(d);
  double norm = 0;
  for (std::size_t i = 0; i < d; ++i) {
    delta[i] = model[i] - base[i];
    norm += static_cast<double>(delta[i]) * delta[i];
  }
  CodecContext context;
  context.session_seed = 11;
  context.round = 3;
  context.sender_id = 0xFFFFFFu;  // the broadcast
  std::vector<uint8_t> payload(codec.MaxEncodedSize(d));
  Result<std::size_t> size = codec.Encode(delta.data(), d, context, payload.data(), payload.size());
  REQUIRE(size.ok());
  REQUIRE(ApplyModelDelta(codec, payload.data(), *size, context, base.data(), held.data(), scratch.data(), d).ok());
  double err = 0;
  for (std::size_t i = 0; i < d; ++i) {
    const double e = static_cast<double>(held[i]) - model[i];
    err += e * e;
  }
  return err / norm;
}

TEST_CASE("a lenet-300-100 model broadcast with a dqsg downlink has one scale per tensor and at most one scale's error") {
  Result<Model> model = Model::Create("mlp:784-300-100-10", 7);
  REQUIRE(model.ok());
  const std::size_t d = model->parameter_count();
  const std::vector<std::size_t> tensors = ModelTensorSizes(*model);
  REQUIRE(tensors.size() == 6);
  // Round 0 sends the whole model (from zeros); a later round the change a
  // round of training made to it.
  const std::vector<float> initial(model->parameters(), model->parameters() + d);
  std::vector<float> trained = initial;
  const std::vector<float> update = TrainedUpdate(*model, testing::FashionMnistOrClusters(), 20);
  for (std::size_t i = 0; i < d; ++i) trained[i] += update[i];
  const std::vector<float> zeros(d, 0.0f);
  for (const char* spec : {"dqsg:s=16", "dqsg:s=4", "dqsg:s=2"}) {
    // As the aggregator builds its downlink codec: over the model's tensor table.
    std::unique_ptr<TensorSetCodec> per_tensor =
        std::move(MakeUpdateCodec(std::move(MakeCodec(spec).value()), tensors).value());
    REQUIRE(per_tensor->tensor_sizes() == tensors);
    std::unique_ptr<Codec> whole = std::move(MakeCodec(spec).value());
    const double model_each = DownlinkError(*per_tensor, initial, zeros);
    const double model_one = DownlinkError(*whole, initial, zeros);
    const double delta_each = DownlinkError(*per_tensor, trained, initial);
    const double delta_one = DownlinkError(*whole, trained, initial);
    MESSAGE(std::string(spec) << " downlink, normalized error: whole model " << model_each << " per tensor, " << model_one
                 << " one scale; round delta " << delta_each << " per tensor, " << delta_one << " one scale");
    CHECK(model_each <= model_one);
    CHECK(delta_each <= delta_one);
  }
}

TEST_CASE("update tensor tables: quantizers per tensor, the others one vector") {
  const std::vector<std::size_t> model = {6, 3, 4};
  for (const char* spec : {"dqsg", "ndqsg", "qsgd", "terngrad", "sign", "alq", "amq"}) {
    INFO(spec);
    CHECK(UpdateTensorSizes(*MakeCodec(spec).value(), model) == model);
  }
  for (const char* spec : {"fp32", "fp16", "bf16", "topk:k=2", "randk:k=2", "rtopk:k=2,r=4", "moniqua:theta=1"}) {
    INFO(spec);
    CHECK(UpdateTensorSizes(*MakeCodec(spec).value(), model) == std::vector<std::size_t>{13});
  }
}

}  // namespace
}  // namespace fedrt
