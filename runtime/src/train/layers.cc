// Dense, ReLU, Conv2d (im2col + GEMM, stride 1, "same" zero padding) and
// max-pool layers. All matrix work goes through Gemm() (OpenBLAS or built-in).
#include "train/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fedrt/runtime/gemm.h"

namespace fedrt {
namespace {

void InitUniform(Rng& rng, float* values, std::size_t count, int fan_in) {
  // He-uniform: variance 2 / fan_in keeps ReLU activations at scale.
  const double limit = std::sqrt(6.0 / fan_in);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = static_cast<float>((2.0 * rng.UniformDouble() - 1.0) * limit);
  }
}

// A layer with a weight matrix [rows x fan_in] followed by a bias [rows]
// (dense: rows = units; conv: rows = filters, fan_in = channels * k * k).
class WeightBiasLayer : public Layer {
 public:
  std::vector<TensorInfo> Tensors(const std::string& name) const override {
    const std::size_t w = static_cast<std::size_t>(rows_) * fan_in_;
    return {{name + ".weight", weight_shape_, 0, w},
            {name + ".bias", {rows_}, w, static_cast<std::size_t>(rows_)}};
  }
  void Bind(float* p, float* g) override {
    const std::size_t w = static_cast<std::size_t>(rows_) * fan_in_;
    w_ = p;
    b_ = p + w;
    dw_ = g;
    db_ = g + w;
  }
  void Init(Rng& rng) override {
    InitUniform(rng, w_, static_cast<std::size_t>(rows_) * fan_in_, fan_in_);
    std::memset(b_, 0, sizeof(float) * static_cast<std::size_t>(rows_));
  }

 protected:
  int rows_ = 0, fan_in_ = 0;
  std::vector<int> weight_shape_;
  float *w_ = nullptr, *b_ = nullptr, *dw_ = nullptr, *db_ = nullptr;
};

// ---- Dense: y = x W^T + b, W is [units x inputs] -----------------------------
class Dense final : public WeightBiasLayer {
 public:
  Dense(Shape3 in, int units) {
    in_ = in;
    out_ = {1, 1, units};
    inputs_ = static_cast<int>(in.size());
    units_ = units;
    rows_ = units;
    fan_in_ = inputs_;
    weight_shape_ = {units, inputs_};
  }
  std::size_t GemmScratchFloats(int batch) const override {
    return std::max({fedrt::GemmScratchFloats(batch, units_, inputs_),
                     fedrt::GemmScratchFloats(units_, inputs_, batch),
                     fedrt::GemmScratchFloats(batch, inputs_, units_)});
  }
  void Forward(const float* in, float* out, int batch, const LayerWorkspace& ws) override {
    Gemm(Transpose::kNo, Transpose::kYes, batch, units_, inputs_, in, inputs_, w_, inputs_, 0.0f,
         out, units_, ws.gemm);
    for (int n = 0; n < batch; ++n) {
      float* row = out + static_cast<std::size_t>(n) * units_;
      for (int j = 0; j < units_; ++j) row[j] += b_[j];
    }
  }
  void Backward(const float* in, const float*, const float* d_out, float* d_in, int batch,
                const LayerWorkspace& ws) override {
    // dW = dY^T X, db = column sums of dY, dX = dY W.
    Gemm(Transpose::kYes, Transpose::kNo, units_, inputs_, batch, d_out, units_, in, inputs_, 0.0f,
         dw_, inputs_, ws.gemm);
    for (int j = 0; j < units_; ++j) db_[j] = 0.0f;
    for (int n = 0; n < batch; ++n) {
      const float* row = d_out + static_cast<std::size_t>(n) * units_;
      for (int j = 0; j < units_; ++j) db_[j] += row[j];
    }
    if (d_in != nullptr) {
      Gemm(Transpose::kNo, Transpose::kNo, batch, inputs_, units_, d_out, units_, w_, inputs_, 0.0f,
           d_in, inputs_, ws.gemm);
    }
  }

