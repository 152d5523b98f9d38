// `fedrt train`: trains a model on an MNIST-style data set (Fashion-MNIST by
// default) on this machine, one progress line per epoch, JSON lines to
// --metrics, a checkpoint after every epoch and resumption from it.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/console.h"
#include "cli/model_files.h"
#include "fedrt/platform/clock.h"
#include "fedrt/runtime/checkpoint.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/gemm.h"
#include "fedrt/runtime/model_file.h"
#include "fedrt/runtime/trainer.h"
#include "src/star/aggregator_checkpoint.h"

namespace fedrt::cli {
namespace {

struct TrainFlags {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "mlp:784-300-100-10";
  int epochs = 5;
  int batch = 64;
  double lr = 0.05;
  float momentum = 0.9f;
  bool nesterov = false;
  float weight_decay = 5e-4f;  // +0.3 points on Fashion-MNIST LeNet-300-100 at 5 epochs
  float clip_norm = 0.0f;
  std::string schedule = "cosine";
  std::string checkpoint;
  std::string init_model;
  std::string save_model;
  uint64_t seed = 1;
  std::string metrics;
};

// Updates between two looks at the progress line.
constexpr std::size_t kProgressSteps = 16;

int Fail(const Status& status) {
  std::fprintf(stderr, "fedrt train: %s\n", status.ToString().c_str());
  return 1;
}

int RunTrain(const TrainFlags& flags, bool model_given) {
  // Resume first: the checkpoint names the model when --model is not given.
  Result<Checkpoint> resume = Status(StatusCode::kNotFound, "");
  std::string spec = flags.model;
  if (!flags.checkpoint.empty()) {
    // Only a missing file is a fresh start: one that cannot be read stops here.
    // Any checkpoint: one `fedrt serve` wrote gives its global model (epoch 0).
    resume = ReadAnyCheckpointFile(flags.checkpoint);
    if (!resume.ok() && resume.status().code() != StatusCode::kNotFound) return Fail(resume.status());
    if (resume.ok() && !model_given) spec = resume->spec;
    if (!resume.ok()) std::printf("no checkpoint at %s yet: starting at epoch 0\n", flags.checkpoint.c_str());
  }

  // A fresh start may begin from a model file; a resumed run continues its checkpoint.
  Result<LoadedModel> init = Status(StatusCode::kNotFound, "");
  if (!flags.init_model.empty() && !resume.ok()) {
    init = LoadAnyModel(flags.init_model, model_given ? flags.model : "");
    if (!init.ok()) return Fail(init.status());
    spec = init->spec;
  }

  Stopwatch load_watch;
  Result<TrainTestData> data = LoadDataSet(flags.data);
  if (!data.ok()) return Fail(data.status());
  NormalizeWithTrainingSet(*data);

  Result<Model> model = Model::Create(spec, flags.seed);
  if (!model.ok()) return Fail(model.status());
  if (model->input_size() != data->train.example_size()) {
    return Fail(InvalidArgument("model '" + spec + "' takes " + std::to_string(model->input_size()) +
                                " inputs, the data has " + std::to_string(data->train.example_size()) +
                                " features per example"));
  }
  const Status classes = CheckClassCount(*model, data->train.num_classes, "the data");
  if (!classes.ok()) return Fail(classes);

  const std::size_t steps_per_epoch =
      (data->train.count + static_cast<std::size_t>(flags.batch) - 1) / static_cast<std::size_t>(flags.batch);
  SgdOptions options;
  options.schedule.base_lr = flags.lr;
  if (flags.schedule == "constant") {
    options.schedule.kind = LrScheduleKind::kConstant;
  } else if (flags.schedule == "step") {
    // Divide by 10 at two thirds of the run.
    options.schedule.kind = LrScheduleKind::kStep;
    options.schedule.step_size = std::max<std::size_t>(1, steps_per_epoch * static_cast<std::size_t>(flags.epochs) * 2 / 3);
    options.schedule.gamma = 0.1;
  } else {
    options.schedule.kind = LrScheduleKind::kCosine;
    options.schedule.total_steps = steps_per_epoch * static_cast<std::size_t>(flags.epochs);
  }
  options.momentum = flags.momentum;
  options.nesterov = flags.nesterov;
  options.weight_decay = flags.weight_decay;
  options.clip_norm = flags.clip_norm;
  Result<Sgd> sgd = Sgd::Create(options, model->parameter_count());
  if (!sgd.ok()) return Fail(sgd.status());

  uint64_t first_epoch = 0;
  if (init.ok()) {
    std::memcpy(model->parameters(), init->parameters.data(), init->parameters.size() * sizeof(float));
    std::printf("starting from %s (%s)\n", flags.init_model.c_str(), init->kind.c_str());
  } else if (resume.ok() && !flags.init_model.empty()) {
    std::printf("resuming %s: --init-model %s was for the first start\n", flags.checkpoint.c_str(),
                flags.init_model.c_str());
  }
  if (resume.ok()) {
    const Status restored = RestoreCheckpoint(*resume, *model, *sgd);
    if (!restored.ok()) return Fail(restored);
    first_epoch = resume->epoch;
    std::printf("resumed from %s: epoch %llu, step %llu%s\n", flags.checkpoint.c_str(),
                static_cast<unsigned long long>(resume->epoch), static_cast<unsigned long long>(resume->step),
                resume->aggregator_state.empty() ? "" : " (an aggregator's checkpoint: its state is kept in the file)");
  }

  std::ofstream metrics;
  if (!flags.metrics.empty()) {
    metrics.open(flags.metrics, resume.ok() ? std::ios::app : std::ios::trunc);
    if (!metrics) return Fail(IoError(flags.metrics + ": cannot open for writing"));
  }

  std::printf("fedrt train: %s, %zu parameters, %zu training / %zu test examples, batch %d, gemm %s%s%s%s (data loaded in %.1f s)\n",
              spec.c_str(), model->parameter_count(), data->train.count, data->test.count, flags.batch,
              GemmBackendName(), *OpenBlasCoreName() ? " (" : "", OpenBlasCoreName(), *OpenBlasCoreName() ? " kernels)" : "",
              load_watch.ElapsedSeconds());
  std::fflush(stdout);

  TrainOptions train_options;
  train_options.batch = flags.batch;
  train_options.seed = flags.seed;
  Result<Evaluation> eval = Status(StatusCode::kNotFound, "no epoch ran");
  for (uint64_t epoch = first_epoch; epoch < static_cast<uint64_t>(flags.epochs); ++epoch) {
    // TrainEpoch's updates, a slice at a time for the progress line.
    Result<TrainingPass> pass = TrainingPass::Start(*model, data->train, epoch, train_options);
    if (!pass.ok()) return Fail(pass.status());
    const std::string title = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(flags.epochs);
    Progress progress(title);
    while (!pass->done()) {
      const Status ran = pass->Run(*model, *sgd, kProgressSteps);
      if (!ran.ok()) return Fail(ran);
      const std::size_t done = pass->stats().steps;
      progress.Update(static_cast<double>(done) / static_cast<double>(pass->total_steps()),
                      std::to_string(done) + "/" + std::to_string(pass->total_steps()) + " steps");
    }
    progress.Done();
    const EpochStats stats_value = pass->stats();
    const EpochStats* stats = &stats_value;
    eval = EvaluateModel(*model, data->test, 256);
    if (!eval.ok()) return Fail(eval.status());
    const double samples_per_second = static_cast<double>(stats->examples) / stats->seconds;
    std::printf("epoch %llu/%d  loss %.4f  train acc %.2f%%  test acc %.2f%%  test loss %.4f  %.0f samples/s  %.1f s\n",
                static_cast<unsigned long long>(epoch + 1), flags.epochs, stats->loss, 100.0 * stats->accuracy,
                100.0 * eval->accuracy, eval->loss, samples_per_second, stats->seconds);
    std::fflush(stdout);
    if (metrics.is_open()) {
      nlohmann::json line = {{"epoch", epoch + 1},
                             {"epochs", flags.epochs},
                             {"step", sgd->step()},
                             {"lr", sgd->current_lr()},
                             {"train_loss", stats->loss},
                             {"train_accuracy", stats->accuracy},
                             {"test_loss", eval->loss},
                             {"test_accuracy", eval->accuracy},
                             {"samples_per_second", samples_per_second},
                             {"epoch_seconds", stats->seconds}};
      nlohmann::json per_class = nlohmann::json::array();
      for (std::size_t c = 0; c < eval->class_examples.size(); ++c) per_class.push_back(eval->ClassAccuracy(c));
      line["test_class_accuracy"] = per_class;
      metrics << line.dump() << "\n" << std::flush;
    }
    if (!flags.checkpoint.empty()) {
      Checkpoint state = CaptureCheckpoint(*model, *sgd, epoch + 1);
      // The aggregator's state goes back as it was: `fedrt serve` resumes from
      // this file at its round, from the model trained here.
      if (resume.ok()) state.aggregator_state = resume->aggregator_state;
      const Status saved = WriteCheckpointFile(flags.checkpoint, state);
      if (!saved.ok()) return Fail(saved);
    }
  }
  if (!eval.ok()) {
    std::printf("nothing to train: the checkpoint already has %llu of %d epochs\n",
                static_cast<unsigned long long>(first_epoch), flags.epochs);
    eval = EvaluateModel(*model, data->test, 256);
    if (!eval.ok()) return Fail(eval.status());
    std::printf("test acc %.2f%%  test loss %.4f\n", 100.0 * eval->accuracy, eval->loss);
  }
  if (!flags.save_model.empty()) {
    const Status saved = WriteModelNpz(flags.save_model, *model);
    if (!saved.ok()) return Fail(saved);
    std::printf("saved the model to %s\n", flags.save_model.c_str());
  }
  std::printf("test accuracy per class:");
  for (std::size_t c = 0; c < eval->class_examples.size(); ++c) std::printf(" %zu:%.1f%%", c, 100.0 * eval->ClassAccuracy(c));
  std::printf("\n");
  return 0;
}

}  // namespace

void RegisterTrain(CLI::App& app, CommandList& commands) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* train = app.add_subcommand("train", "Train a model on an MNIST-style data set on this machine");
  train->add_option("--data", flags->data, "Directory with the four IDX files (train-/t10k-images/labels)")
      ->capture_default_str();
  train->add_option("--model", flags->model, "Model spec: mlp:784-300-100-10 or cnn:28x28x1-c16k5-p2-... (runtime/README.md)")
      ->capture_default_str();
  train->add_option("--epochs", flags->epochs, "Epochs to train (in all, counting resumed ones)")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  train->add_option("--batch", flags->batch, "Batch size")->capture_default_str()->check(CLI::Range(1, 65536));
  train->add_option("--lr", flags->lr, "Base learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  train->add_option("--momentum", flags->momentum, "SGD momentum (0: none)")->capture_default_str()->check(CLI::Range(0.0, 0.999));
  train->add_flag("--nesterov", flags->nesterov, "Nesterov momentum");
  train->add_option("--weight-decay", flags->weight_decay, "L2 weight decay")->capture_default_str()->check(CLI::NonNegativeNumber);
  train->add_option("--clip-norm", flags->clip_norm, "Clip gradients to this global L2 norm (0: off)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  train->add_option("--schedule", flags->schedule, "Learning-rate schedule")
      ->capture_default_str()->check(CLI::IsMember({"constant", "step", "cosine"}));
  train->add_option("--checkpoint", flags->checkpoint, "Checkpoint file: resumed from if it exists, written after every epoch");
  train->add_option("--init-model", flags->init_model,
                    "Start from this model (.npz, or a training or aggregator checkpoint) instead of a random one");
  train->add_option("--save-model", flags->save_model, "Write the final model to this .npz (numpy.load reads it)");
  train->add_option("--seed", flags->seed, "Seed of initialisation and shuffling")->capture_default_str();
  train->add_option("--metrics", flags->metrics, "Write one JSON object per epoch to this file");
  commands.push_back({train, [flags, train] { return RunTrain(*flags, train->count("--model") > 0); }});
  RegisterTrainBench(app, commands);
}

}  // namespace fedrt::cli
