// A small sequential float32 network for on-device training: dense, ReLU,
// 2-D convolution (im2col + GEMM) and max-pool layers ending in a softmax
// cross-entropy loss, built from a spec string (runtime/README.md):
//   mlp:784-300-100-10
//   cnn:28x28x1-c16k5-p2-c32k5-p2-d128-10
//
// Memory: all parameters live in one contiguous, aligned float buffer and
// all gradients in another of the same layout, described by a tensor table
// (name, shape, offset): codecs and the wire work on these flat vectors.
// Activation buffers are owned by the model and sized by Reserve(batch).
// Inputs are row-major [batch x input_size()] (a CNN image is C x H x W);
// labels are class indices.
//
// Initialisation is seeded: the same spec and seed give the same bits.
// Thread-safety: a Model is not synchronized; use one per thread. Distinct
// models may train concurrently.
#ifndef FEDRT_RUNTIME_MODEL_H_
#define FEDRT_RUNTIME_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/platform/memory.h"
#include "fedrt/platform/status.h"

namespace fedrt {

enum class LayerKind : int { kDense = 0, kRelu = 1, kConv2d = 2, kMaxPool = 3 };

struct LayerSpec {
  LayerKind kind = LayerKind::kDense;
  int units = 0;   // dense: outputs; conv: filters
  int kernel = 0;  // conv: kernel size (odd, "same" padding, stride 1); pool: window = stride
};

struct ModelSpec {
  std::string text;  // the spec as given
  int channels = 0, height = 0, width = 0;  // input shape (an MLP: 1 x 1 x features)
  std::vector<LayerSpec> layers;            // ReLUs explicit
  int num_classes = 0;
};

// Parses an "mlp:" or "cnn:" spec; InvalidArgument names the offending part.
Result<ModelSpec> ParseModelSpec(const std::string& text);

struct TensorInfo {
  std::string name;        // "dense1.weight", "conv2.bias", ...
  std::vector<int> shape;  // dense weight: {out, in}; conv weight: {filters, channels, k, k}
  std::size_t offset = 0;  // in floats, into parameters() and gradients()
  std::size_t size = 0;    // product of shape
};

// Loss over a batch: mean cross-entropy and how many argmax predictions hit.
struct BatchLoss {
  double loss = 0.0;
  int correct = 0;
};

class Layer;  // internal

class Model {
 public:
  // Builds the model and initialises its parameters from `seed` (He-uniform
  // weights, zero biases).
  static Result<Model> Create(const std::string& spec, uint64_t seed);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model();

  const ModelSpec& spec() const { return spec_; }
  std::size_t input_size() const { return input_size_; }
  int num_classes() const { return spec_.num_classes; }

  std::size_t parameter_count() const { return parameters_.size(); }
  float* parameters() { return parameters_.data(); }
  const float* parameters() const { return parameters_.data(); }
  float* gradients() { return gradients_.data(); }
  const float* gradients() const { return gradients_.data(); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  // Sizes the activation buffers for batches of up to `batch` examples.
  // Forward/ComputeGradients call it themselves; call it up front to keep
  // allocation out of the training loop.
  Status Reserve(int batch);

  // Logits [batch x num_classes()], valid until the next call.
  Result<const float*> Forward(const float* inputs, int batch);

  // Overwrites gradients() with d(mean loss)/d(parameters) for the batch.
  Result<BatchLoss> ComputeGradients(const float* inputs, const uint8_t* labels, int batch);

  // Loss and hits without gradients; predictions[batch] (argmax) if non-null.
  Result<BatchLoss> Evaluate(const float* inputs, const uint8_t* labels, int batch,
                             int* predictions);

 private:
  Model();
  Status CheckLabels(const uint8_t* labels, int batch) const;
  BatchLoss SoftmaxCrossEntropy(const uint8_t* labels, int batch, float* d_logits,
                                int* predictions) const;

  ModelSpec spec_;
  std::size_t input_size_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<TensorInfo> tensors_;
  AlignedArray<float> parameters_;
  AlignedArray<float> gradients_;
  int capacity_ = 0;                           // batch the buffers hold
  std::vector<AlignedArray<float>> outputs_;   // one per layer
  AlignedArray<float> delta_a_, delta_b_;      // ping-pong gradients wrt activations
  AlignedArray<float> scratch_;                // im2col and friends
};

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_MODEL_H_
