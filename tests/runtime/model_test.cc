#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/runtime/model.h"

namespace fedrt {
namespace {

std::vector<float> Inputs(std::size_t count, uint32_t seed) {
  std::vector<float> v(count);
  uint32_t x = seed * 747796405u + 2891336453u;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(static_cast<int>(x >> 9) % 2000 - 1000) / 700.0f;
  }
  return v;
}

TEST_CASE("model specs describe layers, shapes and parameter tensors") {
  Result<Model> mlp = Model::Create("mlp:784-300-100-10", 1);
  REQUIRE(mlp.ok());
  CHECK(mlp->input_size() == 784);
  CHECK(mlp->num_classes() == 10);
  CHECK(mlp->parameter_count() == 784 * 300 + 300 + 300 * 100 + 100 + 100 * 10 + 10);
  REQUIRE(mlp->tensors().size() == 6);
  CHECK(mlp->tensors()[0].name == "dense1.weight");
  CHECK(mlp->tensors()[0].shape == std::vector<int>{300, 784});
  CHECK(mlp->tensors()[1].name == "dense1.bias");
  CHECK(mlp->tensors()[1].offset == 784 * 300);
  CHECK(mlp->tensors()[5].offset + mlp->tensors()[5].size == mlp->parameter_count());

  Result<Model> cnn = Model::Create("cnn:28x28x1-c8k5-p2-c16k3-p2-d32-10", 1);
  REQUIRE(cnn.ok());
  CHECK(cnn->input_size() == 784);
  REQUIRE(cnn->tensors().size() == 8);
  CHECK(cnn->tensors()[0].name == "conv1.weight");
  CHECK(cnn->tensors()[0].shape == std::vector<int>{8, 1, 5, 5});
  CHECK(cnn->tensors()[2].shape == std::vector<int>{16, 8, 3, 3});
  CHECK(cnn->tensors()[4].shape == std::vector<int>{32, 16 * 7 * 7});
  CHECK(cnn->tensors()[7].offset + cnn->tensors()[7].size == cnn->parameter_count());
}

TEST_CASE("malformed model specs are rejected with the offending part named") {
  for (const char* bad : {"", "mlp", "mlp:784", "mlp:784-0-10", "mlp:784--10", "mlp:784-x-10",
                          "mlp:784-10-1", "rnn:4-2", "cnn:28x28-10", "cnn:28x28x1-c8k4-10",
                          "cnn:28x28x1-q3-10", "cnn:28x28x1-d10-c4k3-10", "cnn:4x4x1-p8-10",
                          "mlp:99999999-10"}) {
    INFO("spec '" << bad << "'");
    Result<Model> model = Model::Create(bad, 1);
    CHECK_FALSE(model.ok());
    CHECK(model.status().code() == StatusCode::kInvalidArgument);
    CHECK(model.status().message().find("model spec") != std::string::npos);
  }
}

// On a 32-bit board size_t products wrap: 65536 x 65536 weights used to come
// out as 0 and the model as 720,906 parameters, whose buffers training then
// overran. Sizes are computed in 64 bits and refused past the runtime's limits
// on every platform; the armv7 preset runs this in a 32-bit process.
TEST_CASE("a model whose sizes do not fit 32 bits is refused with its count, not wrapped") {
  Result<Model> wide = Model::Create("mlp:65536-65536-10", 1);
  REQUIRE_FALSE(wide.ok());
  CHECK(wide.status().code() == StatusCode::kOutOfRange);
  INFO(wide.status().message());
  CHECK(wide.status().message().find("4295032832 parameters") != std::string::npos);
  Result<ModelBufferSizes> sizes = QueryModelBufferSizes("mlp:65536-65536-10", 1);
  CHECK(sizes.status().code() == StatusCode::kOutOfRange);

  // A convolution's activations (65536 filters x 256 x 256 = 2^32 per example)
  // and its im2col block are checked the same way before the layer is built.
  Result<Model> conv = Model::Create("cnn:256x256x1-c65536k1-10", 1);
  CHECK(conv.status().code() == StatusCode::kOutOfRange);
  CHECK(conv.status().message().find("activations per example") != std::string::npos);
  Result<Model> im2col = Model::Create("cnn:64x64x16-c1k513-10", 1);
  CHECK(im2col.status().code() == StatusCode::kOutOfRange);
  // A kernel of 65535: a fan-in of almost 2^32 per filter.
  Result<Model> huge = Model::Create("cnn:1x1x1-c65536k65535-c65536k65535-10", 1);
  CHECK(huge.status().code() == StatusCode::kOutOfRange);
}

TEST_CASE("a workspace beyond what the platform addresses is refused, on 32 and 64 bits") {
  // Under the parameter limit, but a batch of 65536 needs 2^30 + floats of
  // activations: more than a 32-bit size_t holds in bytes.
  Result<ModelBufferSizes> big = QueryModelBufferSizes("mlp:4096-4096-10", 65536);
  if (sizeof(std::size_t) == 4) {
    CHECK(big.status().code() == StatusCode::kOutOfRange);
    CHECK(big.status().message().find("more than this platform can address") != std::string::npos);
  } else {
    REQUIRE(big.ok());
    CHECK(big->workspace > (std::size_t{1} << 30));
  }
  // Beyond the activation limit everywhere, with the batch named.
  Result<ModelBufferSizes> huge = QueryModelBufferSizes("mlp:4096-4096-10", 1 << 30);
  CHECK(huge.status().code() == StatusCode::kOutOfRange);
  CHECK(huge.status().message().find("batch of 1073741824") != std::string::npos);
  Result<Model> model = Model::Create("mlp:4096-4096-10", 1);
  REQUIRE(model.ok());
  CHECK(model->Reserve(1 << 30).code() == StatusCode::kOutOfRange);
}

TEST_CASE("the same seed gives the same initial parameters and another seed does not") {
  Result<Model> a = Model::Create("cnn:8x8x2-c3k3-p2-d5-4", 7);
  Result<Model> b = Model::Create("cnn:8x8x2-c3k3-p2-d5-4", 7);
  Result<Model> c = Model::Create("cnn:8x8x2-c3k3-p2-d5-4", 8);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  const std::vector<float> pa(a->parameters(), a->parameters() + a->parameter_count());
  const std::vector<float> pb(b->parameters(), b->parameters() + b->parameter_count());
  const std::vector<float> pc(c->parameters(), c->parameters() + c->parameter_count());
  CHECK(pa == pb);
  CHECK(pa != pc);
}

// Central finite differences of the mean loss, in float32 forward passes:
// each tensor's analytic gradient must match with relative error below 2%
// (rounding and the odd ReLU kink give well under 1%; a wrong backward pass,
// such as a missing transpose, a lost bias term, a pool gradient sent to the
// wrong cell or an off-by-one im2col, gives errors of order 100%).
void CheckGradients(const char* spec, int batch) {
  Result<Model> created = Model::Create(spec, 3);
  REQUIRE(created.ok());
  Model& model = created.value();
  // Biases start at exactly zero, which puts ReLU inputs exactly on the kink
  // wherever the layer input is zero; move every parameter off it.
  const std::vector<float> jitter = Inputs(model.parameter_count(), 5);
  for (std::size_t i = 0; i < model.parameter_count(); ++i) model.parameters()[i] += 0.05f * jitter[i];
  const std::vector<float> x = Inputs(model.input_size() * static_cast<std::size_t>(batch), 11);
  std::vector<uint8_t> labels(static_cast<std::size_t>(batch));
  for (int n = 0; n < batch; ++n) labels[static_cast<std::size_t>(n)] = static_cast<uint8_t>((n * 7 + 3) % model.num_classes());
  Result<BatchLoss> loss = model.ComputeGradients(x.data(), labels.data(), batch);
  REQUIRE(loss.ok());
  const std::vector<float> analytic(model.gradients(), model.gradients() + model.parameter_count());
  const float eps = 2e-3f;
  for (const TensorInfo& t : model.tensors()) {
    double diff2 = 0, norm2 = 0;
    for (std::size_t i = t.offset; i < t.offset + t.size; ++i) {
      float* p = model.parameters() + i;
      const float saved = *p;
      *p = saved + eps;
      const double plus = model.Evaluate(x.data(), labels.data(), batch, nullptr)->loss;
      *p = saved - eps;
      const double minus = model.Evaluate(x.data(), labels.data(), batch, nullptr)->loss;
      *p = saved;
      const double numeric = (plus - minus) / (2.0 * eps);
      diff2 += (numeric - analytic[i]) * (numeric - analytic[i]);
      norm2 += numeric * numeric + static_cast<double>(analytic[i]) * analytic[i];
    }
    INFO(std::string(spec) << " tensor " << t.name << " relative error " << std::sqrt(diff2 / norm2));
    REQUIRE(norm2 > 1e-12);  // the tensor does receive a gradient
    CHECK(std::sqrt(diff2 / norm2) < 0.02);
  }
}

TEST_CASE("dense, relu and softmax cross-entropy gradients match finite differences") {
  CheckGradients("mlp:12-7-5-3", 4);
}

TEST_CASE("conv2d and max-pool gradients match finite differences") {
  CheckGradients("cnn:6x6x2-c3k3-p2-d4-3", 3);
  CheckGradients("cnn:7x5x1-c2k3-c2k1-p2-3", 2);
}

TEST_CASE("a label outside the model's classes is rejected") {
  Result<Model> model = Model::Create("mlp:4-3", 1);
  REQUIRE(model.ok());
  const std::vector<float> x(8, 0.5f);
  const uint8_t labels[2] = {1, 3};
  Result<BatchLoss> loss = model->ComputeGradients(x.data(), labels, 2);
  CHECK(loss.status().code() == StatusCode::kOutOfRange);
}

TEST_CASE("a batch size of zero is rejected") {
  Result<Model> model = Model::Create("mlp:4-3", 1);
  REQUIRE(model.ok());
  const float x[4] = {0, 0, 0, 0};
  CHECK(model->Forward(x, 0).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedrt
