// Dense, ReLU, Conv2d (im2col + GEMM, stride 1, "same" zero padding) and
// max-pool layers. All matrix work goes through Gemm() (OpenBLAS or built-in).
#include "train/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fedrt/runtime/gemm.h"

namespace fedrt {
namespace {

// Im2col copies image rows of a few dozen floats, thousands per example; GCC
// turns each such loop into a call to memmove, which costs more than the copy.
#if defined(__GNUC__) && !defined(__clang__)
#define FEDRT_INLINE_COPIES __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define FEDRT_INLINE_COPIES
#endif

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

// ---- Conv2d: out_n[F x HW] = W[F x CKK] * col_n[CKK x HW] + b, per example ---
// One im2col block per example, not one for the whole batch: the block stays
// in cache between im2col and the GEMM that reads it (one for the batch was
// 10 MB for the second layer of the LeNet-like CNN and ran at memory speed),
// the GEMM writes each example's output in place (F x HW is its NCHW layout)
// and the backward pass reads d_out where it lies. The weight gradient
// accumulates over examples with beta = 1, which adds the products in the
// same order as one GEMM over the batch's columns, so the built-in GEMM's
// results are the bits they were.
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
  // One example's im2col block, then its padded input planes (no larger:
  // H + K - 1 <= K * H).
  uint64_t ScratchFloats(int) const override {
    return static_cast<uint64_t>(ckk_) * static_cast<uint64_t>(hw_) + PaddedFloats();
  }
  std::size_t GemmScratchFloats(int) const override {
    return std::max({fedrt::GemmScratchFloats(filters_, hw_, ckk_),
                     fedrt::GemmScratchFloats(filters_, ckk_, hw_),
                     fedrt::GemmScratchFloats(ckk_, hw_, filters_)});
  }

  void Forward(const float* in, float* out, int batch, const LayerWorkspace& ws) override {
    float* col = ws.floats;
    float* padded = col + static_cast<std::size_t>(ckk_) * hw_;
    for (int n = 0; n < batch; ++n) {
      float* y = out + static_cast<std::size_t>(n) * out_.size();
      Im2Col(in + static_cast<std::size_t>(n) * in_.size(), col, padded);
      Gemm(Transpose::kNo, Transpose::kNo, filters_, hw_, ckk_, w_, ckk_, col, hw_, 0.0f, y, hw_, ws.gemm);
      for (int f = 0; f < filters_; ++f) {
        float* row = y + static_cast<std::size_t>(f) * hw_;
        const float bias = b_[f];
        for (int i = 0; i < hw_; ++i) row[i] += bias;
      }
    }
  }
  void Backward(const float* in, const float*, const float* d_out, float* d_in, int batch,
                const LayerWorkspace& ws) override {
    float* col = ws.floats;
    float* padded = col + static_cast<std::size_t>(ckk_) * hw_;
    for (int f = 0; f < filters_; ++f) db_[f] = 0.0f;
    for (int n = 0; n < batch; ++n) {
      const float* dy = d_out + static_cast<std::size_t>(n) * out_.size();
      // db = row sums of dY over the batch, example by example (per filter
      // the same order of additions as one pass over the batch's columns).
      AddRowSums(dy);
      // dW += dY_n col_n^T.
      Im2Col(in + static_cast<std::size_t>(n) * in_.size(), col, padded);
      Gemm(Transpose::kNo, Transpose::kYes, filters_, ckk_, hw_, dy, hw_, col, hw_, n == 0 ? 0.0f : 1.0f, dw_,
           ckk_, ws.gemm);
      if (d_in == nullptr) continue;
      // d col = W^T dY_n, into the col buffer (no longer needed), then col2im.
      Gemm(Transpose::kYes, Transpose::kNo, ckk_, hw_, filters_, w_, ckk_, dy, hw_, 0.0f, col, hw_, ws.gemm);
      Col2Im(col, d_in + static_cast<std::size_t>(n) * in_.size(), padded);
    }
    if (batch <= 0) std::memset(dw_, 0, sizeof(float) * static_cast<std::size_t>(filters_) * ckk_);
  }

 private:
  // The input planes with K/2 zeros around each (the "same" padding made
  // explicit), so that im2col and col2im move whole rows without bounds
  // checks: padded[c][py][px], py < H + K - 1, px < W + K - 1.
  int PaddedHeight() const { return in_.h + kernel_ - 1; }
  int PaddedWidth() const { return in_.w + kernel_ - 1; }
  std::size_t PaddedFloats() const {
    return static_cast<std::size_t>(in_.c) * PaddedHeight() * PaddedWidth();
  }

