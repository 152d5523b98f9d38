// The training loop and evaluation on top of Model, Sgd and Dataset: what a
// device runs between communication rounds, and what `fedrt train` runs.
//
// TrainStep is one update on a batch the caller already holds: it is what a
// device without a heap calls in its loop, on a model and optimizer built on
// caller memory (CreateInBuffers / CreateInBuffer). QueryTrainingBufferSizes
// says how much memory that takes for a spec, optimizer and batch, and
// CarveTrainingBuffers cuts one caller arena into the pieces:
//
//   Result<TrainingBufferSizes> sizes = QueryTrainingBufferSizes(spec, sgd_options, 64);
//   static float arena[...];                    // >= sizes->total_floats()
//   Result<TrainingBuffers> b = CarveTrainingBuffers(*sizes, {arena, size});
//   Result<Model> model = Model::CreateInBuffers(spec, seed, 64, b->parameters,
//                                                b->gradients, b->workspace);
//   Result<Sgd> sgd = Sgd::CreateInBuffer(sgd_options, model->parameter_count(),
//                                         b->optimizer_state);
//   for (...) TrainStep(*model, *sgd, inputs, labels, batch);   // allocates nothing
//
// TrainEpoch visits the examples (all, or a device's subset) once in the
// order ShuffledIndices(seed, epoch) gives, in batches of options.batch (the
// last one may be smaller), one Sgd update per batch. The same model, seed,
// data and build give bit-identical parameters.
//
// Thread-safety: not synchronized; the model and optimizer are modified.
#ifndef FEDRT_RUNTIME_TRAINER_H_
#define FEDRT_RUNTIME_TRAINER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/memory.h"
#include "fedrt/platform/status.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"

namespace fedrt {

struct TrainOptions {
  int batch = 64;
  uint64_t seed = 1;                            // shuffling seed (with the epoch number)
  const std::vector<uint32_t>* subset = nullptr;  // examples to use; null: all
  std::size_t max_steps = 0;                    // stop after this many updates; 0: whole epoch
};

struct EpochStats {
  double loss = 0.0;      // mean training loss over the epoch's examples
  double accuracy = 0.0;  // fraction of training examples predicted right (before each update)
  std::size_t examples = 0;
  std::size_t steps = 0;
  double seconds = 0.0;
};

// Floats of caller memory for training `spec` with `sgd` in batches of up
// to `batch` (model.h and optimizer.h say what each buffer holds).
struct TrainingBufferSizes {
  std::size_t parameters = 0;
  std::size_t gradients = 0;
  std::size_t optimizer_state = 0;
  std::size_t workspace = 0;
  // All four, each rounded up to 64 bytes (what CarveTrainingBuffers takes).
  std::size_t total_floats() const;
};
Result<TrainingBufferSizes> QueryTrainingBufferSizes(const std::string& spec, const SgdOptions& sgd,
                                                     int batch);

struct TrainingBuffers {
  FloatSpan parameters;
  FloatSpan gradients;
  FloatSpan optimizer_state;
  FloatSpan workspace;
};
// Cuts `arena` (at least sizes.total_floats() floats) into the four buffers,
// each starting 64 bytes after the previous one's start rounded up.
// InvalidArgument when the arena is too small.
Result<TrainingBuffers> CarveTrainingBuffers(const TrainingBufferSizes& sizes, FloatSpan arena);

// One update: gradients of the batch (inputs [batch x input_size()], labels
// [batch]), then sgd.Step. Allocates nothing when the model's workspace holds
// the batch (always for a model on caller buffers; else after Reserve).
Result<BatchLoss> TrainStep(Model& model, Sgd& sgd, const float* inputs, const uint8_t* labels,
                            int batch);

Result<EpochStats> TrainEpoch(Model& model, Sgd& sgd, const DataView& data, uint64_t epoch,
                              const TrainOptions& options);

// TrainEpoch's work taken a few updates at a time, so a device with one
// thread keeps its link alive (heartbeats, a stop request) between them:
//
//   Result<TrainingPass> pass = TrainingPass::Start(model, data, epoch, options);
//   while (!pass->done()) { pass->Run(model, sgd, 8); /* poll the link */ }
//
// The updates, and so the parameters, are bit-identical to TrainEpoch's with
// the same arguments however the pass is cut. Start draws the order and
// allocates one batch of features; Run allocates nothing. The data view must
// outlive the pass.
//
// A device without a heap gives the pass its memory instead (StartIn): the
// order (one index per example of the pass) and one batch of features and
// labels, sized by TrainingPassMemory::For; the pass then allocates nothing.
struct TrainingPassMemory {
  uint32_t* order = nullptr;  // examples of the pass (the subset's size, or data.count)
  std::size_t order_capacity = 0;
  float* features = nullptr;  // batch x example_size
  std::size_t features_capacity = 0;
  uint8_t* labels = nullptr;  // batch
  std::size_t labels_capacity = 0;

