// The C API's model: fedrt::Model and fedrt::Sgd on one block of caller
// memory. Layout, from the first 64-byte boundary in the caller's block:
//   the handle (struct fedrt_model), padded to 64 bytes;
//   the training arena CarveTrainingBuffers cuts into parameters,
//   gradients, optimizer state and workspace (trainer.h).
// fedrt_model_size counts 63 bytes of slack for the first boundary, so the
// answer does not depend on where the caller's block starts.
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "capi/capi_internal.h"
#include "fedrt/fedrt.h"
#include "fedrt/platform/memory.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/runtime/trainer.h"

namespace fedrt::capi {

SgdOptions ToSgdOptions(const fedrt_sgd_options* c) {
  const fedrt_sgd_options o = c != nullptr ? *c : fedrt_sgd_options_default();
  SgdOptions options;
  options.schedule.kind = LrScheduleKind::kConstant;
  options.schedule.base_lr = o.learning_rate;
  options.momentum = o.momentum;
  options.nesterov = o.nesterov != 0;
  options.weight_decay = o.weight_decay;
  options.clip_norm = o.clip_norm;
  return options;
}

namespace {

constexpr std::size_t kHandleBytes =
    (sizeof(fedrt_model) + kSimdAlignment - 1) / kSimdAlignment * kSimdAlignment;
static_assert(alignof(fedrt_model) <= kSimdAlignment, "the handle is placed on a 64-byte boundary");

// Bytes fedrt_model_init needs, and the arena's sizes.
Result<std::size_t> ModelBytes(const std::string& spec, const SgdOptions& sgd, int max_batch,
                               TrainingBufferSizes* sizes) {
  Result<TrainingBufferSizes> queried = QueryTrainingBufferSizes(spec, sgd, max_batch);
  if (!queried.ok()) return queried.status();
  *sizes = *queried;
  const std::size_t floats = sizes->total_floats();
  const std::size_t limit = (SIZE_MAX - kHandleBytes - kSimdAlignment) / sizeof(float);
  if (floats > limit) return OutOfRange("model '" + spec + "' needs more memory than size_t counts");
  return (kSimdAlignment - 1) + kHandleBytes + floats * sizeof(float);
}

fedrt_status BatchLossOut(const Result<BatchLoss>& result, fedrt_batch_loss* out) {
  if (!result.ok()) return Fail(result.status());
  if (out != nullptr) {
    out->loss = result->loss;
    out->correct = result->correct;
  }
  return FEDRT_OK;
}

}  // namespace
}  // namespace fedrt::capi

using fedrt::capi::Fail;

