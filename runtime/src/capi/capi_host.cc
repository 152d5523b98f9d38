// The C API's host conveniences (include/fedrt/fedrt_host.h): the star
// device host's loading helpers (star/star_data.h, star/device_state.h)
// behind C signatures, so a C device loads what `fedrt device` loads with
// the same code.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capi/capi_internal.h"
#include "fedrt/fedrt.h"
#include "fedrt/fedrt_host.h"
#include "fedrt/runtime/dataset.h"
#include "star/device_state.h"
#include "star/star_data.h"

struct fedrt_host_dataset {
  fedrt::Dataset train;
};

using fedrt::capi::Fail;

extern "C" {

fedrt_status fedrt_host_dataset_load(const char* directory, fedrt_host_dataset_t** dataset) {
  FEDRT_C_REQUIRE(directory, "fedrt_host_dataset_load");
  FEDRT_C_REQUIRE(dataset, "fedrt_host_dataset_load");
  fedrt::Result<fedrt::TrainTestData> data = fedrt::star::LoadNormalized(directory);
  if (!data.ok()) return Fail(data.status());
  *dataset = new fedrt_host_dataset{std::move(data->train)};
  return FEDRT_OK;
}

void fedrt_host_dataset_destroy(fedrt_host_dataset_t* dataset) { delete dataset; }

fedrt_status fedrt_host_dataset_view(const fedrt_host_dataset_t* dataset, fedrt_data_view* view) {
  FEDRT_C_REQUIRE(dataset, "fedrt_host_dataset_view");
  FEDRT_C_REQUIRE(view, "fedrt_host_dataset_view");
  const fedrt::Dataset& train = dataset->train;
  view->count = train.count;
  view->example_size = train.example_size();
  view->num_classes = train.num_classes;
  const bool floats = !train.features.empty();  // NumPy or CSV data of floats, normalised in place
  view->pixels = floats ? nullptr : train.pixels.data();
  view->mean = train.normalization.mean;
  view->stddev = train.normalization.stddev;
  view->features = floats ? train.features.data() : nullptr;
  view->labels = train.labels.data();
  return FEDRT_OK;
}

fedrt_status fedrt_host_dataset_share(const fedrt_host_dataset_t* dataset, const char* partition, int devices,
                                      int index, uint64_t seed, uint32_t* indices, size_t capacity, size_t* count) {
  FEDRT_C_REQUIRE(dataset, "fedrt_host_dataset_share");
  FEDRT_C_REQUIRE(partition, "fedrt_host_dataset_share");
  FEDRT_C_REQUIRE(indices, "fedrt_host_dataset_share");
  FEDRT_C_REQUIRE(count, "fedrt_host_dataset_share");
  fedrt::Result<std::vector<uint32_t>> share =
      fedrt::star::DeviceShare(dataset->train, partition, devices, index, seed);
  if (!share.ok()) return Fail(share.status());
  if (share->size() > capacity) {
    return Fail(fedrt::OutOfRange("fedrt_host_dataset_share: room for " + std::to_string(capacity) +
                                  " indices, the share has " + std::to_string(share->size())));
  }
  std::copy(share->begin(), share->end(), indices);
  *count = share->size();
  return FEDRT_OK;
}

fedrt_status fedrt_host_share_index(const char* device_id, int devices, int* index) {
  FEDRT_C_REQUIRE(device_id, "fedrt_host_share_index");
  FEDRT_C_REQUIRE(index, "fedrt_host_share_index");
  fedrt::Result<int> from_id = fedrt::star::ShareIndexFromId(device_id, devices);
  if (!from_id.ok()) return Fail(from_id.status());
  *index = *from_id;
  return FEDRT_OK;
}

uint64_t fedrt_host_shuffle_seed(const char* device_id, uint64_t partition_seed) {
  return fedrt::star::DeviceShuffleSeed(partition_seed, device_id != nullptr ? device_id : "");
}

fedrt_status fedrt_host_key_load(const char* path, const char* device_id, char* id_out, size_t id_capacity,
                                 uint8_t* key, size_t key_capacity, size_t* key_size) {
  FEDRT_C_REQUIRE(path, "fedrt_host_key_load");
  FEDRT_C_REQUIRE(key, "fedrt_host_key_load");
  FEDRT_C_REQUIRE(key_size, "fedrt_host_key_load");
  const bool named = device_id != nullptr && device_id[0] != '\0';
  if (!named) FEDRT_C_REQUIRE(id_out, "fedrt_host_key_load");
  fedrt::Result<fedrt::star::DeviceKey> found = fedrt::star::LoadDeviceKey(path, named ? device_id : "");
  if (!found.ok()) return Fail(found.status());
  if (found->key.size() > key_capacity) {
    return Fail(fedrt::OutOfRange("fedrt_host_key_load: room for " + std::to_string(key_capacity) +
                                  " key bytes, the key has " + std::to_string(found->key.size())));
  }
  if (id_out != nullptr && found->device_id.size() >= id_capacity) {
    return Fail(fedrt::OutOfRange("fedrt_host_key_load: room for " + std::to_string(id_capacity) +
                                  " id characters with the NUL, the id '" + found->device_id + "' needs " +
                                  std::to_string(found->device_id.size() + 1)));
  }
  std::memcpy(key, found->key.data(), found->key.size());
  *key_size = found->key.size();
  if (id_out != nullptr) std::memcpy(id_out, found->device_id.c_str(), found->device_id.size() + 1);
  return FEDRT_OK;
}

fedrt_status fedrt_host_residual_save(const char* path, const float* residual, size_t count) {
  FEDRT_C_REQUIRE(path, "fedrt_host_residual_save");
  FEDRT_C_REQUIRE(residual, "fedrt_host_residual_save");
  return fedrt::capi::FromStatus(fedrt::star::SaveResidual(path, residual, count));
}

fedrt_status fedrt_host_residual_load(const char* path, float* residual, size_t count) {
  FEDRT_C_REQUIRE(path, "fedrt_host_residual_load");
  FEDRT_C_REQUIRE(residual, "fedrt_host_residual_load");
  fedrt::Result<std::vector<float>> loaded = fedrt::star::LoadResidual(path, count);
  if (!loaded.ok()) return Fail(loaded.status());
  std::copy(loaded->begin(), loaded->end(), residual);
  return FEDRT_OK;
}

}  // extern "C"