 private:
  int inputs_ = 0, units_ = 0;
};

// ---- ReLU ---------------------------------------------------------------------
class Relu final : public Layer {
 public:
  explicit Relu(Shape3 in) {
    in_ = in;
    out_ = in;
  }
  void Forward(const float* in, float* out, int batch, const LayerWorkspace&) override {
    const std::size_t count = in_.size() * static_cast<std::size_t>(batch);
    for (std::size_t i = 0; i < count; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  }
  void Backward(const float* in, const float*, const float* d_out, float* d_in, int batch,
                const LayerWorkspace&) override {
    if (d_in == nullptr) return;
    const std::size_t count = in_.size() * static_cast<std::size_t>(batch);
    // Both loads unconditional: the select compiles to a vector blend, not
    // a branch on the (random) sign of each activation.
    for (std::size_t i = 0; i < count; ++i) {
      const float x = in[i];
      const float d = d_out[i];
      d_in[i] = x > 0.0f ? d : 0.0f;
    }
  }
};

// ---- Conv2d: out[F x (batch * HW)] = W[F x CKK] * col[CKK x (batch * HW)] + b --
// One im2col matrix for the whole batch (example n owns columns
// [n * HW, (n + 1) * HW)), so each pass is one large GEMM rather than one
// small GEMM per example.
class Conv2d final : public WeightBiasLayer {
 public:
  Conv2d(Shape3 in, int filters, int kernel) {
    in_ = in;
    out_ = {filters, in.h, in.w};
    filters_ = filters;
    kernel_ = kernel;
    ckk_ = in.c * kernel * kernel;
    hw_ = in.h * in.w;
    rows_ = filters;
    fan_in_ = ckk_;
    weight_shape_ = {filters, in.c, kernel, kernel};
  }
  uint64_t ScratchFloats(int batch) const override {
    return (static_cast<uint64_t>(ckk_) + static_cast<uint64_t>(filters_)) * static_cast<uint64_t>(hw_) *
           static_cast<uint64_t>(batch);
  }
  std::size_t GemmScratchFloats(int batch) const override {
    const int cols = batch * hw_;
    return std::max({fedrt::GemmScratchFloats(filters_, cols, ckk_),
                     fedrt::GemmScratchFloats(filters_, ckk_, cols),
                     fedrt::GemmScratchFloats(ckk_, cols, filters_)});
  }

  void Forward(const float* in, float* out, int batch, const LayerWorkspace& ws) override {
    const int cols = batch * hw_;
    float* col = ws.floats;
    float* y = col + static_cast<std::size_t>(ckk_) * cols;
    for (int n = 0; n < batch; ++n) Im2Col(in + static_cast<std::size_t>(n) * in_.size(), col, cols, n * hw_);
    Gemm(Transpose::kNo, Transpose::kNo, filters_, cols, ckk_, w_, ckk_, col, cols, 0.0f, y, cols, ws.gemm);
    for (int n = 0; n < batch; ++n) {
      for (int f = 0; f < filters_; ++f) {
        const float* src = y + static_cast<std::size_t>(f) * cols + static_cast<std::size_t>(n) * hw_;
        float* dst = out + static_cast<std::size_t>(n) * out_.size() + static_cast<std::size_t>(f) * hw_;
        for (int i = 0; i < hw_; ++i) dst[i] = src[i] + b_[f];
      }
    }
  }
  void Backward(const float* in, const float*, const float* d_out, float* d_in, int batch,
                const LayerWorkspace& ws) override {
    const int cols = batch * hw_;
    float* col = ws.floats;
    float* dy = col + static_cast<std::size_t>(ckk_) * cols;
    for (int n = 0; n < batch; ++n) {
      Im2Col(in + static_cast<std::size_t>(n) * in_.size(), col, cols, n * hw_);
      for (int f = 0; f < filters_; ++f) {
        const float* src = d_out + static_cast<std::size_t>(n) * out_.size() + static_cast<std::size_t>(f) * hw_;
        float* dst = dy + static_cast<std::size_t>(f) * cols + static_cast<std::size_t>(n) * hw_;
        for (int i = 0; i < hw_; ++i) dst[i] = src[i];
      }
    }
    // dW = dY col^T, db = row sums of dY.
    Gemm(Transpose::kNo, Transpose::kYes, filters_, ckk_, cols, dy, cols, col, cols, 0.0f, dw_, ckk_, ws.gemm);
    for (int f = 0; f < filters_; ++f) {
      const float* row = dy + static_cast<std::size_t>(f) * cols;
      float sum = 0.0f;
      for (int i = 0; i < cols; ++i) sum += row[i];
      db_[f] = sum;
    }
    if (d_in == nullptr) return;
    // d col = W^T dY, into the col buffer (no longer needed), then col2im.
    Gemm(Transpose::kYes, Transpose::kNo, ckk_, cols, filters_, w_, ckk_, dy, cols, 0.0f, col, cols, ws.gemm);
    for (int n = 0; n < batch; ++n) Col2Im(col, cols, n * hw_, d_in + static_cast<std::size_t>(n) * in_.size());
  }

 private:
  // For kernel column kx, output columns x in [lo, hi) read input column
  // x + kx - K/2 inside the image; the rest read the zero padding.
  void ValidColumns(int kx, int* lo, int* hi) const {
    const int shift = kx - kernel_ / 2;
    *lo = std::max(0, -shift);
    *hi = std::min(in_.w, in_.w - shift);
    if (*hi < *lo) *hi = *lo;
  }

