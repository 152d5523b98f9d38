/* The C API's aggregator from C99: its size query and init errors with their
 * pinned statuses, bad bytes that close one connection only, and whole
 * federations: a C aggregator (fedrt_aggregator_t in caller memory) and four
 * C devices (fedrt_device_t), each device on its own thread, joined by
 * in-process byte queues through the callbacks, for five rounds. The global
 * model must learn the test set, and what the aggregator reports must be
 * what the model it hands out scores. One run gives the aggregator a single
 * waiting slot, so updates are deferred and asked for again.
 *
 * The callbacks use the real monotonic clock; nothing checked depends on
 * timing (every round waits for all four devices). */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "byte_queue.h"
#include "check.h"
#include "fedrt/fedrt.h"

#define FEATURES 8
#define CLASSES 3
#define DEVICES 4
#define PER_DEVICE 60
#define TRAIN (DEVICES * PER_DEVICE)
#define TEST 90
#define MAX_BATCH 16
#define ROUNDS 5
static const char* const kSpec = "mlp:8-16-3";

/* A learnable data set: class c has a bump on features 2c, 2c+1. */
static float g_features[(TRAIN + TEST) * FEATURES];
static uint8_t g_labels[TRAIN + TEST];

static void make_data(void) { make_bump_data(g_features, g_labels, TRAIN + TEST, FEATURES, CLASSES, 777u, 1.5f); }

static fedrt_data_view view_of(int first, int count) {
  fedrt_data_view view;
  memset(&view, 0, sizeof view);
  view.count = (size_t)count;
  view.example_size = FEATURES;
  view.num_classes = CLASSES;
  view.features = g_features + (size_t)first * FEATURES;
  view.labels = g_labels + first;
  return view;
}

/* ---- Callbacks shared by both sides ------------------------------------- */

/* Both sides use this keyed hash, so the join works in builds without a
 * system HMAC; it is a stand-in, not cryptography. */
static fedrt_status toy_hmac(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                             size_t message_size, uint8_t* mac) {
  uint64_t h = 1469598103934665603ull;
  size_t i;
  (void)user;
  for (i = 0; i < key_size; ++i) h = (h ^ key[i]) * 1099511628211ull;
  for (i = 0; i < message_size; ++i) h = (h ^ message[i]) * 1099511628211ull;
  for (i = 0; i < FEDRT_MAC_BYTES; ++i) {
    h = (h ^ (uint64_t)i) * 1099511628211ull;
    mac[i] = (uint8_t)(h >> 32);
  }
  return FEDRT_OK;
}

static void key_of(int device, uint8_t* key) {
  int i;
  for (i = 0; i < 20; ++i) key[i] = (uint8_t)(device * 31 + i);
}

/* ---- The links: one byte queue each way per device ---------------------- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_moved = PTHREAD_COND_INITIALIZER;

typedef struct {
  int index;
  ByteQueue to_aggregator, to_device;
  int closed;          /* the aggregator closed the connection */
  fedrt_status close_reason;
  fedrt_status result; /* of the device's last session */
  int finished;
  void* model_memory;
  fedrt_model_t* model;
  fedrt_device_t* device;
  uint32_t share[PER_DEVICE];
} Link;

static Link g_links[DEVICES];

static void reset_links(void) {
  int i;
  for (i = 0; i < DEVICES; ++i) {
    byte_queue_free(&g_links[i].to_device);
    byte_queue_free(&g_links[i].to_aggregator);
  }
  memset(g_links, 0, sizeof g_links);
}

static fedrt_status device_send(void* user, const uint8_t* data, size_t size) {
  Link* link = (Link*)user;
  fedrt_status status = FEDRT_OK;
  pthread_mutex_lock(&g_lock);
  if (link->closed) {
    status = FEDRT_UNAVAILABLE;
  } else {
    byte_queue_append(&link->to_aggregator, data, size);
    pthread_cond_broadcast(&g_moved);
  }
  pthread_mutex_unlock(&g_lock);
  return status;
}