  // col[(c*K + ky)*K + kx][y*W + x] = in[c][y + ky - K/2][x + kx - K/2]
  // (0 outside the image), through the padded planes.
  FEDRT_INLINE_COPIES void Im2Col(const float* x, float* __restrict col, float* __restrict padded) const {
    const int pad = kernel_ / 2;
    const std::size_t pw = static_cast<std::size_t>(PaddedWidth());
    const std::size_t w = static_cast<std::size_t>(in_.w);
    std::memset(padded, 0, sizeof(float) * PaddedFloats());
    for (int c = 0; c < in_.c; ++c) {
      const float* plane = x + static_cast<std::size_t>(c) * in_.h * w;
      float* padded_plane = padded + static_cast<std::size_t>(c) * PaddedHeight() * pw;
      for (int y = 0; y < in_.h; ++y) {
        std::memcpy(padded_plane + (static_cast<std::size_t>(y + pad)) * pw + pad, plane + y * w, sizeof(float) * w);
      }
      for (int ky = 0; ky < kernel_; ++ky) {
        for (int kx = 0; kx < kernel_; ++kx) {
          float* __restrict row = col + static_cast<std::size_t>((c * kernel_ + ky) * kernel_ + kx) * hw_;
          const float* __restrict src = padded_plane + static_cast<std::size_t>(ky) * pw + kx;
          for (int y = 0; y < in_.h; ++y, row += w, src += pw) {
            for (std::size_t xx = 0; xx < w; ++xx) row[xx] = src[xx];
          }
        }
      }
    }
  }
  // The adjoint of Im2Col: overwrites dx with the sums of its col entries.
  // Each element receives its terms in the order (c, ky, kx) from zero, as
  // a scatter straight into dx would add them; the padding's sums are dropped.
  void Col2Im(const float* d_col, float* __restrict dx, float* __restrict padded) const {
    const int pad = kernel_ / 2;
    const std::size_t pw = static_cast<std::size_t>(PaddedWidth());
    const std::size_t w = static_cast<std::size_t>(in_.w);
    std::memset(padded, 0, sizeof(float) * PaddedFloats());
    for (int c = 0; c < in_.c; ++c) {
      float* padded_plane = padded + static_cast<std::size_t>(c) * PaddedHeight() * pw;
      for (int ky = 0; ky < kernel_; ++ky) {
        for (int kx = 0; kx < kernel_; ++kx) {
          const float* __restrict row = d_col + static_cast<std::size_t>((c * kernel_ + ky) * kernel_ + kx) * hw_;
          float* __restrict dst = padded_plane + static_cast<std::size_t>(ky) * pw + kx;
          for (int y = 0; y < in_.h; ++y, row += w, dst += pw) {
            for (std::size_t xx = 0; xx < w; ++xx) dst[xx] += row[xx];
          }
        }
      }
      float* plane = dx + static_cast<std::size_t>(c) * in_.h * w;
      for (int y = 0; y < in_.h; ++y) {
        std::memcpy(plane + y * w, padded_plane + (static_cast<std::size_t>(y + pad)) * pw + pad, sizeof(float) * w);
      }
    }
  }

  // db[f] += the sum of row f of dY (F x HW), each filter's terms in order.
  // The filters' sums are independent chains, run eight at a time so the
  // additions overlap instead of waiting on each other.
  void AddRowSums(const float* dy) const {
    constexpr int kChains = 8;
    for (int f0 = 0; f0 < filters_; f0 += kChains) {
      const int count = std::min(kChains, filters_ - f0);
      float sum[kChains];
      const float* rows[kChains];
      for (int j = 0; j < kChains; ++j) {
        const int f = f0 + std::min(j, count - 1);
        sum[j] = db_[f];
        rows[j] = dy + static_cast<std::size_t>(f) * hw_;
      }
      for (int i = 0; i < hw_; ++i) {
        for (int j = 0; j < kChains; ++j) sum[j] += rows[j][i];
      }
      for (int j = 0; j < count; ++j) db_[f0 + j] = sum[j];
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
    ForEachWindow(in, batch, [&](std::size_t o, std::size_t, std::size_t best) { out[o] = in[best]; });
  }
  void Backward(const float* in, const float*, const float* d_out, float* d_in, int batch,
                const LayerWorkspace&) override {
    if (d_in == nullptr) return;
    // Windows do not overlap, so each element inside one is written once: the
    // gradient at the window's first maximum (as in Forward), zero elsewhere.
    // Only the rows and columns no window covers need clearing first.
    if (out_.h * s_ != in_.h || out_.w * s_ != in_.w) {
      std::memset(d_in, 0, sizeof(float) * in_.size() * static_cast<std::size_t>(batch));
    }
    const std::size_t w = static_cast<std::size_t>(in_.w);
    ForEachWindow(in, batch, [&](std::size_t o, std::size_t origin, std::size_t best) {
      const float g = 0.0f + d_out[o];  // what adding into zeroed memory gave: -0 becomes +0
      for (int dy = 0; dy < s_; ++dy) {
        float* row = d_in + origin + static_cast<std::size_t>(dy) * w;
        for (int dx = 0; dx < s_; ++dx) row[dx] = 0.0f;
      }
      d_in[best] = g;
    });
  }

 private:
  // Calls visit(output index, window origin, first maximum) for every window
  // in output order; the maximum is the first in row-major order that no
  // later element exceeds (NaN never wins, as a comparison it fails).
  template <typename Visit>
  void ForEachWindow(const float* in, int batch, Visit visit) const {
    if (s_ == 2) {
      ForEachWindowOf<2>(in, batch, visit);
    } else {
      ForEachWindowOf<0>(in, batch, visit);
    }
  }
  // kS is the window when known at compile time (0: s_).
  template <int kS, typename Visit>
  void ForEachWindowOf(const float* in, int batch, Visit visit) const {
    const int s = kS != 0 ? kS : s_;
    const std::size_t w = static_cast<std::size_t>(in_.w);
    std::size_t o = 0;
    for (int n = 0; n < batch; ++n) {
      for (int c = 0; c < in_.c; ++c) {
        const std::size_t plane = (static_cast<std::size_t>(n) * in_.c + c) * in_.h * w;
        for (int oy = 0; oy < out_.h; ++oy) {
          const std::size_t top = plane + static_cast<std::size_t>(oy * s) * w;
          for (int ox = 0; ox < out_.w; ++ox, ++o) {
            const std::size_t origin = top + static_cast<std::size_t>(ox * s);
            std::size_t best = origin;
            for (int dy = 0; dy < s; ++dy) {
              for (int dx = 0; dx < s; ++dx) {
                const std::size_t at = origin + static_cast<std::size_t>(dy) * w + static_cast<std::size_t>(dx);
                if (in[at] > in[best]) best = at;
              }
            }
            visit(o, origin, best);
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
