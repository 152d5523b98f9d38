#define _POSIX_C_SOURCE 200809L

#include "byte_queue.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void byte_queue_append(ByteQueue* queue, const uint8_t* data, size_t size) {
  if (queue->size + size > queue->capacity) {
    queue->capacity = (queue->size + size) * 2;
    queue->data = (uint8_t*)realloc(queue->data, queue->capacity);
    if (queue->data == NULL) abort();
  }
  memcpy(queue->data + queue->size, data, size);
  queue->size += size;
}

size_t byte_queue_take(ByteQueue* queue, uint8_t* out, size_t capacity) {
  const size_t n = queue->size < capacity ? queue->size : capacity;
  if (n == 0) return 0;
  memcpy(out, queue->data, n);
  memmove(queue->data, queue->data + n, queue->size - n);
  queue->size -= n;
  return n;
}

void byte_queue_wait(const ByteQueue* queue, const int* closed, pthread_mutex_t* lock, pthread_cond_t* moved,
                     uint32_t timeout_ms) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += (time_t)(timeout_ms / 1000u);
  deadline.tv_nsec += (long)(timeout_ms % 1000u) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1000000000L;
  }
  while (queue->size == 0 && !*closed && timeout_ms > 0) {
    if (pthread_cond_timedwait(moved, lock, &deadline) != 0) break;
  }
}

void byte_queue_free(ByteQueue* queue) {
  free(queue->data);
  memset(queue, 0, sizeof *queue);
}

uint64_t test_monotonic_ms(void* user) {
  struct timespec t;
  (void)user;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static pthread_mutex_t g_random_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t g_random_state = 99u;
fedrt_status test_random_bytes(void* user, uint8_t* out, size_t size) {
  size_t i;
  (void)user;
  pthread_mutex_lock(&g_random_lock);
  for (i = 0; i < size; ++i) {
    g_random_state = g_random_state * 1664525u + 1013904223u;
    out[i] = (uint8_t)(g_random_state >> 24);
  }
  pthread_mutex_unlock(&g_random_lock);
  return FEDRT_OK;
}

void make_bump_data(float* features, uint8_t* labels, int count, int feature_count, int classes, uint32_t seed,
                    float bump) {
  uint32_t state = seed;
  int n, j;
  for (n = 0; n < count; ++n) {
    labels[n] = (uint8_t)(n % classes);
    for (j = 0; j < feature_count; ++j) {
      state = state * 1664525u + 1013904223u;
      features[n * feature_count + j] = (float)(state >> 26) / 64.0f - 0.5f;
    }
    features[n * feature_count + 2 * labels[n]] += bump;
    features[n * feature_count + 2 * labels[n] + 1] += bump;
  }
}