  // The element counts a pass over `examples` examples in batches of `batch`
  // needs (the pointers stay null).
  static TrainingPassMemory For(std::size_t examples, std::size_t example_size, int batch);
};

class TrainingPass {
 public:
  static Result<TrainingPass> Start(Model& model, const DataView& data, uint64_t epoch,
                                    const TrainOptions& options);
  // As Start, on the caller's memory (which must outlive the pass):
  // kOutOfRange when a piece is smaller than TrainingPassMemory::For says.
  static Result<TrainingPass> StartIn(Model& model, const DataView& data, uint64_t epoch,
                                      const TrainOptions& options, const TrainingPassMemory& memory);
  // Runs up to `max_steps` updates (0: to the end of the pass).
  Status Run(Model& model, Sgd& sgd, std::size_t max_steps);
  bool done() const { return next_ >= count_ || (max_steps_ != 0 && stats_.steps == max_steps_); }
  // The pass so far (loss and accuracy over the examples trained on).
  EpochStats stats() const;
  // The updates the whole pass makes (stats().steps of them are done).
  std::size_t total_steps() const {
    const std::size_t all = batch_ == 0 ? 0 : (count_ + batch_ - 1) / batch_;
    return max_steps_ != 0 && max_steps_ < all ? max_steps_ : all;
  }

 private:
  TrainingPass() = default;
  static Result<TrainingPass> Begin(Model& model, const DataView& data, uint64_t epoch, const TrainOptions& options,
                                    const TrainingPassMemory* memory);
  DataView data_;
  std::vector<uint32_t> owned_order_;  // Start's memory (StartIn: the caller's)
  std::vector<float> owned_x_;
  std::vector<uint8_t> owned_y_;
  const uint32_t* order_ = nullptr;
  std::size_t count_ = 0;
  std::size_t batch_ = 0;
  std::size_t max_steps_ = 0;
  std::size_t next_ = 0;
  float* x_ = nullptr;
  uint8_t* y_ = nullptr;
  EpochStats stats_;
  double loss_sum_ = 0.0;
  std::size_t correct_ = 0;
  Stopwatch watch_;
};

struct Evaluation {
  double loss = 0.0;      // mean cross-entropy
  double accuracy = 0.0;  // fraction correct
  std::size_t examples = 0;
  std::vector<std::size_t> class_examples;  // per class: examples
  std::vector<std::size_t> class_correct;   // per class: predicted right
  // Accuracy on class c (0 when the class has no examples).
  double ClassAccuracy(std::size_t c) const;
};

// Loss, accuracy and per-class accuracy over the whole data set.
Result<Evaluation> EvaluateModel(Model& model, const DataView& data, int batch);
// The same into *evaluation (its per-class vectors reused) with the batch
// buffers in *scratch: once they have grown, an evaluation allocates nothing
// (the aggregator evaluates after every round).
struct EvaluationScratch {
  std::vector<float> features;
  std::vector<int> predicted;
};
Status EvaluateModel(Model& model, const DataView& data, int batch, Evaluation* evaluation,
                     EvaluationScratch* scratch);

// A model's output classes against a data set's class count (its largest
// label plus one): they must be equal, or a 100-class head trains on
// 10-class data without a word. kInvalidArgument naming both numbers, as
// "<what> has 10 classes, model 'mlp:784-50-100' predicts 100; ...".
Status CheckClassCount(const Model& model, int data_classes, const std::string& what);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_TRAINER_H_
