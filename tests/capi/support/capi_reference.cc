#include "capi_reference.h"

#include <cstring>

#include "fedrt/runtime/model.h"

extern "C" size_t capi_reference_parameters(const char* spec, uint64_t seed, float* out, size_t capacity) {
  fedrt::Result<fedrt::Model> model = fedrt::Model::Create(spec, seed);
  if (!model.ok() || model->parameter_count() > capacity) return 0;
  std::memcpy(out, model->parameters(), model->parameter_count() * sizeof(float));
  return model->parameter_count();
}
