#include "fedrt/runtime/trainer.h"

#include <algorithm>
#include <string>

#include "fedrt/platform/clock.h"

namespace fedrt {
namespace {

Status CheckShapes(const Model& model, const DataView& data, int batch) {
  if (batch <= 0) return InvalidArgument("batch size must be positive");
  if (data.example_size != model.input_size()) {
    return InvalidArgument("examples have " + std::to_string(data.example_size) + " features, model '" +
                           model.spec().text + "' expects " + std::to_string(model.input_size()));
  }
  if (data.count > 0 && (data.labels == nullptr || (data.pixels == nullptr) == (data.features == nullptr))) {
    return InvalidArgument("the data view's labels or features are missing");
  }
  return Status::Ok();
}

constexpr std::size_t kPieceFloats = kSimdAlignment / sizeof(float);
std::size_t Padded(std::size_t floats) { return (floats + kPieceFloats - 1) / kPieceFloats * kPieceFloats; }

}  // namespace

Status CheckClassCount(const Model& model, int data_classes, const std::string& what) {
  if (data_classes == model.num_classes()) return Status::Ok();
  return InvalidArgument(what + " has " + std::to_string(data_classes) + " classes, model '" + model.spec().text +
                         "' predicts " + std::to_string(model.num_classes()) + "; its last layer must have " +
                         std::to_string(data_classes) + " outputs (e.g. ...-" + std::to_string(data_classes) + ")");
}

std::size_t TrainingBufferSizes::total_floats() const {
  return Padded(parameters) + Padded(gradients) + Padded(optimizer_state) + Padded(workspace);
}

Result<TrainingBufferSizes> QueryTrainingBufferSizes(const std::string& spec, const SgdOptions& sgd,
                                                     int batch) {
  FEDRT_RETURN_IF_ERROR(ValidateSgdOptions(sgd));
  Result<ModelBufferSizes> model = QueryModelBufferSizes(spec, batch);
  if (!model.ok()) return model.status();
  TrainingBufferSizes sizes;
  sizes.parameters = model->parameters;
  sizes.gradients = model->gradients;
  sizes.optimizer_state = Sgd::StateFloats(sgd, model->parameters);
  sizes.workspace = model->workspace;
  return sizes;
}

Result<TrainingBuffers> CarveTrainingBuffers(const TrainingBufferSizes& sizes, FloatSpan arena) {
  const std::size_t total = sizes.total_floats();
  if (arena.data == nullptr || arena.size < total) {
    return InvalidArgument("training arena holds " + std::to_string(arena.data == nullptr ? 0 : arena.size) +
                           " floats, " + std::to_string(total) + " are needed");
  }
  TrainingBuffers b;
  float* at = arena.data;
  auto take = [&at](std::size_t floats) {
    const FloatSpan span{at, floats};
    at += Padded(floats);
    return span;
  };
  b.parameters = take(sizes.parameters);
  b.gradients = take(sizes.gradients);
  b.optimizer_state = take(sizes.optimizer_state);
  b.workspace = take(sizes.workspace);
  return b;
}

Result<BatchLoss> TrainStep(Model& model, Sgd& sgd, const float* inputs, const uint8_t* labels,
                            int batch) {
  if (sgd.parameter_count() != model.parameter_count()) {
    return InvalidArgument("optimizer and model parameter counts differ");
  }
  Result<BatchLoss> loss = model.ComputeGradients(inputs, labels, batch);
  if (!loss.ok()) return loss.status();
  sgd.Step(model.parameters(), model.gradients());
  return loss;
}

Result<TrainingPass> TrainingPass::Start(Model& model, const DataView& data, uint64_t epoch,
                                         const TrainOptions& options) {
  FEDRT_RETURN_IF_ERROR(CheckShapes(model, data, options.batch));
  TrainingPass pass;
  if (options.subset != nullptr) {
    for (uint32_t i : *options.subset) {
      if (i >= data.count) return OutOfRange("subset index " + std::to_string(i) + " is past the data set");
    }
    const std::vector<uint32_t> perm = ShuffledIndices(options.subset->size(), options.seed, epoch);
    pass.order_.reserve(perm.size());
    for (uint32_t k : perm) pass.order_.push_back((*options.subset)[k]);
  } else {
    pass.order_ = ShuffledIndices(data.count, options.seed, epoch);
  }
  pass.data_ = data;
  pass.batch_ = static_cast<std::size_t>(options.batch);
  pass.max_steps_ = options.max_steps;
  FEDRT_RETURN_IF_ERROR(model.Reserve(options.batch));
  pass.x_.resize(pass.batch_ * data.example_size);
  pass.y_.resize(pass.batch_);
  return pass;
}

Status TrainingPass::Run(Model& model, Sgd& sgd, std::size_t max_steps) {
  if (sgd.parameter_count() != model.parameter_count()) {
    return InvalidArgument("optimizer and model parameter counts differ");
  }
  if (model.input_size() != data_.example_size) return InvalidArgument("the model does not fit this pass's data");
  for (std::size_t taken = 0; !done() && (max_steps == 0 || taken < max_steps); ++taken) {
    const std::size_t n = std::min(batch_, order_.size() - next_);
    GatherBatch(data_, order_.data() + next_, n, x_.data(), y_.data());
    Result<BatchLoss> loss = TrainStep(model, sgd, x_.data(), y_.data(), static_cast<int>(n));
    if (!loss.ok()) return loss.status();
    loss_sum_ += loss->loss * static_cast<double>(n);
    correct_ += static_cast<std::size_t>(loss->correct);
    stats_.examples += n;
    ++stats_.steps;
    next_ += n;
  }
  return Status::Ok();
}

EpochStats TrainingPass::stats() const {
  EpochStats stats = stats_;
  if (stats.examples > 0) {
    stats.loss = loss_sum_ / static_cast<double>(stats.examples);
    stats.accuracy = static_cast<double>(correct_) / static_cast<double>(stats.examples);
  }
  stats.seconds = watch_.ElapsedSeconds();
  return stats;
}

Result<EpochStats> TrainEpoch(Model& model, Sgd& sgd, const DataView& data, uint64_t epoch,
                              const TrainOptions& options) {
  if (sgd.parameter_count() != model.parameter_count()) {
    return InvalidArgument("optimizer and model parameter counts differ");
  }
  Result<TrainingPass> pass = TrainingPass::Start(model, data, epoch, options);
  if (!pass.ok()) return pass.status();
  FEDRT_RETURN_IF_ERROR(pass->Run(model, sgd, 0));
  return pass->stats();
}

double Evaluation::ClassAccuracy(std::size_t c) const {
  if (c >= class_examples.size() || class_examples[c] == 0) return 0.0;
  return static_cast<double>(class_correct[c]) / static_cast<double>(class_examples[c]);
}

Result<Evaluation> EvaluateModel(Model& model, const DataView& data, int batch) {
  FEDRT_RETURN_IF_ERROR(CheckShapes(model, data, batch));
  FEDRT_RETURN_IF_ERROR(model.Reserve(batch));
  const std::size_t classes = static_cast<std::size_t>(model.num_classes());
  Evaluation e;
  e.class_examples.assign(classes, 0);
  e.class_correct.assign(classes, 0);
  std::vector<int> predicted(static_cast<std::size_t>(batch));
  std::vector<float> x(static_cast<std::size_t>(batch) * data.example_size);
  double loss_sum = 0.0;
  std::size_t correct = 0;
  for (std::size_t start = 0; start < data.count; start += static_cast<std::size_t>(batch)) {
    const std::size_t n = std::min(static_cast<std::size_t>(batch), data.count - start);
    ReadExamples(data, start, n, x.data());
    Result<BatchLoss> loss = model.Evaluate(x.data(), data.labels + start, static_cast<int>(n),
                                            predicted.data());
    if (!loss.ok()) return loss.status();
    loss_sum += loss->loss * static_cast<double>(n);
    correct += static_cast<std::size_t>(loss->correct);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t label = data.labels[start + i];
      ++e.class_examples[label];
      if (predicted[i] == static_cast<int>(label)) ++e.class_correct[label];
    }
  }
  e.examples = data.count;
  if (data.count > 0) {
    e.loss = loss_sum / static_cast<double>(data.count);
    e.accuracy = static_cast<double>(correct) / static_cast<double>(data.count);
  }
  return e;
}

}  // namespace fedrt
