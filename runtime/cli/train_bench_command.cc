// `fedrt bench train`: the time of one training step (forward, backward and
// the SGD-momentum update: TrainStep) for a model and batch size, with the
// training GEMM on a given number of threads. The counterpart of
// runtime/bench/torch_step.py, which times the same step in PyTorch; both
// print the same fields so they can be run alternately and compared.
//
// Batches are synthetic (random bytes normalised like a Fashion-MNIST
// batch), prepared before timing in a pool that the steps cycle through, so
// a step reads its input from memory and times only the training work.
#include <CLI/CLI.hpp>

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_record.h"
#include "cli/commands.h"
#include "fedrt/platform/clock.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/gemm.h"
#include "fedrt/runtime/trainer.h"

namespace fedrt::cli {
namespace {

struct TrainBenchFlags {
  std::string model = "mlp:784-300-100-10";
  int batch = 64;
  int threads = 1;
  int steps = 300;
  int warmup = 20;
  int pool = 16;
  bool json = false;
  std::string record;  // a markdown file the result is appended to (bench_record.h)
};

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const std::size_t at = static_cast<std::size_t>(q * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(at, values.size() - 1)];
}

int Fail(const Status& status) {
  std::fprintf(stderr, "fedrt bench train: %s\n", status.ToString().c_str());
  return 1;
}

int RunTrainBench(const TrainBenchFlags& flags) {
  const std::string load_before = LoadAverage();
  if (!SetGemmThreads(flags.threads)) {
    return Fail(InvalidArgument("the " + std::string(GemmBackendName()) + " GEMM cannot use " +
                                std::to_string(flags.threads) + " threads"));
  }
  Result<Model> model = Model::Create(flags.model, 1);
  if (!model.ok()) return Fail(model.status());
  SgdOptions options;  // as runtime/bench/torch_step.py: lr 0.05, momentum 0.9, weight decay 5e-4
  options.schedule.base_lr = 0.05;
  options.momentum = 0.9f;
  options.weight_decay = 5e-4f;
  Result<Sgd> sgd = Sgd::Create(options, model->parameter_count());
  if (!sgd.ok()) return Fail(sgd.status());
  const Status reserved = model->Reserve(flags.batch);
  if (!reserved.ok()) return Fail(reserved);

  const std::size_t batch = static_cast<std::size_t>(flags.batch);
  const std::size_t pool = static_cast<std::size_t>(flags.pool);
  Dataset data;
  data.count = batch * pool;
  data.width = static_cast<int>(model->input_size());
  data.num_classes = model->num_classes();
  data.pixels.resize(data.count * data.example_size());
  data.labels.resize(data.count);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (uint8_t& v : data.pixels) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<uint8_t>(state >> 56);
  }
  for (std::size_t i = 0; i < data.count; ++i) data.labels[i] = static_cast<uint8_t>(i % static_cast<std::size_t>(data.num_classes));
  Normalize(data, {0.2860f, 0.3530f});
  std::vector<float> inputs(data.pixels.size());
  std::vector<uint32_t> order(data.count);
  for (std::size_t i = 0; i < data.count; ++i) order[i] = static_cast<uint32_t>(i);
  std::vector<uint8_t> labels(data.count);
  GatherBatch(data, order.data(), data.count, inputs.data(), labels.data());