extern "C" {

fedrt_sgd_options fedrt_sgd_options_default(void) {
  const fedrt::SgdOptions cpp;
  fedrt_sgd_options o;
  o.learning_rate = cpp.schedule.base_lr;
  o.momentum = cpp.momentum;
  o.nesterov = cpp.nesterov ? 1 : 0;
  o.weight_decay = cpp.weight_decay;
  o.clip_norm = cpp.clip_norm;
  return o;
}

fedrt_status fedrt_model_size(const char* spec, const fedrt_sgd_options* sgd, int max_batch, size_t* bytes) {
  FEDRT_C_REQUIRE(spec, "fedrt_model_size");
  FEDRT_C_REQUIRE(bytes, "fedrt_model_size");
  fedrt::TrainingBufferSizes sizes;
  fedrt::Result<std::size_t> need = fedrt::capi::ModelBytes(spec, fedrt::capi::ToSgdOptions(sgd), max_batch, &sizes);
  if (!need.ok()) return Fail(need.status());
  *bytes = *need;
  return FEDRT_OK;
}

fedrt_status fedrt_model_init(void* memory, size_t bytes, const char* spec, const fedrt_sgd_options* sgd,
                              uint64_t seed, int max_batch, fedrt_model_t** model) {
  FEDRT_C_REQUIRE(memory, "fedrt_model_init");
  FEDRT_C_REQUIRE(spec, "fedrt_model_init");
  FEDRT_C_REQUIRE(model, "fedrt_model_init");
  const fedrt::SgdOptions options = fedrt::capi::ToSgdOptions(sgd);
  fedrt::TrainingBufferSizes sizes;
  fedrt::Result<std::size_t> need = fedrt::capi::ModelBytes(spec, options, max_batch, &sizes);
  if (!need.ok()) return Fail(need.status());
  if (bytes < *need) {
    return Fail(fedrt::OutOfRange("fedrt_model_init: " + std::to_string(bytes) + " bytes of memory, model '" +
                                  spec + "' with batches of " + std::to_string(max_batch) + " needs " +
                                  std::to_string(*need) + " (fedrt_model_size)"));
  }
  const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(memory);
  const std::uintptr_t aligned = (start + fedrt::kSimdAlignment - 1) / fedrt::kSimdAlignment * fedrt::kSimdAlignment;
  void* handle_at = static_cast<uint8_t*>(memory) + (aligned - start);
  // 64-byte aligned (handle_at is, kHandleBytes is a multiple of 64): through
  // void* so that ARMv7's -Wcast-align does not take it for a byte pointer.
  float* arena = static_cast<float*>(static_cast<void*>(static_cast<uint8_t*>(handle_at) + fedrt::capi::kHandleBytes));
  fedrt::Result<fedrt::TrainingBuffers> buffers =
      fedrt::CarveTrainingBuffers(sizes, fedrt::FloatSpan{arena, sizes.total_floats()});
  if (!buffers.ok()) return Fail(buffers.status());
  fedrt::Result<fedrt::Model> built = fedrt::Model::CreateInBuffers(
      spec, seed, max_batch, buffers->parameters, buffers->gradients, buffers->workspace);
  if (!built.ok()) return Fail(built.status());
  fedrt::Result<fedrt::Sgd> optimizer =
      fedrt::Sgd::CreateInBuffer(options, built->parameter_count(), buffers->optimizer_state);
  if (!optimizer.ok()) return Fail(optimizer.status());
  *model = new (handle_at) fedrt_model{std::move(built).value(), std::move(optimizer).value(), max_batch};
  return FEDRT_OK;
}

void fedrt_model_destroy(fedrt_model_t* model) {
  if (model != nullptr) model->~fedrt_model();
}

fedrt_status fedrt_model_train_step(fedrt_model_t* model, const float* features, const uint8_t* labels, int batch,
                                    fedrt_batch_loss* loss) {
  FEDRT_C_REQUIRE(model, "fedrt_model_train_step");
  FEDRT_C_REQUIRE(features, "fedrt_model_train_step");
  FEDRT_C_REQUIRE(labels, "fedrt_model_train_step");
  return fedrt::capi::BatchLossOut(fedrt::TrainStep(model->model, model->sgd, features, labels, batch), loss);
}

fedrt_status fedrt_model_evaluate(fedrt_model_t* model, const float* features, const uint8_t* labels, int batch,
                                  fedrt_batch_loss* loss, int* predictions) {
  FEDRT_C_REQUIRE(model, "fedrt_model_evaluate");
  FEDRT_C_REQUIRE(features, "fedrt_model_evaluate");
  FEDRT_C_REQUIRE(labels, "fedrt_model_evaluate");
  return fedrt::capi::BatchLossOut(model->model.Evaluate(features, labels, batch, predictions), loss);
}

size_t fedrt_model_parameter_count(const fedrt_model_t* model) {
  return model != nullptr ? model->model.parameter_count() : 0;
}

size_t fedrt_model_input_size(const fedrt_model_t* model) {
  return model != nullptr ? model->model.input_size() : 0;
}

int fedrt_model_num_classes(const fedrt_model_t* model) {
  return model != nullptr ? model->model.num_classes() : 0;
}

int fedrt_model_max_batch(const fedrt_model_t* model) { return model != nullptr ? model->max_batch : 0; }

const char* fedrt_model_spec(const fedrt_model_t* model) {
  return model != nullptr ? model->model.spec().text.c_str() : nullptr;
}

fedrt_status fedrt_model_get_parameters(const fedrt_model_t* model, float* out, size_t capacity) {
  FEDRT_C_REQUIRE(model, "fedrt_model_get_parameters");
  FEDRT_C_REQUIRE(out, "fedrt_model_get_parameters");
  const std::size_t count = model->model.parameter_count();
  if (capacity < count) {
    return Fail(fedrt::OutOfRange("fedrt_model_get_parameters: room for " + std::to_string(capacity) +
                                  " floats, the model has " + std::to_string(count)));
  }
  std::memcpy(out, model->model.parameters(), count * sizeof(float));
  return FEDRT_OK;
}

fedrt_status fedrt_model_set_parameters(fedrt_model_t* model, const float* in, size_t count) {
  FEDRT_C_REQUIRE(model, "fedrt_model_set_parameters");
  FEDRT_C_REQUIRE(in, "fedrt_model_set_parameters");
  if (count != model->model.parameter_count()) {
    return Fail(fedrt::InvalidArgument("fedrt_model_set_parameters: " + std::to_string(count) +
                                       " floats given, the model has " +
                                       std::to_string(model->model.parameter_count())));
  }
  std::memcpy(model->model.parameters(), in, count * sizeof(float));
  return FEDRT_OK;
}

size_t fedrt_model_tensor_count(const fedrt_model_t* model) {
  return model != nullptr ? model->model.tensors().size() : 0;
}

fedrt_status fedrt_model_tensor(const fedrt_model_t* model, size_t index, fedrt_tensor_info* info) {
  FEDRT_C_REQUIRE(model, "fedrt_model_tensor");
  FEDRT_C_REQUIRE(info, "fedrt_model_tensor");
  const auto& tensors = model->model.tensors();
  if (index >= tensors.size()) {
    return Fail(fedrt::OutOfRange("fedrt_model_tensor: index " + std::to_string(index) + ", the model has " +
                                  std::to_string(tensors.size()) + " tensors"));
  }
  info->name = tensors[index].name.c_str();
  info->offset = tensors[index].offset;
  info->size = tensors[index].size;
  return FEDRT_OK;
}

}  // extern "C"
