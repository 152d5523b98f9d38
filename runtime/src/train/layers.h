// The layers a Model chains (internal). Each layer maps a batch of inputs of
// shape in_shape() to outputs of shape out_shape() (C x H x W per example;
// dense layers use 1 x 1 x N). Parameters and their gradients are views into
// the model's flat buffers, bound once by Bind().
//
// Backward(in, out, d_out, d_in, ...) adds nothing: it overwrites the
// layer's parameter gradients with this batch's and writes d_in (skipped when
// d_in is null, for the first layer).
#ifndef FEDRT_RUNTIME_TRAIN_LAYERS_H_
#define FEDRT_RUNTIME_TRAIN_LAYERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/runtime/model.h"
#include "train/random.h"

namespace fedrt {

struct Shape3 {
  int c = 1, h = 1, w = 1;
  std::size_t size() const { return static_cast<std::size_t>(c) * h * w; }
};

// Workspace a layer's passes may use: `floats` holds at least
// ScratchFloats(batch) floats, `gemm` at least GemmScratchFloats(batch) (null
// when that is 0; Gemm then needs none or keeps its own).
struct LayerWorkspace {
  float* floats = nullptr;
  float* gemm = nullptr;
};

class Layer {
 public:
  virtual ~Layer() = default;
  const Shape3& in_shape() const { return in_; }
  const Shape3& out_shape() const { return out_; }

  // Parameter tensors this layer owns (empty for ReLU and pooling).
  virtual std::vector<TensorInfo> Tensors(const std::string& name) const { (void)name; return {}; }
  virtual void Bind(float* parameters, float* gradients) { (void)parameters; (void)gradients; }
  virtual void Init(Rng& rng) { (void)rng; }
  // Scratch floats Forward/Backward need for batches of up to `batch`, in 64
  // bits: the model checks it against size_t before sizing the workspace.
  virtual uint64_t ScratchFloats(int batch) const { (void)batch; return 0; }
  // Packing scratch its Gemm() calls need for batches of up to `batch`.
  virtual std::size_t GemmScratchFloats(int batch) const { (void)batch; return 0; }

  virtual void Forward(const float* in, float* out, int batch, const LayerWorkspace& ws) = 0;
  virtual void Backward(const float* in, const float* out, const float* d_out, float* d_in,
                        int batch, const LayerWorkspace& ws) = 0;

 protected:
  Shape3 in_, out_;
};

std::unique_ptr<Layer> MakeDense(Shape3 in, int units);
std::unique_ptr<Layer> MakeRelu(Shape3 in);
std::unique_ptr<Layer> MakeConv2d(Shape3 in, int filters, int kernel);
std::unique_ptr<Layer> MakeMaxPool(Shape3 in, int window);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_TRAIN_LAYERS_H_