  std::vector<double> seconds;
  seconds.reserve(static_cast<std::size_t>(flags.steps));
  double cpu = 0.0;
  double wall = 0.0;
  for (int s = 0; s < flags.warmup + flags.steps; ++s) {
    const std::size_t k = static_cast<std::size_t>(s) % pool;
    const double cpu_start = ProcessCpuSeconds();
    Stopwatch watch;
    Result<BatchLoss> loss = TrainStep(*model, *sgd, inputs.data() + k * batch * data.example_size(),
                                       labels.data() + k * batch, flags.batch);
    const double elapsed = watch.ElapsedSeconds();
    const double cpu_used = ProcessCpuSeconds() - cpu_start;
    if (!loss.ok()) return Fail(loss.status());
    if (s < flags.warmup) continue;
    seconds.push_back(elapsed);
    cpu += cpu_used;
    wall += elapsed;
  }
  const double n = static_cast<double>(seconds.size());
  const std::string gemm = std::string(GemmBackendName()) +
                           (*OpenBlasCoreName() ? std::string(" (") + OpenBlasCoreName() + " kernels)" : "");
  if (flags.json) {
    std::printf("{\"impl\":\"fedrt\",\"model\":\"%s\",\"batch\":%d,\"threads\":%d,\"steps\":%d,\"p10_ms\":%.4f,"
                "\"p50_ms\":%.4f,\"p90_ms\":%.4f,\"mean_ms\":%.4f,\"cpu_ms_per_step\":%.4f,\"gemm\":\"%s\","
                "\"isa\":\"%s\"}\n",
                flags.model.c_str(), flags.batch, GemmThreads(), flags.steps, 1e3 * Percentile(seconds, 0.1),
                1e3 * Percentile(seconds, 0.5), 1e3 * Percentile(seconds, 0.9), 1e3 * wall / n, 1e3 * cpu / n,
                gemm.c_str(), IsaName(ActiveIsa()));
  } else {
    std::printf("fedrt  %s batch %d threads %d: p50 %.3f ms  p10 %.3f  p90 %.3f  mean %.3f  cpu %.3f ms/step  "
                "(%d steps; gemm %s, kernels %s)\n",
                flags.model.c_str(), flags.batch, GemmThreads(), 1e3 * Percentile(seconds, 0.5),
                1e3 * Percentile(seconds, 0.1), 1e3 * Percentile(seconds, 0.9), 1e3 * wall / n, 1e3 * cpu / n,
                flags.steps, gemm.c_str(), IsaName(ActiveIsa()));
  }
  if (!flags.record.empty()) {
    BenchRecord record;
    record.title = "fedrt bench train";
    record.load_before = load_before;
    record.columns = {"model", "batch", "threads", "steps", "p50 ms", "p10 ms", "p90 ms", "mean ms", "CPU ms/step",
                      "gemm", "kernels"};
    const auto ms = [](double s) {
      char text[32];
      std::snprintf(text, sizeof text, "%.3f", 1e3 * s);
      return std::string(text);
    };
    record.rows.push_back({flags.model, std::to_string(flags.batch), std::to_string(GemmThreads()),
                           std::to_string(flags.steps), ms(Percentile(seconds, 0.5)), ms(Percentile(seconds, 0.1)),
                           ms(Percentile(seconds, 0.9)), ms(wall / n), ms(cpu / n), gemm, IsaName(ActiveIsa())});
    const Status written = AppendBenchRecord(flags.record, record);
    if (!written.ok()) return Fail(written);
    std::fprintf(stderr, "recorded in %s\n", flags.record.c_str());
  }
  return 0;
}

}  // namespace

void RegisterTrainBench(CLI::App& app, CommandList& commands) {
  CLI::App* bench = app.get_subcommand("bench");
  auto flags = std::make_shared<TrainBenchFlags>();
  CLI::App* train = bench->add_subcommand("train", "Time one training step (forward, backward, SGD momentum)");
  train->add_option("--model", flags->model, "Model spec")->capture_default_str();
  train->add_option("--batch", flags->batch, "Batch size")->capture_default_str()->check(CLI::Range(1, 65536));
  train->add_option("--threads", flags->threads, "Threads of the training GEMM (OpenBLAS)")
      ->capture_default_str()->check(CLI::Range(1, 256));
  train->add_option("--steps", flags->steps, "Timed steps")->capture_default_str()->check(CLI::Range(1, 1000000));
  train->add_option("--warmup", flags->warmup, "Untimed steps first")->capture_default_str()->check(CLI::Range(0, 1000000));
  train->add_option("--pool", flags->pool, "Distinct batches the steps cycle through")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  train->add_flag("--json", flags->json, "One JSON object instead of the text line");
  train->add_option("--record", flags->record,
                    "Also append the result as a dated markdown section to this file (e.g. docs/benchmarks/training.md)");
  commands.push_back({train, [flags] { return RunTrainBench(*flags); }});
}

}  // namespace fedrt::cli