  // col[(c*K + ky)*K + kx][first + y*W + x] = in[c][y + ky - K/2][x + kx - K/2]
  // (0 outside the image); `ld` is the row length of col.
  void Im2Col(const float* x, float* col, int ld, int first) const {
    const int pad = kernel_ / 2;
    for (int c = 0; c < in_.c; ++c) {
      const float* plane = x + static_cast<std::size_t>(c) * in_.h * in_.w;
      for (int ky = 0; ky < kernel_; ++ky) {
        for (int kx = 0; kx < kernel_; ++kx) {
          float* row = col + static_cast<std::size_t>((c * kernel_ + ky) * kernel_ + kx) * ld + first;
          int lo, hi;
          ValidColumns(kx, &lo, &hi);
          const int shift = kx - pad;
          for (int y = 0; y < in_.h; ++y) {
            float* dst = row + y * in_.w;
            const int sy = y + ky - pad;
            if (sy < 0 || sy >= in_.h) {
              std::memset(dst, 0, sizeof(float) * static_cast<std::size_t>(in_.w));
              continue;
            }
            const float* src = plane + static_cast<std::size_t>(sy) * in_.w;
            for (int xx = 0; xx < lo; ++xx) dst[xx] = 0.0f;
            for (int xx = lo; xx < hi; ++xx) dst[xx] = src[xx + shift];
            for (int xx = hi; xx < in_.w; ++xx) dst[xx] = 0.0f;
          }
        }
      }
    }
  }
  // The adjoint of Im2Col: overwrites dx with the sums of its col entries.
  void Col2Im(const float* d_col, int ld, int first, float* dx) const {
    std::memset(dx, 0, sizeof(float) * in_.size());
    const int pad = kernel_ / 2;
    for (int c = 0; c < in_.c; ++c) {
      float* plane = dx + static_cast<std::size_t>(c) * in_.h * in_.w;
      for (int ky = 0; ky < kernel_; ++ky) {
        for (int kx = 0; kx < kernel_; ++kx) {
          const float* row = d_col + static_cast<std::size_t>((c * kernel_ + ky) * kernel_ + kx) * ld + first;
          int lo, hi;
          ValidColumns(kx, &lo, &hi);
          const int shift = kx - pad;
          for (int y = 0; y < in_.h; ++y) {
            const int sy = y + ky - pad;
            if (sy < 0 || sy >= in_.h) continue;
            const float* src = row + y * in_.w;
            float* dst = plane + static_cast<std::size_t>(sy) * in_.w;
            for (int xx = lo; xx < hi; ++xx) dst[xx + shift] += src[xx];
          }
        }
      }
    }
  }

  int filters_ = 0, kernel_ = 0, ckk_ = 0, hw_ = 0;
};

// ---- MaxPool: window s, stride s, floor(H / s) x floor(W / s) ------------------
class MaxPool final : public Layer {
 public:
  MaxPool(Shape3 in, int window) {
    in_ = in;
    out_ = {in.c, in.h / window, in.w / window};
    s_ = window;
  }
  void Forward(const float* in, float* out, int batch, const LayerWorkspace&) override {
    ForEachWindow(in, batch, [&](std::size_t out_index, std::size_t arg) { out[out_index] = in[arg]; });
  }
  void Backward(const float* in, const float*, const float* d_out, float* d_in, int batch,
                const LayerWorkspace&) override {
    if (d_in == nullptr) return;
    std::memset(d_in, 0, sizeof(float) * in_.size() * static_cast<std::size_t>(batch));
    // The gradient goes to the first maximum of each window (as in Forward).
    ForEachWindow(in, batch, [&](std::size_t out_index, std::size_t arg) { d_in[arg] += d_out[out_index]; });
  }

 private:
  template <typename Visit>
  void ForEachWindow(const float* in, int batch, Visit visit) const {
    std::size_t o = 0;
    for (int n = 0; n < batch; ++n) {
      for (int c = 0; c < in_.c; ++c) {
        const std::size_t plane = (static_cast<std::size_t>(n) * in_.c + c) * in_.h * in_.w;
        for (int oy = 0; oy < out_.h; ++oy) {
          for (int ox = 0; ox < out_.w; ++ox, ++o) {
            std::size_t best = plane + static_cast<std::size_t>(oy * s_) * in_.w + ox * s_;
            for (int dy = 0; dy < s_; ++dy) {
              for (int dx = 0; dx < s_; ++dx) {
                const std::size_t at = plane + static_cast<std::size_t>(oy * s_ + dy) * in_.w + (ox * s_ + dx);
                if (in[at] > in[best]) best = at;
              }
            }
            visit(o, best);
          }
        }
      }
    }
  }
  int s_ = 1;
};

}  // namespace

std::unique_ptr<Layer> MakeDense(Shape3 in, int units) { return std::make_unique<Dense>(in, units); }
std::unique_ptr<Layer> MakeRelu(Shape3 in) { return std::make_unique<Relu>(in); }
std::unique_ptr<Layer> MakeConv2d(Shape3 in, int filters, int kernel) {
  return std::make_unique<Conv2d>(in, filters, kernel);
}
std::unique_ptr<Layer> MakeMaxPool(Shape3 in, int window) {
  return std::make_unique<MaxPool>(in, window);
}

}  // namespace fedrt
