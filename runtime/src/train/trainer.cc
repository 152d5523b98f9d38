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

TrainingPassMemory TrainingPassMemory::For(std::size_t examples, std::size_t example_size, int batch) {
  TrainingPassMemory m;
  const std::size_t b = batch > 0 ? static_cast<std::size_t>(batch) : 0;
  m.order_capacity = examples;
  m.features_capacity = b * example_size;
  m.labels_capacity = b;
  return m;
}

Result<TrainingPass> TrainingPass::Start(Model& model, const DataView& data, uint64_t epoch,
                                         const TrainOptions& options) {
  return Begin(model, data, epoch, options, nullptr);
}

Result<TrainingPass> TrainingPass::StartIn(Model& model, const DataView& data, uint64_t epoch,
                                           const TrainOptions& options, const TrainingPassMemory& memory) {
  return Begin(model, data, epoch, options, &memory);
}

Result<TrainingPass> TrainingPass::Begin(Model& model, const DataView& data, uint64_t epoch,
                                         const TrainOptions& options, const TrainingPassMemory* memory) {
  FEDRT_RETURN_IF_ERROR(CheckShapes(model, data, options.batch));
  if (options.subset != nullptr) {
    for (uint32_t i : *options.subset) {
      if (i >= data.count) return OutOfRange("subset index " + std::to_string(i) + " is past the data set");
    }
  }
  FEDRT_RETURN_IF_ERROR(model.Reserve(options.batch));
  TrainingPass pass;
  const std::size_t count = options.subset != nullptr ? options.subset->size() : data.count;
  const TrainingPassMemory needed = TrainingPassMemory::For(count, data.example_size, options.batch);
  uint32_t* order = nullptr;
  if (memory != nullptr) {
    if (memory->order == nullptr || memory->order_capacity < needed.order_capacity || memory->features == nullptr ||
        memory->features_capacity < needed.features_capacity || memory->labels == nullptr ||
        memory->labels_capacity < needed.labels_capacity) {
      return OutOfRange("a training pass over " + std::to_string(count) + " examples in batches of " +
                        std::to_string(options.batch) + " needs more memory than it was given");
    }
    order = memory->order;
    pass.x_ = memory->features;
    pass.y_ = memory->labels;
  } else {
    pass.owned_order_.resize(count);
    pass.owned_x_.resize(needed.features_capacity);
    pass.owned_y_.resize(needed.labels_capacity);
    order = pass.owned_order_.data();
    pass.x_ = pass.owned_x_.data();
    pass.y_ = pass.owned_y_.data();
  }
  ShuffleIndicesInto(order, count, options.seed, epoch);
  if (options.subset != nullptr) {
    for (std::size_t k = 0; k < count; ++k) order[k] = (*options.subset)[order[k]];
  }
  pass.order_ = order;
  pass.count_ = count;
  pass.data_ = data;
  pass.batch_ = static_cast<std::size_t>(options.batch);
  pass.max_steps_ = options.max_steps;
  return pass;
}

Status TrainingPass::Run(Model& model, Sgd& sgd, std::size_t max_steps) {
  if (sgd.parameter_count() != model.parameter_count()) {
    return InvalidArgument("optimizer and model parameter counts differ");
  }
  if (model.input_size() != data_.example_size) return InvalidArgument("the model does not fit this pass's data");
  for (std::size_t taken = 0; !done() && (max_steps == 0 || taken < max_steps); ++taken) {
    const std::size_t n = std::min(batch_, count_ - next_);
    GatherBatch(data_, order_ + next_, n, x_, y_);
    Result<BatchLoss> loss = TrainStep(model, sgd, x_, y_, static_cast<int>(n));
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
  Evaluation e;
  EvaluationScratch scratch;
  FEDRT_RETURN_IF_ERROR(EvaluateModel(model, data, batch, &e, &scratch));
  return e;
}

Status EvaluateModel(Model& model, const DataView& data, int batch, Evaluation* evaluation,
                     EvaluationScratch* scratch) {
  FEDRT_RETURN_IF_ERROR(CheckShapes(model, data, batch));
  FEDRT_RETURN_IF_ERROR(model.Reserve(batch));
  const std::size_t classes = static_cast<std::size_t>(model.num_classes());
  Evaluation& e = *evaluation;
  e.loss = 0.0;
  e.accuracy = 0.0;
  e.class_examples.assign(classes, 0);
  e.class_correct.assign(classes, 0);
  std::vector<int>& predicted = scratch->predicted;
  std::vector<float>& x = scratch->features;
  predicted.resize(static_cast<std::size_t>(batch));
  x.resize(static_cast<std::size_t>(batch) * data.example_size);
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
  return Status::Ok();
}

}  // namespace fedrt
