// Training-core benchmark: GEMM throughput of every built-in micro-kernel
// variant and of the training backend on the shapes LeNet-300-100 and the
// small CNN use, then the time of one training step (batch 64) on synthetic
// data.
//
// Usage: fedrt_train_bench [steps]      (default 200)
// Expected output (numbers depend on the machine):
//   gemm 64x300x784 (x W^T)   scalar   2.1 GFLOP/s   avx2   6.0 GFLOP/s   OpenBLAS  40.2 GFLOP/s
//   ...
//   step mlp:784-300-100-10 batch 64: 2.1 ms (30476 samples/s)
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/runtime/gemm.h"
#include "fedrt/runtime/trainer.h"
#include "train/gemm_kernels.h"

namespace fedrt {
namespace {

struct Shape {
  const char* what;
  int m, n, k;
  Transpose ta, tb;
};

template <typename F>
double Seconds(F run) {
  run();  // warm up (packing scratch, OpenBLAS threads)
  int reps = 1;
  for (;;) {
    Stopwatch watch;
    for (int r = 0; r < reps; ++r) run();
    const double s = watch.ElapsedSeconds();
    if (s > 0.2 || reps >= (1 << 20)) return s / reps;
    reps *= 4;
  }
}

void BenchGemm(const Shape& s) {
  const int lda = s.ta == Transpose::kNo ? s.k : s.m;
  const int ldb = s.tb == Transpose::kNo ? s.n : s.k;
  std::vector<float> a(static_cast<std::size_t>(s.m) * s.k, 0.5f), b(static_cast<std::size_t>(s.k) * s.n, 0.25f),
      c(static_cast<std::size_t>(s.m) * s.n);
  const double flops = 2.0 * s.m * s.n * s.k;
  std::printf("gemm %-28s", s.what);
  for (Isa isa : AvailableIsas()) {
    const GemmMicroKernel kernel = GemmMicroKernelFor(isa);
    const double t = Seconds([&] {
      BlockedGemm(kernel, s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n);
    });
    std::printf("  %s %6.1f GFLOP/s", IsaName(isa), flops / t * 1e-9);
  }
  const double t = Seconds([&] { Gemm(s.ta, s.tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n); });
  std::printf("  training (%s) %6.1f GFLOP/s\n", GemmBackendName(), flops / t * 1e-9);
}

void BenchStep(const char* spec, std::size_t steps) {
  Dataset d;
  d.count = 64 * steps;
  d.height = d.width = 28;
  d.num_classes = 10;
  d.pixels.resize(d.count * d.example_size());
  d.labels.resize(d.count);
  for (std::size_t i = 0; i < d.pixels.size(); ++i) d.pixels[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
  d.normalization = {0.5f, 0.5f};
  for (std::size_t i = 0; i < d.count; ++i) d.labels[i] = static_cast<uint8_t>(i % 10);
  Result<Model> model = Model::Create(spec, 1);
  SgdOptions options;
  options.momentum = 0.9f;
  Result<Sgd> sgd = Sgd::Create(options, model->parameter_count());
  if (!model.ok() || !sgd.ok()) return;
  TrainOptions train;
  train.batch = 64;
  train.max_steps = 5;
  if (!TrainEpoch(*model, *sgd, d, 0, train).ok()) return;  // warm up
  train.max_steps = 0;
  Result<EpochStats> stats = TrainEpoch(*model, *sgd, d, 1, train);
  if (!stats.ok()) return;
  std::printf("step %s batch 64: %.2f ms (%.0f samples/s, %zu steps)\n", spec,
              1e3 * stats->seconds / static_cast<double>(stats->steps),
              static_cast<double>(stats->examples) / stats->seconds, stats->steps);
}

}  // namespace
}  // namespace fedrt

int main(int argc, char** argv) {
  using fedrt::Transpose;
  const std::size_t steps = argc > 1 ? static_cast<std::size_t>(std::atol(argv[1])) : 200;
  std::printf("kernel isa %s, training gemm %s %s\n", fedrt::IsaName(fedrt::ActiveIsa()), fedrt::GemmBackendName(),
              fedrt::OpenBlasCoreName());
  const fedrt::Shape shapes[] = {
      {"64x300x784 (x W^T)", 64, 300, 784, Transpose::kNo, Transpose::kYes},
      {"300x784x64 (dY^T x)", 300, 784, 64, Transpose::kYes, Transpose::kNo},
      {"64x784x300 (dY W)", 64, 784, 300, Transpose::kNo, Transpose::kNo},
      {"16x12544x200 (conv2 fwd)", 16, 12544, 200, Transpose::kNo, Transpose::kNo},
  };
  for (const fedrt::Shape& s : shapes) fedrt::BenchGemm(s);
  fedrt::BenchStep("mlp:784-300-100-10", steps);
  fedrt::BenchStep("cnn:28x28x1-c8k5-p2-c16k5-p2-d128-10", steps / 10 + 1);
  return 0;
}
