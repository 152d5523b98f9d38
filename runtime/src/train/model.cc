#include "fedrt/runtime/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "train/layers.h"
#include "train/random.h"

namespace fedrt {
namespace {

// Parameters are addressed with int GEMM dimensions; keep far from 2^31.
constexpr std::size_t kMaxParameters = std::size_t{1} << 28;
constexpr std::size_t kMaxActivationFloats = std::size_t{1} << 28;
constexpr uint64_t kInitStream = 1;  // Rng stream of parameter initialisation

}  // namespace

Model::Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Result<Model> Model::Create(const std::string& text, uint64_t seed) {
  Result<ModelSpec> parsed = ParseModelSpec(text);
  if (!parsed.ok()) return parsed.status();
  Model model;
  model.spec_ = std::move(parsed).value();
  Shape3 shape{model.spec_.channels, model.spec_.height, model.spec_.width};
  model.input_size_ = shape.size();
  int dense = 0, conv = 0;
  std::size_t offset = 0;
  for (const LayerSpec& s : model.spec_.layers) {
    std::unique_ptr<Layer> layer;
    std::string name;
    switch (s.kind) {
      case LayerKind::kDense:
        layer = MakeDense(shape, s.units);
        name = "dense" + std::to_string(++dense);
        break;
      case LayerKind::kRelu: layer = MakeRelu(shape); break;
      case LayerKind::kConv2d:
        layer = MakeConv2d(shape, s.units, s.kernel);
        name = "conv" + std::to_string(++conv);
        break;
      case LayerKind::kMaxPool: layer = MakeMaxPool(shape, s.kernel); break;
    }
    for (TensorInfo t : layer->Tensors(name)) {
      t.offset += offset;
      model.tensors_.push_back(t);
    }
    std::size_t layer_params = 0;
    for (const TensorInfo& t : layer->Tensors(name)) layer_params += t.size;
    offset += layer_params;
    if (offset > kMaxParameters || layer->out_shape().size() > kMaxActivationFloats / 64) {
      return OutOfRange("model spec '" + text + "' is too large for this runtime");
    }
    shape = layer->out_shape();
    model.layers_.push_back(std::move(layer));
  }
  if (!model.parameters_.Resize(offset) || !model.gradients_.Resize(offset)) {
    return Status(StatusCode::kResourceExhausted, "cannot allocate the model's parameters");
  }
  std::size_t at = 0;
  for (std::size_t i = 0; i < model.layers_.size(); ++i) {
    Layer& layer = *model.layers_[i];
    layer.Bind(model.parameters_.data() + at, model.gradients_.data() + at);
    for (const TensorInfo& t : layer.Tensors("")) at += t.size;
  }
  Rng rng(seed, kInitStream);
  for (auto& layer : model.layers_) layer->Init(rng);
  return model;
}

Status Model::Reserve(int batch) {
  if (batch <= 0) return InvalidArgument("batch size must be positive");
  if (batch <= capacity_) return Status::Ok();
  const std::size_t b = static_cast<std::size_t>(batch);
  std::size_t widest = input_size_, scratch = 0;
  for (const auto& layer : layers_) {
    widest = std::max(widest, layer->out_shape().size());
    scratch = std::max(scratch, layer->ScratchFloats(batch));
  }
  if (widest * b > kMaxActivationFloats || scratch > kMaxActivationFloats) {
    return OutOfRange("batch too large for this model");
  }
  outputs_.resize(layers_.size());
  bool ok = delta_a_.Resize(widest * b) && delta_b_.Resize(widest * b) && scratch_.Resize(scratch);
  for (std::size_t i = 0; i < layers_.size() && ok; ++i) {
    ok = outputs_[i].Resize(layers_[i]->out_shape().size() * b);
  }
  if (!ok) {
    capacity_ = 0;
    return Status(StatusCode::kResourceExhausted, "cannot allocate activations for the batch");
  }
  capacity_ = batch;
  return Status::Ok();
}

Result<const float*> Model::Forward(const float* inputs, int batch) {
  FEDRT_RETURN_IF_ERROR(Reserve(batch));
  const float* in = inputs;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->Forward(in, outputs_[i].data(), batch, scratch_.data());
    in = outputs_[i].data();
  }
  return in;
}

Status Model::CheckLabels(const uint8_t* labels, int batch) const {
  for (int n = 0; n < batch; ++n) {
    if (labels[n] >= spec_.num_classes) {
      return OutOfRange("label " + std::to_string(labels[n]) + " is not below the model's " +
                        std::to_string(spec_.num_classes) + " classes");
    }
  }
  return Status::Ok();
}

// Softmax cross-entropy per row: loss = logsumexp(z) - z[y]; the gradient of
// the batch mean is (softmax(z) - onehot(y)) / batch.
BatchLoss Model::SoftmaxCrossEntropy(const uint8_t* labels, int batch, float* d_logits,
                                     int* predictions) const {
  const int classes = spec_.num_classes;
  const float* logits = outputs_.back().data();
  BatchLoss result;
  for (int n = 0; n < batch; ++n) {
    const float* z = logits + static_cast<std::size_t>(n) * classes;
    int arg = 0;
    for (int j = 1; j < classes; ++j) {
      if (z[j] > z[arg]) arg = j;
    }
    const float max = z[arg];
    double sum = 0.0;
    for (int j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(z[j] - max));
    result.loss += std::log(sum) - static_cast<double>(z[labels[n]] - max);
    if (arg == labels[n]) ++result.correct;
    if (predictions != nullptr) predictions[n] = arg;
    if (d_logits != nullptr) {
      float* d = d_logits + static_cast<std::size_t>(n) * classes;
      for (int j = 0; j < classes; ++j) {
        const double p = std::exp(static_cast<double>(z[j] - max)) / sum;
        d[j] = static_cast<float>((p - (j == labels[n] ? 1.0 : 0.0)) / batch);
      }
    }
  }
  result.loss /= batch;
  return result;
}

Result<BatchLoss> Model::ComputeGradients(const float* inputs, const uint8_t* labels, int batch) {
  FEDRT_RETURN_IF_ERROR(CheckLabels(labels, batch));
  Result<const float*> logits = Forward(inputs, batch);
  if (!logits.ok()) return logits.status();
  float* d_out = delta_a_.data();
  float* d_in = delta_b_.data();
  const BatchLoss loss = SoftmaxCrossEntropy(labels, batch, d_out, nullptr);
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const float* in = i == 0 ? inputs : outputs_[i - 1].data();
    layers_[i]->Backward(in, outputs_[i].data(), d_out, i == 0 ? nullptr : d_in, batch,
                         scratch_.data());
    std::swap(d_out, d_in);
  }
  return loss;
}

Result<BatchLoss> Model::Evaluate(const float* inputs, const uint8_t* labels, int batch,
                                  int* predictions) {
  FEDRT_RETURN_IF_ERROR(CheckLabels(labels, batch));
  Result<const float*> logits = Forward(inputs, batch);
  if (!logits.ok()) return logits.status();
  return SoftmaxCrossEntropy(labels, batch, nullptr, predictions);
}

}  // namespace fedrt
