// A small sequential float32 network for on-device training: dense, ReLU,
// 2-D convolution (im2col + GEMM) and max-pool layers ending in a softmax
// cross-entropy loss, built from a spec string (runtime/README.md):
//   mlp:784-300-100-10
//   cnn:28x28x1-c16k5-p2-c32k5-p2-d128-10
//
// Memory: all parameters live in one contiguous float buffer and all
// gradients in another of the same layout, described by a tensor table
// (name, shape, offset): codecs and the wire work on these flat vectors.
// Activations, back-propagated deltas, im2col and GEMM packing share a third
// buffer, the workspace, laid out for a maximum batch.
//
// Who owns them: Model::Create allocates all three (and Reserve(batch) grows
// the workspace); Model::CreateInBuffers runs on caller memory sized by
// QueryModelBufferSizes (a firmware arena, a static array) and never
// allocates, frees or grows it. Either way Forward, ComputeGradients and
// Evaluate allocate nothing once the workspace holds the batch. Building a
// model allocates its bookkeeping (layer objects, the tensor table: a few
// hundred bytes per layer) on the heap; the large buffers are the three above.
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

// Floats a model needs for training with batches of up to `max_batch`.
struct ModelBufferSizes {
  std::size_t parameters = 0;  // the flat parameter vector (parameter_count())
  std::size_t gradients = 0;   // the same size
  std::size_t workspace = 0;   // activations, deltas, im2col, GEMM packing for max_batch
};
// InvalidArgument for a bad spec or batch, OutOfRange when too large.
Result<ModelBufferSizes> QueryModelBufferSizes(const std::string& spec, int max_batch);

class Layer;  // internal

class Model {
 public:
  // Builds the model and initialises its parameters from `seed` (He-uniform
  // weights, zero biases). The model owns its buffers.
  static Result<Model> Create(const std::string& spec, uint64_t seed);

  // Builds the model on caller memory: `parameters`, `gradients` and
  // `workspace` hold at least the floats QueryModelBufferSizes(spec,
  // max_batch) gives and must outlive the model (64-byte alignment is
  // best, any float alignment works). Parameters are initialised from `seed`
  // exactly as Create does, so both give the same bits and the same training
  // run. Batches larger than max_batch get OutOfRange.
  static Result<Model> CreateInBuffers(const std::string& spec, uint64_t seed, int max_batch,
                                       FloatSpan parameters, FloatSpan gradients,
                                       FloatSpan workspace);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model();

  const ModelSpec& spec() const { return spec_; }
  std::size_t input_size() const { return input_size_; }
  int num_classes() const { return spec_.num_classes; }

  std::size_t parameter_count() const { return parameter_count_; }
  float* parameters() { return parameters_; }
  const float* parameters() const { return parameters_; }
  float* gradients() { return gradients_; }
  const float* gradients() const { return gradients_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // True for a model built by CreateInBuffers.
  bool uses_caller_buffers() const { return caller_buffers_; }
  // The largest batch the workspace holds now.
  int batch_capacity() const { return capacity_; }

  // Sizes the workspace for batches of up to `batch` examples (an owning
  // model allocates; a model on caller buffers only checks that the batch
  // fits). Forward/ComputeGradients call it themselves; call it up front to
  // keep allocation out of the training loop.
  Status Reserve(int batch);

  // Logits [batch x num_classes()], valid until the next call.
  Result<const float*> Forward(const float* inputs, int batch);

  // Overwrites gradients() with d(mean loss)/d(parameters) for the batch.
  Result<BatchLoss> ComputeGradients(const float* inputs, const uint8_t* labels, int batch);

  // Loss and hits without gradients; predictions[batch] (argmax) if non-null.
  Result<BatchLoss> Evaluate(const float* inputs, const uint8_t* labels, int batch,
                             int* predictions);

 private:
  friend Result<ModelBufferSizes> QueryModelBufferSizes(const std::string& spec, int max_batch);
  Model();
  static Result<Model> Build(const std::string& spec);  // layers and tensor table
  Result<std::size_t> WorkspaceFloats(int batch) const;
  void BindParameters(float* parameters, float* gradients, uint64_t seed);
  void BindWorkspace(float* workspace, int batch);
  Status CheckLabels(const uint8_t* labels, int batch) const;
  BatchLoss SoftmaxCrossEntropy(const uint8_t* labels, int batch, float* d_logits,
                                int* predictions) const;

  ModelSpec spec_;
  std::size_t input_size_ = 0;
  std::size_t parameter_count_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<TensorInfo> tensors_;
  bool caller_buffers_ = false;
  float* parameters_ = nullptr;
  float* gradients_ = nullptr;
  int capacity_ = 0;                         // batch the workspace holds
  std::vector<float*> outputs_;              // one per layer, in the workspace
  float* delta_a_ = nullptr;                 // ping-pong gradients wrt activations
  float* delta_b_ = nullptr;
  float* scratch_ = nullptr;                 // im2col and friends
  float* gemm_scratch_ = nullptr;            // GEMM packing (null when Gemm needs none)
  AlignedArray<float> owned_parameters_;     // Create: the buffers behind the pointers
  AlignedArray<float> owned_gradients_;
  AlignedArray<float> owned_workspace_;
};

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_MODEL_H_
