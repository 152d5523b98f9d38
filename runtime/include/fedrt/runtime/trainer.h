// The training loop and evaluation on top of Model, Sgd and Dataset: what a
// device runs between communication rounds, and what `fedrt train` runs.
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
#include <vector>

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

Result<EpochStats> TrainEpoch(Model& model, Sgd& sgd, const Dataset& data, uint64_t epoch,
                              const TrainOptions& options);

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
Result<Evaluation> EvaluateModel(Model& model, const Dataset& data, int batch);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_TRAINER_H_
