/* What the threaded C API tests share (capi_aggregator_test.c,
 * capi_peer_test.c): byte queues that stand in for streams between threads,
 * the monotonic clock and the randomness their callbacks give fedrt, and a
 * small learnable data set. C99 with POSIX threads (byte_queue.c). */
#ifndef FEDRT_TESTS_CAPI_BYTE_QUEUE_H_
#define FEDRT_TESTS_CAPI_BYTE_QUEUE_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "fedrt/fedrt.h"

/* Bytes written and not yet read; all zero is an empty queue. The caller
 * holds the lock that guards it around every call but byte_queue_free. */
typedef struct {
  uint8_t* data;
  size_t size, capacity;
} ByteQueue;

/* Appends data[0 .. size) (aborts when memory runs out). */
void byte_queue_append(ByteQueue* queue, const uint8_t* data, size_t size);
/* Moves up to `capacity` bytes from the front into `out`; how many. */
size_t byte_queue_take(ByteQueue* queue, uint8_t* out, size_t capacity);
/* Waits on `moved` (with `lock` held) until the queue has bytes, *closed is
 * non-zero, or timeout_ms (0: not at all) have passed. */
void byte_queue_wait(const ByteQueue* queue, const int* closed, pthread_mutex_t* lock, pthread_cond_t* moved,
                     uint32_t timeout_ms);
void byte_queue_free(ByteQueue* queue);

/* CLOCK_MONOTONIC in milliseconds; `user` is not used (a now_ms callback). */
uint64_t test_monotonic_ms(void* user);

/* The join's random_bytes callback for tests: an LCG behind a lock (any
 * thread), not cryptography; `user` is not used. */
fedrt_status test_random_bytes(void* user, uint8_t* out, size_t size);

/* A learnable data set of `count` examples of `feature_count` floats:
 * example n has class n % classes, features uniform in [-0.5, 0.5) from an
 * LCG started at `seed`, plus `bump` on features 2c and 2c + 1 of class c. */
void make_bump_data(float* features, uint8_t* labels, int count, int feature_count, int classes, uint32_t seed,
                    float bump);

#endif /* FEDRT_TESTS_CAPI_BYTE_QUEUE_H_ */