static fedrt_status device_receive(void* user, uint8_t* buffer, size_t capacity, uint32_t timeout_ms,
                                   size_t* received) {
  Link* link = (Link*)user;
  fedrt_status status = FEDRT_OK;
  pthread_mutex_lock(&g_lock);
  byte_queue_wait(&link->to_device, &link->closed, &g_lock, &g_moved, timeout_ms);
  *received = byte_queue_take(&link->to_device, buffer, capacity);
  if (*received == 0 && link->closed) status = FEDRT_UNAVAILABLE;
  pthread_mutex_unlock(&g_lock);
  return status;
}

static void* device_thread(void* argument) {
  Link* link = (Link*)argument;
  link->result = fedrt_device_run_session(link->device);
  link->finished = fedrt_device_finished(link->device);
  return NULL;
}

static fedrt_status aggregator_send(void* user, uint64_t connection, const uint8_t* data, size_t size) {
  Link* link = &((Link*)user)[connection];
  pthread_mutex_lock(&g_lock);
  byte_queue_append(&link->to_device, data, size);
  pthread_cond_broadcast(&g_moved);
  pthread_mutex_unlock(&g_lock);
  return FEDRT_OK;
}

static void aggregator_close(void* user, uint64_t connection, fedrt_status reason) {
  Link* link = &((Link*)user)[connection];
  pthread_mutex_lock(&g_lock);
  link->closed = 1;
  link->close_reason = reason;
  pthread_cond_broadcast(&g_moved);
  pthread_mutex_unlock(&g_lock);
}

typedef struct {
  int rounds, applied;
  size_t updates;
  double last_accuracy;
} Rounds;
static Rounds g_rounds;

static void on_round(void* user, const fedrt_round_summary* round) {
  (void)user;
  g_rounds.rounds++;
  g_rounds.applied += round->applied;
  g_rounds.updates += round->updates;
  g_rounds.last_accuracy = round->test_accuracy;
}

static fedrt_aggregator_callbacks aggregator_callbacks(void* user) {
  fedrt_aggregator_callbacks c;
  memset(&c, 0, sizeof c);
  c.user = user;
  c.send = aggregator_send;
  c.close = aggregator_close;
  c.now_ms = test_monotonic_ms;
  c.random_bytes = test_random_bytes;
  c.hmac_sha256 = toy_hmac;
  c.on_round = on_round;
  return c;
}

static char g_ids[DEVICES][16];
static uint8_t g_keys[DEVICES][20];
static fedrt_aggregator_key g_key_list[DEVICES];

static void make_keys(void) {
  int i;
  for (i = 0; i < DEVICES; ++i) {
    sprintf(g_ids[i], "board-%d", i);
    key_of(i, g_keys[i]);
    g_key_list[i].device_id = g_ids[i];
    g_key_list[i].key = g_keys[i];
    g_key_list[i].key_size = sizeof g_keys[i];
  }
}

static fedrt_aggregator_options federation(const char* codec) {
  fedrt_aggregator_options o = fedrt_aggregator_options_default();
  o.model = kSpec;
  o.codec = codec;
  o.rounds = ROUNDS;
  o.min_devices = DEVICES;
  o.learning_rate = 0.1f;
  return o;
}

/* Accuracy of `parameters` on the test set, through a C model. */
static double accuracy_of(const float* parameters, size_t count) {
  size_t bytes = 0;
  void* memory;
  fedrt_model_t* model = NULL;
  int hits = 0, n, first;
  int predictions[MAX_BATCH];
  REQUIRE_OK(fedrt_model_size(kSpec, NULL, MAX_BATCH, &bytes));
  memory = malloc(bytes);
  REQUIRE(memory != NULL);
  REQUIRE_OK(fedrt_model_init(memory, bytes, kSpec, NULL, 1, MAX_BATCH, &model));
  REQUIRE_OK(fedrt_model_set_parameters(model, parameters, count));
  for (first = TRAIN; first < TRAIN + TEST; first += MAX_BATCH) {
    const int batch = first + MAX_BATCH <= TRAIN + TEST ? MAX_BATCH : TRAIN + TEST - first;
    REQUIRE_OK(fedrt_model_evaluate(model, g_features + (size_t)first * FEATURES, g_labels + first, batch, NULL,
                                    predictions));
    for (n = 0; n < batch; ++n) hits += predictions[n] == g_labels[first + n];
  }
  fedrt_model_destroy(model);
  free(memory);
  return (double)hits / TEST;
}

