#include "fedrt/runtime/model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "train/layers.h"
#include "train/random.h"

namespace fedrt {
namespace {

// Parameters are addressed with int GEMM dimensions; keep far from 2^31.
// Every size below is computed in 64 bits and checked against these limits
// before it becomes a size_t: on a 32-bit board a product of two dimensions
// wraps (65536 x 65536 is 0), and a wrapped count would size the buffers too
// small for the loops that use them.
constexpr uint64_t kMaxParameters = uint64_t{1} << 28;
constexpr uint64_t kMaxActivationFloats = uint64_t{1} << 28;
// One example's activations in one layer (and its im2col block).
constexpr uint64_t kMaxExampleFloats = kMaxActivationFloats / 64;
// The whole workspace: also its bytes must fit this platform's size_t.
constexpr uint64_t kMaxWorkspaceFloats =
    std::min<uint64_t>(uint64_t{1} << 32, std::numeric_limits<std::size_t>::max() / sizeof(float));
constexpr uint64_t kInitStream = 1;  // Rng stream of parameter initialisation

// Workspace pieces start on 64-byte boundaries (relative to the buffer).
constexpr std::size_t kPieceFloats = kSimdAlignment / sizeof(float);
uint64_t Padded(uint64_t floats) { return (floats + kPieceFloats - 1) / kPieceFloats * kPieceFloats; }

// a * b, or false when it does not fit 64 bits.
bool Mul(uint64_t a, uint64_t b, uint64_t* product) { return !__builtin_mul_overflow(a, b, product); }

// The sizes a layer will have, computed in 64 bits from its spec before the
// layer (which keeps int dimensions and size_t counts) is built.
struct LayerSizes {
  uint64_t parameters = 0;
  uint64_t out = 0;      // floats per example
  uint64_t im2col = 0;   // floats per example (conv)
  uint64_t fan_in = 0;   // columns of the weight matrix
};
LayerSizes SizesOf(const LayerSpec& s, uint64_t c, uint64_t h, uint64_t w) {
  LayerSizes z;
  // The input has at most 2^24 values (the parser) and every layer's output
  // at most kMaxExampleFloats (Build), so c * h * w and c * k * k (k <= 2^16)
  // cannot wrap; products with a layer's units are checked.
  const uint64_t in = c * h * w;
  const uint64_t units = static_cast<uint64_t>(s.units), k = static_cast<uint64_t>(s.kernel);
  const uint64_t kNoFit = std::numeric_limits<uint64_t>::max();
  switch (s.kind) {
    case LayerKind::kDense:
      z.fan_in = in;
      if (!Mul(units, in, &z.parameters)) z.parameters = kNoFit;
      else z.parameters += units;
      z.out = units;
      break;
    case LayerKind::kConv2d:
      z.fan_in = c * k * k;  // <= 2^48
      if (!Mul(units, z.fan_in, &z.parameters)) z.parameters = kNoFit;
      else z.parameters += units;
      if (!Mul(units, h * w, &z.out)) z.out = kNoFit;
      if (!Mul(z.fan_in, h * w, &z.im2col)) z.im2col = kNoFit;
      break;
    case LayerKind::kRelu: z.out = in; break;
    case LayerKind::kMaxPool: z.out = c * (h / k) * (w / k); break;
  }
  return z;
}

}  // namespace

Model::Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Result<Model> Model::Build(const std::string& text) {
  Result<ModelSpec> parsed = ParseModelSpec(text);
  if (!parsed.ok()) return parsed.status();
  Model model;
  model.spec_ = std::move(parsed).value();
  Shape3 shape{model.spec_.channels, model.spec_.height, model.spec_.width};
  model.input_size_ = shape.size();
  int dense = 0;
  [[maybe_unused]] int conv = 0;  // FEDRT_CONV_LAYERS
  uint64_t offset = 0;
  for (const LayerSpec& s : model.spec_.layers) {
    // Checked before the layer exists: its constructor multiplies in int and size_t.
    const LayerSizes sizes = SizesOf(s, static_cast<uint64_t>(shape.c), static_cast<uint64_t>(shape.h),
                                     static_cast<uint64_t>(shape.w));
    if (sizes.parameters > kMaxParameters - offset) {
      const bool countable = sizes.parameters <= std::numeric_limits<uint64_t>::max() - offset;
      return OutOfRange("model spec '" + text + "' has " +
                        (countable ? std::to_string(offset + sizes.parameters) : std::string("more than 2^64")) +
                        " parameters by layer " + std::to_string(model.layers_.size() + 1) +
                        ", more than this runtime's limit of " + std::to_string(kMaxParameters));
    }
    if (sizes.out > kMaxExampleFloats || sizes.im2col > kMaxExampleFloats || sizes.fan_in > kMaxExampleFloats) {
      return OutOfRange("model spec '" + text + "': layer " + std::to_string(model.layers_.size() + 1) +
                        " has more than " + std::to_string(kMaxExampleFloats) +
                        " activations per example (the limit of this runtime)");
    }
#if !FEDRT_CONV_LAYERS
    if (s.kind == LayerKind::kConv2d || s.kind == LayerKind::kMaxPool) {
      return Unsupported("model spec '" + text +
                         "': convolution and pooling layers are not in this build (FEDRT_CONV_LAYERS=OFF)");
    }
#endif
    std::unique_ptr<Layer> layer;
    std::string name;
    switch (s.kind) {
      case LayerKind::kDense:
        layer = MakeDense(shape, s.units);
        name = "dense" + std::to_string(++dense);
        break;
      case LayerKind::kRelu: layer = MakeRelu(shape); break;
#if FEDRT_CONV_LAYERS
      case LayerKind::kConv2d:
        layer = MakeConv2d(shape, s.units, s.kernel);
        name = "conv" + std::to_string(++conv);
        break;
      case LayerKind::kMaxPool: layer = MakeMaxPool(shape, s.kernel); break;
#else
      case LayerKind::kConv2d:
      case LayerKind::kMaxPool: break;  // refused above
#endif
    }
    const std::size_t layer_offset = static_cast<std::size_t>(offset);
    for (TensorInfo t : layer->Tensors(name)) {
      t.offset += layer_offset;
      model.tensors_.push_back(t);
    }
    offset += sizes.parameters;
    shape = layer->out_shape();
    model.layers_.push_back(std::move(layer));
  }
  model.parameter_count_ = static_cast<std::size_t>(offset);
  return model;
}

// Layout, in this order: one output per layer, the two delta buffers, the
// layers' scratch, the GEMM packing scratch; each piece padded to 64 bytes.
Result<std::size_t> Model::WorkspaceFloats(int batch) const {
  if (batch <= 0) return InvalidArgument("batch size must be positive");
  const uint64_t b = static_cast<uint64_t>(batch);
  // Build() bounded every per-example size by kMaxExampleFloats (2^22), so
  // the products with b (< 2^31) and the sums below stay far inside 64 bits.
  uint64_t widest = input_size_;
  for (const auto& layer : layers_) widest = std::max<uint64_t>(widest, layer->out_shape().size());
  const Status too_large =
      OutOfRange("a batch of " + std::to_string(batch) + " is too large for model '" + spec_.text + "'");
  if (b * widest > kMaxActivationFloats) return too_large;
  // The two gradient buffers hold a layer's output gradient and its input
  // gradient; the first layer's input gradient is never computed (Backward
  // gets no buffer for it), so they are as wide as the widest layer output,
  // not the input (mlp:784-16-10: 16 floats an example instead of 784).
  uint64_t outputs = 0, scratch = 0, gemm = 0, widest_delta = 0;
  for (const auto& layer : layers_) {
    widest_delta = std::max<uint64_t>(widest_delta, layer->out_shape().size());
    outputs += Padded(layer->out_shape().size() * b);
    scratch = std::max(scratch, layer->ScratchFloats(batch));
    gemm = std::max<uint64_t>(gemm, layer->GemmScratchFloats(batch));
  }
  if (scratch > kMaxActivationFloats || gemm > kMaxActivationFloats) return too_large;
  const uint64_t total = outputs + 2 * Padded(widest_delta * b) + Padded(scratch) + Padded(gemm);
  if (total > kMaxWorkspaceFloats) {
    return OutOfRange("model '" + spec_.text + "' needs " + std::to_string(total) +
                      " workspace floats for a batch of " + std::to_string(batch) +
                      ", more than this platform can address");
  }
  return static_cast<std::size_t>(total);
}

void Model::BindParameters(float* parameters, float* gradients, uint64_t seed) {
  parameters_ = parameters;
  gradients_ = gradients;
  std::memset(gradients, 0, sizeof(float) * parameter_count_);
  std::size_t at = 0;
  for (auto& layer : layers_) {
    layer->Bind(parameters + at, gradients + at);
    for (const TensorInfo& t : layer->Tensors("")) at += t.size;
  }
  Rng rng(seed, kInitStream);
  for (auto& layer : layers_) layer->Init(rng);
}

void Model::BindWorkspace(float* workspace, int batch) {
  // WorkspaceFloats(batch) checked every size here against size_t.
  const std::size_t b = static_cast<std::size_t>(batch);
  std::size_t widest = 0, scratch = 0, gemm = 0;  // widest layer output (WorkspaceFloats says why)
  float* at = workspace;
  outputs_.resize(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const std::size_t size = layers_[i]->out_shape().size();
    widest = std::max(widest, size);
    scratch = std::max(scratch, static_cast<std::size_t>(layers_[i]->ScratchFloats(batch)));
    gemm = std::max(gemm, layers_[i]->GemmScratchFloats(batch));
    outputs_[i] = at;
    at += Padded(size * b);
  }
  delta_a_ = at;
  at += Padded(widest * b);
  delta_b_ = at;
  at += Padded(widest * b);
  scratch_ = at;
  at += Padded(scratch);
  gemm_scratch_ = gemm > 0 ? at : nullptr;
  capacity_ = batch;
}

Result<ModelBufferSizes> QueryModelBufferSizes(const std::string& spec, int max_batch) {
  Result<Model> model = Model::Build(spec);  // layers and shapes only, no buffers
  if (!model.ok()) return model.status();
  Result<std::size_t> workspace = model->WorkspaceFloats(max_batch);
  if (!workspace.ok()) return workspace.status();
  return ModelBufferSizes{model->parameter_count_, model->parameter_count_, *workspace};
}

Result<Model> Model::Create(const std::string& text, uint64_t seed) {
  Result<Model> built = Build(text);
  if (!built.ok()) return built.status();
  Model model = std::move(built).value();
  if (!model.owned_parameters_.Resize(model.parameter_count_) ||
      !model.owned_gradients_.Resize(model.parameter_count_)) {
    return Status(StatusCode::kResourceExhausted, "cannot allocate the model's parameters");
  }
  model.BindParameters(model.owned_parameters_.data(), model.owned_gradients_.data(), seed);
  return model;
}

Result<Model> Model::CreateInBuffers(const std::string& text, uint64_t seed, int max_batch,
                                     FloatSpan parameters, FloatSpan gradients, FloatSpan workspace) {
  Result<Model> built = Build(text);
  if (!built.ok()) return built.status();
  Model model = std::move(built).value();
  Result<std::size_t> workspace_floats = model.WorkspaceFloats(max_batch);
  if (!workspace_floats.ok()) return workspace_floats.status();
  auto check = [](const char* what, FloatSpan span, std::size_t need) {
    if (span.data != nullptr && span.size >= need) return Status::Ok();
    return InvalidArgument(std::string(what) + " buffer holds " + std::to_string(span.data == nullptr ? 0 : span.size) +
                           " floats, the model needs " + std::to_string(need));
  };
  FEDRT_RETURN_IF_ERROR(check("parameter", parameters, model.parameter_count_));
  FEDRT_RETURN_IF_ERROR(check("gradient", gradients, model.parameter_count_));
  FEDRT_RETURN_IF_ERROR(check("workspace", workspace, *workspace_floats));
  model.caller_buffers_ = true;
  model.BindParameters(parameters.data, gradients.data, seed);
  model.BindWorkspace(workspace.data, max_batch);
  return model;
}

Status Model::Reserve(int batch) {
  if (batch <= 0) return InvalidArgument("batch size must be positive");
  if (batch <= capacity_) return Status::Ok();
  if (caller_buffers_) {
    return OutOfRange("batch of " + std::to_string(batch) + " does not fit the caller's workspace (sized for " +
                      std::to_string(capacity_) + ")");
  }
  Result<std::size_t> floats = WorkspaceFloats(batch);
  if (!floats.ok()) return floats.status();
  if (!owned_workspace_.Resize(*floats)) {
    capacity_ = 0;
    return Status(StatusCode::kResourceExhausted, "cannot allocate activations for the batch");
  }
  BindWorkspace(owned_workspace_.data(), batch);
  return Status::Ok();
}

Result<const float*> Model::Forward(const float* inputs, int batch) {
  FEDRT_RETURN_IF_ERROR(Reserve(batch));
  const LayerWorkspace ws{scratch_, gemm_scratch_};
  const float* in = inputs;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->Forward(in, outputs_[i], batch, ws);
    in = outputs_[i];
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
  const float* logits = outputs_.back();
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
  float* d_out = delta_a_;
  float* d_in = delta_b_;
  const LayerWorkspace ws{scratch_, gemm_scratch_};
  const BatchLoss loss = SoftmaxCrossEntropy(labels, batch, d_out, nullptr);
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const float* in = i == 0 ? inputs : outputs_[i - 1];
    layers_[i]->Backward(in, outputs_[i], d_out, i == 0 ? nullptr : d_in, batch, ws);
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
