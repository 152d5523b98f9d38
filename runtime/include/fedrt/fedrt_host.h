/* fedrt_host.h: conveniences of the C API for programs on a host with files
 * (Linux boards and servers), NOT for firmware: they read files from a file
 * system, so builds without one (a Cortex-M port) leave them out. They let a
 * C device program (examples/02_c_device.c) load exactly what `fedrt device`
 * loads without parsing IDX files, key files or state files itself: the
 * data set normalised as `fedrt serve` and `fedrt device` normalise it, a
 * device's share under the same partition, its key, its share and shuffling
 * defaults, and the error-feedback residual's state file (the same format as
 * `fedrt device --state-file`, so either program resumes from the other's).
 *
 * The conventions of fedrt/fedrt.h hold (statuses, fedrt_last_error,
 * ownership, thread-safety). These calls allocate (a data set is on the heap
 * until fedrt_host_dataset_destroy; the others free what they used before
 * they return); none of them is on a device's round path.
 */
#ifndef FEDRT_FEDRT_HOST_H_
#define FEDRT_FEDRT_HOST_H_

#include <stddef.h>
#include <stdint.h>

#include "fedrt/fedrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The training set of an MNIST-style directory (train-images-idx3-ubyte.gz,
 * train-labels-idx1-ubyte.gz; the test set is the aggregator's business),
 * normalised with its own mean and standard deviation. */
typedef struct fedrt_host_dataset fedrt_host_dataset_t;

/* Loads `directory`. FEDRT_NOT_FOUND / FEDRT_IO_ERROR naming the file that
 * cannot be read, FEDRT_CORRUPT when it is not a valid IDX file,
 * FEDRT_UNSUPPORTED for a gzip file in a build without zlib. */
fedrt_status fedrt_host_dataset_load(const char* directory, fedrt_host_dataset_t** dataset);
/* NULL is ignored. */
void fedrt_host_dataset_destroy(fedrt_host_dataset_t* dataset);

/* A view of the training set (bytes with their normalisation) for
 * fedrt_device_create; it points into `dataset`, which must outlive its use. */
fedrt_status fedrt_host_dataset_view(const fedrt_host_dataset_t* dataset, fedrt_data_view* view);

/* The indices of device `index` of `devices` under `partition` ("iid",
 * "dirichlet:<alpha>", "shards:<k>") with `seed`, as `fedrt device
 * --partition P --devices N --index I --partition-seed S` cuts them, written
 * to indices[0 .. *count). A share never has more indices than the data set
 * has examples (fedrt_data_view.count): FEDRT_OUT_OF_RANGE when `capacity` is
 * smaller than the share. FEDRT_INVALID_ARGUMENT for a bad partition, or an
 * index outside 0 .. devices - 1. */
fedrt_status fedrt_host_dataset_share(const fedrt_host_dataset_t* dataset, const char* partition, int devices,
                                      int index, uint64_t seed, uint32_t* indices, size_t capacity, size_t* count);

/* The share `fedrt device` takes without --index: the number the id ends in,
 * modulo `devices`. FEDRT_INVALID_ARGUMENT when the id ends in no number. */
fedrt_status fedrt_host_share_index(const char* device_id, int devices, int* index);

/* The shuffle seed (fedrt_device_options.shuffle_seed) `fedrt device` uses
 * for this id and partition seed: devices given the same seeds train on the
 * same example order in either program. */
uint64_t fedrt_host_shuffle_seed(const char* device_id, uint64_t partition_seed);

/* A device's key from its key file (fedrt/transport/auth.h: "<id> <hex>"
 * lines, not accessible to other users). `device_id` NULL or "": the file's
 * only entry, whose id is then written to id_out (room for
 * FEDRT_DEVICE_ID_MAX + 1 chars; id_out may be NULL when device_id is given).
 * The key goes to key[0 .. *key_size) (room for FEDRT_KEY_MAX_BYTES).
 * FEDRT_NOT_FOUND for a missing file or no line for the id;
 * FEDRT_FAILED_PRECONDITION when others may read the file; FEDRT_CORRUPT for
 * a malformed line; FEDRT_INVALID_ARGUMENT for an invalid id. */
fedrt_status fedrt_host_key_load(const char* path, const char* device_id, char* id_out, size_t id_capacity,
                                 uint8_t* key, size_t key_capacity, size_t* key_size);

/* The state file of `fedrt device --state-file`: the error-feedback residual,
 * written atomically (a crash leaves the old file or the new one) with a
 * checksum. Save from fedrt_device_callbacks.on_residual. */
fedrt_status fedrt_host_residual_save(const char* path, const float* residual, size_t count);
/* Reads a residual of `count` floats into residual[0 .. count).
 * FEDRT_NOT_FOUND only when there is no file (a first start: begin at zero);
 * any other failure means the file exists but cannot be used (FEDRT_CORRUPT,
 * FEDRT_IO_ERROR, FEDRT_FAILED_PRECONDITION for another model's size):
 * starting from zero would silently drop what it holds. */
fedrt_status fedrt_host_residual_load(const char* path, float* residual, size_t count);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* FEDRT_FEDRT_HOST_H_ */