/* ---- Size and init ------------------------------------------------------ */

static void size_and_init_errors_have_their_pinned_status(void) {
  fedrt_aggregator_options o = federation("fp32");
  fedrt_aggregator_callbacks c = aggregator_callbacks(g_links);
  fedrt_aggregator_key short_key = g_key_list[0];
  fedrt_aggregator_t* aggregator = NULL;
  size_t bytes = 0;
  void* memory;
  short_key.key_size = 8;
  CHECK_STATUS(fedrt_aggregator_size(&o, g_key_list, DEVICES, NULL), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_aggregator_size(&o, &short_key, 1, &bytes), FEDRT_INVALID_ARGUMENT);
  o.model = "mlp:8-x";
  CHECK_STATUS(fedrt_aggregator_size(&o, g_key_list, DEVICES, &bytes), FEDRT_INVALID_ARGUMENT);
  o = federation("ndqsg");
  o.max_waiting_updates = 4; /* ndqsg holds every payload: the option does not apply */
  CHECK_STATUS(fedrt_aggregator_size(&o, g_key_list, DEVICES, &bytes), FEDRT_INVALID_ARGUMENT);
  o = federation("fp32");
  o.server_optimizer = "sgd-ish";
  CHECK_STATUS(fedrt_aggregator_size(&o, g_key_list, DEVICES, &bytes), FEDRT_INVALID_ARGUMENT);
  o = federation("fp32");
  REQUIRE_OK(fedrt_aggregator_size(&o, g_key_list, DEVICES, &bytes));
  memory = malloc(bytes + 1);
  REQUIRE(memory != NULL);
  CHECK_STATUS(fedrt_aggregator_init((char*)memory + 1, bytes - 1, &o, g_key_list, DEVICES, NULL, &c, &aggregator),
               FEDRT_OUT_OF_RANGE);
  c.close = NULL;
  CHECK_STATUS(fedrt_aggregator_init((char*)memory + 1, bytes, &o, g_key_list, DEVICES, NULL, &c, &aggregator),
               FEDRT_INVALID_ARGUMENT);
  c = aggregator_callbacks(g_links);
  REQUIRE_OK(fedrt_aggregator_init((char*)memory + 1, bytes, &o, g_key_list, DEVICES, NULL, &c, &aggregator));
  CHECK(fedrt_aggregator_parameter_count(aggregator) == 8 * 16 + 16 + 16 * 3 + 3);
  CHECK(fedrt_aggregator_round(aggregator) == 0);
  CHECK(!fedrt_aggregator_finished(aggregator));
  CHECK_STATUS(fedrt_aggregator_status(aggregator), FEDRT_OK);
  /* Connections: ids are the application's, unknown ones are not found, and
   * garbage closes that connection only. */
  reset_links();
  REQUIRE_OK(fedrt_aggregator_open(aggregator, 1, "10.0.0.1:4000"));
  CHECK_STATUS(fedrt_aggregator_open(aggregator, 1, "10.0.0.1:4001"), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_aggregator_receive(aggregator, 2, (const uint8_t*)"x", 1), FEDRT_NOT_FOUND);
  CHECK_STATUS(fedrt_aggregator_stream_closed(aggregator, 2), FEDRT_NOT_FOUND);
  {
    static const uint8_t garbage[16] = {0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    CHECK_STATUS(fedrt_aggregator_receive(aggregator, 1, garbage, sizeof garbage), FEDRT_OK);
  }
  CHECK(g_links[1].closed);
  CHECK(g_links[1].close_reason != FEDRT_OK);
  CHECK_STATUS(fedrt_aggregator_receive(aggregator, 1, (const uint8_t*)"x", 1), FEDRT_NOT_FOUND);
  REQUIRE_OK(fedrt_aggregator_open(aggregator, 1, "10.0.0.1:4002")); /* the id is free again */
  REQUIRE_OK(fedrt_aggregator_stream_closed(aggregator, 1));
  CHECK(g_links[1].closed);
  REQUIRE_OK(fedrt_aggregator_open(aggregator, 3, NULL));
  g_links[3].closed = 0;
  fedrt_aggregator_destroy(aggregator); /* closes connection 3 */
  CHECK(g_links[3].closed);
  fedrt_aggregator_destroy(NULL);
  reset_links();
  free(memory);
}

/* ---- A federation ------------------------------------------------------- */

static void federate(const char* codec, size_t max_waiting_updates) {
  fedrt_aggregator_options o = federation(codec);
  fedrt_aggregator_callbacks c = aggregator_callbacks(g_links);
  fedrt_data_view test_set = view_of(TRAIN, TEST);
  fedrt_data_view train_set = view_of(0, TRAIN);
  fedrt_aggregator_t* aggregator = NULL;
  pthread_t threads[DEVICES];
  size_t bytes = 0;
  void* memory;
  float* parameters;
  double initial_accuracy;
  int i, k, guard;
  printf("# federation: %s, max waiting updates %zu\n", codec, max_waiting_updates);
  o.max_waiting_updates = max_waiting_updates;
  reset_links();
  memset(&g_rounds, 0, sizeof g_rounds);
  REQUIRE_OK(fedrt_aggregator_size(&o, g_key_list, DEVICES, &bytes));
  memory = malloc(bytes);
  REQUIRE(memory != NULL);
  REQUIRE_OK(fedrt_aggregator_init(memory, bytes, &o, g_key_list, DEVICES, &test_set, &c, &aggregator));
  parameters = (float*)malloc(fedrt_aggregator_parameter_count(aggregator) * sizeof(float));
  REQUIRE(parameters != NULL);
  REQUIRE_OK(fedrt_aggregator_get_parameters(aggregator, parameters, fedrt_aggregator_parameter_count(aggregator)));
  initial_accuracy = accuracy_of(parameters, fedrt_aggregator_parameter_count(aggregator));

  for (i = 0; i < DEVICES; ++i) {
    Link* link = &g_links[i];
    fedrt_device_callbacks dc;
    fedrt_device_options options = fedrt_device_options_default();
    size_t model_bytes = 0;
    link->index = i;
    for (k = 0; k < PER_DEVICE; ++k) link->share[k] = (uint32_t)(i + DEVICES * k);
    REQUIRE_OK(fedrt_model_size(kSpec, NULL, MAX_BATCH, &model_bytes));
    link->model_memory = malloc(model_bytes);
    REQUIRE(link->model_memory != NULL);
    REQUIRE_OK(fedrt_model_init(link->model_memory, model_bytes, kSpec, NULL, 1, MAX_BATCH, &link->model));
    memset(&dc, 0, sizeof dc);
    dc.user = link;
    dc.send = device_send;
    dc.receive = device_receive;
    dc.now_ms = test_monotonic_ms;
    dc.random_bytes = test_random_bytes;
    dc.hmac_sha256 = toy_hmac;
    options.batch = 8;
    options.shuffle_seed = 5u + (uint64_t)i;
    REQUIRE_OK(fedrt_device_create(g_ids[i], g_keys[i], sizeof g_keys[i], link->model, &train_set, link->share,
                                   PER_DEVICE, &options, &dc, &link->device));
    REQUIRE_OK(fedrt_aggregator_open(aggregator, (uint64_t)i, "memory"));
  }
  for (i = 0; i < DEVICES; ++i) REQUIRE(pthread_create(&threads[i], NULL, device_thread, &g_links[i]) == 0);

  /* The aggregator's loop: move what the devices wrote in, tick, wait. */
  for (guard = 0; guard < 1000000 && !fedrt_aggregator_finished(aggregator); ++guard) {
    ByteQueue in[DEVICES];
    uint32_t wait;
    int moved = 0;
    pthread_mutex_lock(&g_lock);
    for (i = 0; i < DEVICES; ++i) {
      in[i] = g_links[i].to_aggregator;
      memset(&g_links[i].to_aggregator, 0, sizeof(ByteQueue));
    }
    pthread_mutex_unlock(&g_lock);
    for (i = 0; i < DEVICES; ++i) {
      if (in[i].size > 0 && !g_links[i].closed) {
        CHECK_STATUS(fedrt_aggregator_receive(aggregator, (uint64_t)i, in[i].data, in[i].size), FEDRT_OK);
        moved = 1;
      }
      byte_queue_free(&in[i]);
    }
    wait = fedrt_aggregator_tick(aggregator);
    if (!moved && wait > 0) {
      struct timespec deadline;
      clock_gettime(CLOCK_REALTIME, &deadline);
      deadline.tv_nsec += 20L * 1000000L;
      if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
      }
      pthread_mutex_lock(&g_lock);
      for (i = 0; i < DEVICES && g_links[i].to_aggregator.size == 0; ++i) {
      }
      if (i == DEVICES) pthread_cond_timedwait(&g_moved, &g_lock, &deadline);
      pthread_mutex_unlock(&g_lock);
    }
  }
  for (i = 0; i < DEVICES; ++i) pthread_join(threads[i], NULL);

  CHECK(fedrt_aggregator_finished(aggregator));
  CHECK_STATUS(fedrt_aggregator_status(aggregator), FEDRT_OK);
  CHECK(fedrt_aggregator_round(aggregator) == ROUNDS);
  CHECK(g_rounds.rounds == ROUNDS);
  CHECK(g_rounds.applied == ROUNDS);
  CHECK(g_rounds.updates == (size_t)ROUNDS * DEVICES); /* every device's update, every round */
  for (i = 0; i < DEVICES; ++i) {
    CHECK_STATUS(g_links[i].result, FEDRT_OK);
    CHECK(g_links[i].finished);
    CHECK(g_links[i].closed);
    CHECK(fedrt_device_round(g_links[i].device) == ROUNDS - 1);
  }
  REQUIRE_OK(fedrt_aggregator_get_parameters(aggregator, parameters, fedrt_aggregator_parameter_count(aggregator)));
  {
    const double accuracy = accuracy_of(parameters, fedrt_aggregator_parameter_count(aggregator));
    printf("# test accuracy: %.4f before, %.4f after %d rounds (reported %.4f)\n", initial_accuracy, accuracy,
           ROUNDS, g_rounds.last_accuracy);
    CHECK(accuracy >= 0.9);
    CHECK(accuracy > initial_accuracy);
    /* The report scores the model the aggregator hands out. */
    CHECK(accuracy - g_rounds.last_accuracy < 1e-9 && g_rounds.last_accuracy - accuracy < 1e-9);
  }
  CHECK_STATUS(fedrt_aggregator_get_parameters(aggregator, parameters, 3), FEDRT_OUT_OF_RANGE);
  fedrt_aggregator_destroy(aggregator);
  for (i = 0; i < DEVICES; ++i) {
    fedrt_device_destroy(g_links[i].device);
    fedrt_model_destroy(g_links[i].model);
    free(g_links[i].model_memory);
  }
  reset_links();
  free(parameters);
  free(memory);
}

int main(void) {
  make_data();
  make_keys();
  size_and_init_errors_have_their_pinned_status();
  federate("fp32", 0);
  federate("dqsg", 0);
  federate("fp32", 1); /* one waiting slot: updates are deferred and asked for again */
  return check_finish();
}
