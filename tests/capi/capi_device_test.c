/* The C API's device client from C99: every creation error with its pinned
 * status, and whole sessions against fedrt's aggregator engine in memory
 * (support/test_aggregator.h): rounds to the Leave with three codecs, the
 * system's HMAC, a refused key, a lost link and the reconnect, a join that
 * times out, a stop, a misbehaving callback, a restored residual. The
 * callbacks run on a manual clock that moves only when the device waits for
 * bytes, so nothing here depends on time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fedrt/fedrt.h"
#include "test_aggregator.h"

#define FEATURES 8
#define CLASSES 3
#define EXAMPLES 48
#define MAX_BATCH 12
static const char* const kSpec = "mlp:8-16-3";
static const size_t kParameters = 8 * 16 + 16 + 16 * 3 + 3;
static const uint8_t kKey[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};

/* A small learnable data set, as floats and as bytes: class c has a bump on
 * features 2c, 2c+1. */
static float g_features[EXAMPLES * FEATURES];
static uint8_t g_pixels[EXAMPLES * FEATURES];
static uint8_t g_labels[EXAMPLES];

static void make_data(void) {
  uint32_t state = 12345u;
  int n, j;
  for (n = 0; n < EXAMPLES; ++n) {
    g_labels[n] = (uint8_t)(n % CLASSES);
    for (j = 0; j < FEATURES; ++j) {
      state = state * 1664525u + 1013904223u;
      g_pixels[n * FEATURES + j] = (uint8_t)(state >> 26);
    }
    g_pixels[n * FEATURES + 2 * g_labels[n]] = (uint8_t)(g_pixels[n * FEATURES + 2 * g_labels[n]] + 180);
    g_pixels[n * FEATURES + 2 * g_labels[n] + 1] = (uint8_t)(g_pixels[n * FEATURES + 2 * g_labels[n] + 1] + 180);
    for (j = 0; j < FEATURES; ++j) g_features[n * FEATURES + j] = (float)g_pixels[n * FEATURES + j] / 64.0f - 1.0f;
  }
}

static fedrt_data_view float_view(void) {
  fedrt_data_view view;
  memset(&view, 0, sizeof view);
  view.count = EXAMPLES;
  view.example_size = FEATURES;
  view.num_classes = CLASSES;
  view.features = g_features;
  view.labels = g_labels;
  return view;
}

static fedrt_data_view byte_view(void) {
  fedrt_data_view view = float_view();
  view.features = NULL;
  view.pixels = g_pixels;
  view.mean = 0.25f;
  view.stddev = 0.3f;
  return view;
}

/* ---- Callbacks: the aggregator in memory as the stream, its clock --------- */

typedef struct {
  test_aggregator* aggregator;
  uint32_t random_state;
  int stop_after;     /* should_stop says stop at this call (0: never) */
  int stop_calls;
  int residuals;      /* on_residual calls */
  size_t residual_count;
  int bogus_receive;  /* receive claims one byte more than the buffer holds */
} Session;

static fedrt_status session_send(void* user, const uint8_t* data, size_t size) {
  return test_aggregator_write(((Session*)user)->aggregator, data, size);
}

static fedrt_status session_receive(void* user, uint8_t* buffer, size_t capacity, uint32_t timeout_ms,
                                    size_t* received) {
  Session* s = (Session*)user;
  fedrt_status status;
  if (s->bogus_receive) {
    *received = capacity + 1;
    return FEDRT_OK;
  }
  status = test_aggregator_read(s->aggregator, buffer, capacity, received);
  if (status == FEDRT_OK && *received == 0) test_aggregator_wait(s->aggregator, timeout_ms); /* waited for nothing */
  return status;
}

static uint64_t session_now_ms(void* user) { return test_aggregator_now_ms(((Session*)user)->aggregator); }

static fedrt_status session_random_bytes(void* user, uint8_t* out, size_t size) {
  Session* s = (Session*)user;
  size_t i;
  for (i = 0; i < size; ++i) {
    s->random_state = s->random_state * 1664525u + 1013904223u;
    out[i] = (uint8_t)(s->random_state >> 24);
  }
  return FEDRT_OK;
}

static int session_should_stop(void* user) {
  Session* s = (Session*)user;
  ++s->stop_calls;
  return s->stop_after != 0 && s->stop_calls >= s->stop_after;
}

static void session_on_residual(void* user, const float* residual, size_t count) {
  Session* s = (Session*)user;
  (void)residual;
  ++s->residuals;
  s->residual_count = count;
}

static fedrt_device_callbacks callbacks_for(Session* session) {
  fedrt_device_callbacks c;
  memset(&c, 0, sizeof c);
  c.user = session;
  c.send = session_send;
  c.receive = session_receive;
  c.now_ms = session_now_ms;
  c.random_bytes = session_random_bytes;
  c.hmac_sha256 = test_hmac_sha256;
  c.should_stop = session_should_stop;
  c.on_residual = session_on_residual;
  return c;
}

static test_aggregator_options script(const char* codec, uint32_t rounds) {
  test_aggregator_options o;
  memset(&o, 0, sizeof o);
  o.device_id = "board-7";
  o.key = kKey;
  o.key_size = sizeof kKey;
  o.model = kSpec;
  o.codec = codec;
  o.rounds = rounds;
  o.local_steps = 3;
  o.learning_rate = 0.1f;
  return o;
}

/* A model in malloc'd memory. */
typedef struct {
  void* memory;
  fedrt_model_t* model;
} Model;

static Model make_model(const char* spec) {
  Model m;
  size_t bytes = 0;
  REQUIRE_OK(fedrt_model_size(spec, NULL, MAX_BATCH, &bytes));
  m.memory = malloc(bytes);
  REQUIRE(m.memory != NULL);
  REQUIRE_OK(fedrt_model_init(m.memory, bytes, spec, NULL, 1, MAX_BATCH, &m.model));
  return m;
}

static void free_model(Model* m) {
  fedrt_model_destroy(m->model);
  free(m->memory);
}

static fedrt_device_options small_batches(void) {
  fedrt_device_options o = fedrt_device_options_default();
  o.batch = 8;
  return o;
}

/* ---- Creation ----------------------------------------------------------- */

static void options_default_to_those_of_fedrt_device(void) {
  const fedrt_device_options o = fedrt_device_options_default();
  CHECK(o.batch == 32);
  CHECK(o.shuffle_seed == 1);
  CHECK(o.heartbeat_interval_ms == 1000);
  CHECK(o.idle_timeout_ms == 0);
  CHECK(o.join_timeout_ms == 10000);
  CHECK(o.steps_per_slice == 8);
  CHECK(o.max_frame_bytes == 4u << 20);
  CHECK(o.codecs == NULL);
}

/* `c` with required callback `which` (send, receive, now_ms, random_bytes) NULL. */
static fedrt_device_callbacks without_callback(fedrt_device_callbacks c, int which) {
  switch (which) {
    case 0: c.send = NULL; break;
    case 1: c.receive = NULL; break;
    case 2: c.now_ms = NULL; break;
    default: c.random_bytes = NULL; break;
  }
  return c;
}

/* fedrt_device_create with one thing wrong: the status, a part of the
 * message, and the handle left alone. */
static void expect_refused(const char* what, fedrt_status status, fedrt_status expected, const char* message,
                           const fedrt_device_t* device) {
  const int ok = check_status(status, expected, what, __FILE__, __LINE__);
  if (!check_report(strstr(fedrt_last_error(), message) != NULL, message, __FILE__, __LINE__) || !ok) {
    printf("    last error: %s\n", fedrt_last_error());
  }
  CHECK(device == NULL);
}

static void creation_errors_have_their_pinned_status(void) {
  Model m = make_model(kSpec);
  Model wide = make_model("mlp:6-4-3");
  Model narrow = make_model("mlp:8-4-2");
  Session session;
  fedrt_device_callbacks c;
  fedrt_device_callbacks missing;
  fedrt_data_view view = float_view();
  fedrt_data_view bad;
  fedrt_device_options options = small_batches();
  fedrt_device_t* device = NULL;
  static const uint32_t share[] = {0, 1, 2, EXAMPLES};
  static const char* const long_id = "a234567890123456789012345678901234567890123456789012345678901234X";
  uint8_t long_key[FEDRT_KEY_MAX_BYTES + 1];
  int k;
  memset(&session, 0, sizeof session);
  memset(long_key, 7, sizeof long_key);
  c = callbacks_for(&session);

  /* NULL arguments. */
  expect_refused("NULL id", fedrt_device_create(NULL, kKey, sizeof kKey, m.model, &view, NULL, 0, &options, &c, &device),
                 FEDRT_INVALID_ARGUMENT, "device_id is NULL", device);
  expect_refused("NULL key", fedrt_device_create("board-7", NULL, 16, m.model, &view, NULL, 0, &options, &c, &device),
                 FEDRT_INVALID_ARGUMENT, "key is NULL", device);
  expect_refused("NULL model", fedrt_device_create("board-7", kKey, sizeof kKey, NULL, &view, NULL, 0, &options, &c,
                                                   &device),
                 FEDRT_INVALID_ARGUMENT, "model is NULL", device);
  expect_refused("NULL data", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, NULL, NULL, 0, &options, &c,
                                                  &device),
                 FEDRT_INVALID_ARGUMENT, "data is NULL", device);
  expect_refused("NULL callbacks", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, NULL, 0, &options,
                                                       NULL, &device),
                 FEDRT_INVALID_ARGUMENT, "callbacks is NULL", device);
  CHECK_STATUS(fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, NULL, 0, &options, &c, NULL),
               FEDRT_INVALID_ARGUMENT);

  /* Every required callback. */
  for (k = 0; k < 4; ++k) {
    static const char* const messages[] = {"callbacks->send is NULL", "callbacks->receive is NULL",
                                           "callbacks->now_ms is NULL", "callbacks->random_bytes is NULL"};
    missing = without_callback(c, k);
    expect_refused(messages[k], fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, NULL, 0, &options,
                                                    &missing, &device),
                   FEDRT_INVALID_ARGUMENT, messages[k], device);
  }
  /* The HMAC may be NULL only where the build has its own. */
  missing = c;
  missing.hmac_sha256 = NULL;
  CHECK(fedrt_system_crypto_available() == FEDRT_TEST_HAVE_OPENSSL);
  if (fedrt_system_crypto_available()) {
    CHECK_STATUS(fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, NULL, 0, &options, &missing, &device),
                 FEDRT_OK);
    CHECK(device != NULL);
    fedrt_device_destroy(device);
    device = NULL;
  } else {
    expect_refused("no hmac without OpenSSL", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, NULL, 0,
                                                                  &options, &missing, &device),
                   FEDRT_INVALID_ARGUMENT, "callbacks->hmac_sha256 is NULL, and this build of fedrt has no HMAC-SHA256",
                   device);
  }
  /* The optional ones may be NULL. */
  missing = c;
  missing.should_stop = NULL;
  missing.on_residual = NULL;
  missing.user = NULL;
  CHECK_STATUS(fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, NULL, 0, &options, &missing, &device),
               FEDRT_OK);
  fedrt_device_destroy(device);
  device = NULL;
  /* NULL options are the defaults: batches of 32, more than this model holds. */
  expect_refused("default options", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, NULL, 0, NULL, &c,
                                                        &device),
                 FEDRT_OUT_OF_RANGE, "a batch of 32 does not fit", device);

  /* Ids and keys. */
  expect_refused("empty id", fedrt_device_create("", kKey, sizeof kKey, m.model, &view, NULL, 0, &options, &c, &device),
                 FEDRT_INVALID_ARGUMENT, "device id '' is not valid", device);
  expect_refused("id with a space", fedrt_device_create("board 7", kKey, sizeof kKey, m.model, &view, NULL, 0, &options,
                                                        &c, &device),
                 FEDRT_INVALID_ARGUMENT, "device id 'board 7' is not valid", device);
  expect_refused("id of 65 characters", fedrt_device_create(long_id, kKey, sizeof kKey, m.model, &view, NULL, 0,
                                                            &options, &c, &device),
                 FEDRT_INVALID_ARGUMENT, "is not valid", device);
  expect_refused("short key", fedrt_device_create("board-7", kKey, FEDRT_KEY_MIN_BYTES - 1, m.model, &view, NULL, 0,
                                                  &options, &c, &device),
                 FEDRT_INVALID_ARGUMENT, "the device key must have 16 to 64 bytes", device);
  expect_refused("long key", fedrt_device_create("board-7", long_key, sizeof long_key, m.model, &view, NULL, 0, &options,
                                                 &c, &device),
                 FEDRT_INVALID_ARGUMENT, "the device key must have 16 to 64 bytes", device);

  /* Models that do not fit the data, batches that do not fit the model. */
  expect_refused("model of another input size", fedrt_device_create("board-7", kKey, sizeof kKey, wide.model, &view,
                                                                    NULL, 0, &options, &c, &device),
                 FEDRT_INVALID_ARGUMENT, "model 'mlp:6-4-3' takes 6 features, the data has 8", device);
  expect_refused("model with fewer classes", fedrt_device_create("board-7", kKey, sizeof kKey, narrow.model, &view,
                                                                 NULL, 0, &options, &c, &device),
                 FEDRT_INVALID_ARGUMENT, "the data has 3 classes, model 'mlp:8-4-2' predicts 2", device);
  options.batch = MAX_BATCH + 1;
  expect_refused("batch above the model's", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, NULL, 0,
                                                                &options, &c, &device),
                 FEDRT_OUT_OF_RANGE, "a batch of 13 does not fit model 'mlp:8-16-3'", device);
  options.batch = 0;
  expect_refused("batch of 0", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, NULL, 0, &options, &c,
                                                   &device),
                 FEDRT_INVALID_ARGUMENT, "the batch size must be positive", device);
  options = small_batches();

  /* Data views. */
  bad = view;
  bad.pixels = g_pixels;
  bad.stddev = 1.0f;
  expect_refused("both feature kinds", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &bad, NULL, 0,
                                                           &options, &c, &device),
                 FEDRT_INVALID_ARGUMENT, "exactly one of its byte and float features", device);
  bad = byte_view();
  bad.stddev = 0.0f;
  expect_refused("bytes without a deviation", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &bad, NULL, 0,
                                                                  &options, &c, &device),
                 FEDRT_INVALID_ARGUMENT, "positive standard deviation", device);
  bad = view;
  bad.num_classes = 2;
  expect_refused("label past the class count", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &bad, NULL, 0,
                                                                   &options, &c, &device),
                 FEDRT_INVALID_ARGUMENT, "label 2 of example 2 is not below the class count 2", device);
  bad = view;
  bad.labels = NULL;
  expect_refused("no labels", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &bad, NULL, 0, &options, &c,
                                                  &device),
                 FEDRT_INVALID_ARGUMENT, "no labels", device);

  /* Shares. */
  expect_refused("share index past the data", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, share, 4,
                                                                   &options, &c, &device),
                 FEDRT_OUT_OF_RANGE, "share index 48 is past the data", device);
  expect_refused("empty share", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, share, 0, &options,
                                                    &c, &device),
                 FEDRT_FAILED_PRECONDITION, "device 'board-7' got no examples", device);
  expect_refused("NULL share with a count", fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, NULL, 3,
                                                                &options, &c, &device),
                 FEDRT_INVALID_ARGUMENT, "share is NULL with share_count 3", device);

  /* What a good one reports. */
  REQUIRE_OK(fedrt_device_create("board-7", kKey, sizeof kKey, m.model, &view, share, 3, &options, &c, &device));
  CHECK(fedrt_device_examples(device) == 3);
  CHECK(fedrt_device_finished(device) == 0);
  CHECK(fedrt_device_round(device) == 0);
  CHECK(fedrt_device_joins(device) == 0);
  CHECK(fedrt_device_sender_id(device) != 0);
  CHECK(fedrt_device_sender_id(device) < (1u << 24));
  fedrt_device_destroy(device);

  /* NULL handles. */
  CHECK_STATUS(fedrt_device_run_session(NULL), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_device_restore_residual(NULL, g_features, 1), FEDRT_INVALID_ARGUMENT);
  CHECK(fedrt_device_finished(NULL) == 0);
  CHECK(fedrt_device_round(NULL) == 0);
  CHECK(fedrt_device_joins(NULL) == 0);
  CHECK(fedrt_device_sender_id(NULL) == 0);
  CHECK(fedrt_device_examples(NULL) == 0);
  fedrt_device_destroy(NULL);
  free_model(&m);
  free_model(&wide);
  free_model(&narrow);
}

/* ---- Sessions ----------------------------------------------------------- */

/* A device on `view`, the aggregator `o` describes, and the callbacks
 * between them; `hmac` NULL: the library's. */
typedef struct {
  Model model;
  Session session;
  fedrt_device_callbacks callbacks;
  fedrt_device_t* device;
} Rig;

static void rig_start_with(Rig* rig, const test_aggregator_options* o, const fedrt_data_view* view, const uint8_t* key,
                           int library_hmac) {
  const fedrt_device_options options = small_batches();
  memset(rig, 0, sizeof *rig);
  rig->model = make_model(kSpec);
  rig->session.aggregator = test_aggregator_create(o);
  REQUIRE(rig->session.aggregator != NULL);
  rig->session.random_state = 5;
  rig->callbacks = callbacks_for(&rig->session);
  if (library_hmac) rig->callbacks.hmac_sha256 = NULL;
  REQUIRE_OK(fedrt_device_create("board-7", key, sizeof kKey, rig->model.model, view, NULL, 0, &options,
                                 &rig->callbacks, &rig->device));
}

static void rig_start(Rig* rig, const test_aggregator_options* o, const fedrt_data_view* view, const uint8_t* key) {
  rig_start_with(rig, o, view, key, 0);
}

static void rig_stop(Rig* rig) {
  fedrt_device_destroy(rig->device);
  test_aggregator_destroy(rig->session.aggregator);
  free_model(&rig->model);
}

static void a_session_trains_every_round_until_the_aggregator_leaves(void) {
  static const struct {
    const char* codec;
    int bytes;
  } cases[] = {{"fp32", 0}, {"dqsg:ef=on", 1}, {"ndqsg", 0}};
  size_t k;
  /* Four rounds of three steps each on the learnable data set. */
  for (k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
    const test_aggregator_options o = script(cases[k].codec, 4);
    const fedrt_data_view view = cases[k].bytes ? byte_view() : float_view();
    Rig rig;
    printf("  codec %s, %s features\n", cases[k].codec, cases[k].bytes ? "byte" : "float");
    rig_start(&rig, &o, &view, kKey);
    CHECK_STATUS(fedrt_device_run_session(rig.device), FEDRT_OK);
    CHECK(fedrt_device_finished(rig.device) == 1);
    CHECK(fedrt_device_round(rig.device) == 3);
    CHECK(fedrt_device_joins(rig.device) == 1);
    CHECK(test_aggregator_finished(rig.session.aggregator) == 1);
    CHECK(test_aggregator_rounds(rig.session.aggregator) == 4);
    CHECK(test_aggregator_updates(rig.session.aggregator) == 4);
    /* The device trained: the loss it reported went down over the rounds. */
    printf("    training loss %.4f in round 1, %.4f in round 4\n", test_aggregator_first_loss(rig.session.aggregator),
           test_aggregator_last_loss(rig.session.aggregator));
    CHECK(test_aggregator_last_loss(rig.session.aggregator) < test_aggregator_first_loss(rig.session.aggregator));
    /* Only a codec with error feedback has a residual to keep. */
    if (strstr(cases[k].codec, "ef=on") != NULL) {
      CHECK(rig.session.residuals == 4);
      CHECK(rig.session.residual_count == kParameters);
    } else {
      CHECK(rig.session.residuals == 0);
    }
    /* The session asked whether to stop as it went. */
    CHECK(rig.session.stop_calls > 0);
    /* Once the training has ended there is no session to run. */
    CHECK_STATUS(fedrt_device_run_session(rig.device), FEDRT_FAILED_PRECONDITION);
    CHECK(strstr(fedrt_last_error(), "has ended the training already") != NULL);
    rig_stop(&rig);
  }
}

static void the_library_hmac_serves_when_the_callback_is_null(void) {
  const test_aggregator_options o = script("fp32", 1);
  const fedrt_data_view view = float_view();
  Rig rig;
  if (!fedrt_system_crypto_available()) {
    printf("  not here: this build has no HMAC-SHA256 of its own (creation refuses NULL, tested above)\n");
    return;
  }
  rig_start_with(&rig, &o, &view, kKey, 1);
  CHECK_STATUS(fedrt_device_run_session(rig.device), FEDRT_OK);
  CHECK(test_aggregator_updates(rig.session.aggregator) == 1);
  rig_stop(&rig);
}

static void a_wrong_key_is_refused_for_good(void) {
  const test_aggregator_options o = script("fp32", 2);
  const fedrt_data_view view = float_view();
  uint8_t wrong[sizeof kKey];
  Rig rig;
  memcpy(wrong, kKey, sizeof kKey);
  wrong[0] ^= 1;
  rig_start(&rig, &o, &view, wrong);
  CHECK_STATUS(fedrt_device_run_session(rig.device), FEDRT_UNAUTHENTICATED);
  printf("  message: %s\n", fedrt_last_error());
  CHECK(fedrt_device_joins(rig.device) == 0);
  CHECK(fedrt_device_finished(rig.device) == 0);
  CHECK(test_aggregator_rounds(rig.session.aggregator) == 0);
  rig_stop(&rig);
}

static void a_lost_link_is_unavailable_and_the_next_session_resumes(void) {
  test_aggregator_options o = script("dqsg", 2);
  const fedrt_data_view view = float_view();
  Rig rig;
  o.close_after_join = 1;
  rig_start(&rig, &o, &view, kKey);
  CHECK_STATUS(fedrt_device_run_session(rig.device), FEDRT_UNAVAILABLE);
  printf("  message: %s\n", fedrt_last_error());
  CHECK(fedrt_device_joins(rig.device) == 1);
  CHECK(fedrt_device_finished(rig.device) == 0);
  /* The application reconnects and runs the next session on the new stream. */
  test_aggregator_reconnect(rig.session.aggregator);
  CHECK_STATUS(fedrt_device_run_session(rig.device), FEDRT_OK);
  CHECK(fedrt_device_joins(rig.device) == 2);
  CHECK(test_aggregator_rounds(rig.session.aggregator) == 2);
  CHECK(test_aggregator_updates(rig.session.aggregator) == 2);
  CHECK(fedrt_device_finished(rig.device) == 1);
  rig_stop(&rig);
}

static void a_join_without_an_answer_runs_out_of_time(void) {
  test_aggregator_options o = script("fp32", 1);
  const fedrt_data_view view = float_view();
  Rig rig;
  o.silent = 1;
  rig_start(&rig, &o, &view, kKey);
  CHECK_STATUS(fedrt_device_run_session(rig.device), FEDRT_DEADLINE_EXCEEDED);
  CHECK(strstr(fedrt_last_error(), "the join did not complete in time") != NULL);
  /* The clock moved only while the device waited: just past the 10 s join deadline. */
  CHECK(test_aggregator_now_ms(rig.session.aggregator) > 10000);
  CHECK(test_aggregator_now_ms(rig.session.aggregator) < 11000);
  rig_stop(&rig);
}

static void should_stop_cancels_the_session(void) {
  const test_aggregator_options o = script("fp32", 50);
  const fedrt_data_view view = float_view();
  Rig rig;
  rig_start(&rig, &o, &view, kKey);
  rig.session.stop_after = 20;
  CHECK_STATUS(fedrt_device_run_session(rig.device), FEDRT_CANCELLED);
  CHECK(rig.session.stop_calls == 20);
  CHECK(fedrt_device_finished(rig.device) == 0);
  CHECK(test_aggregator_rounds(rig.session.aggregator) < 50);
  rig_stop(&rig);
}

static void a_receive_callback_that_overflows_is_an_internal_error(void) {
  const test_aggregator_options o = script("fp32", 1);
  const fedrt_data_view view = float_view();
  Rig rig;
  rig_start(&rig, &o, &view, kKey);
  rig.session.bogus_receive = 1;
  CHECK_STATUS(fedrt_device_run_session(rig.device), FEDRT_INTERNAL);
  CHECK(strstr(fedrt_last_error(), "the receive callback reported 4097 bytes for a buffer of 4096") != NULL);
  printf("  message: %s\n", fedrt_last_error());
  rig_stop(&rig);
}

static void a_residual_is_restored_only_when_it_fits(void) {
  const test_aggregator_options o = script("dqsg:ef=on", 1);
  const fedrt_data_view view = float_view();
  float* residual = (float*)calloc(kParameters + 1, sizeof(float));
  Rig rig;
  REQUIRE(residual != NULL);
  rig_start(&rig, &o, &view, kKey);
  CHECK_STATUS(fedrt_device_restore_residual(rig.device, residual, kParameters + 1), FEDRT_FAILED_PRECONDITION);
  CHECK_STATUS(fedrt_device_restore_residual(rig.device, NULL, kParameters), FEDRT_INVALID_ARGUMENT);
  residual[3] = NAN;
  CHECK_STATUS(fedrt_device_restore_residual(rig.device, residual, kParameters), FEDRT_CORRUPT);
  residual[3] = 0.5f;
  CHECK_STATUS(fedrt_device_restore_residual(rig.device, residual, kParameters), FEDRT_OK);
  CHECK_STATUS(fedrt_device_run_session(rig.device), FEDRT_OK);
  CHECK(rig.session.residuals == 1);
  rig_stop(&rig);
  free(residual);
}

/* ---- A device in caller memory --------------------------------------- */

/* fedrt_device_size then fedrt_device_init at an odd address: rounds run as
 * with fedrt_device_create, a smaller block is refused, and a device sized
 * for its codecs needs less than one that takes every codec. */
static void a_device_in_caller_memory_runs_its_rounds(void) {
  const test_aggregator_options o = script("ndqsg", 3);
  const fedrt_data_view view = float_view();
  fedrt_device_options options = small_batches();
  size_t all = 0, sized = 0;
  unsigned char* memory;
  Rig rig;
  memset(&rig, 0, sizeof rig);
  rig.model = make_model(kSpec);
  REQUIRE_OK(fedrt_device_size(rig.model.model, &view, 0, &options, &all));
  options.codecs = "ndqsg;dqsg";
  REQUIRE_OK(fedrt_device_size(rig.model.model, &view, 0, &options, &sized));
  printf("  device memory: %lu bytes for every codec, %lu for ndqsg and dqsg\n", (unsigned long)all,
         (unsigned long)sized);
  CHECK(sized < all);
  options.codecs = "ndqsg;nosuch";
  CHECK_STATUS(fedrt_device_size(rig.model.model, &view, 0, &options, &all), FEDRT_INVALID_ARGUMENT);
  options.codecs = "ndqsg;dqsg";
  CHECK_STATUS(fedrt_device_size(NULL, &view, 0, &options, &all), FEDRT_INVALID_ARGUMENT);

  rig.session.aggregator = test_aggregator_create(&o);
  REQUIRE(rig.session.aggregator != NULL);
  rig.session.random_state = 5;
  rig.callbacks = callbacks_for(&rig.session);
  memory = (unsigned char*)malloc(sized + 1);
  REQUIRE(memory != NULL);
  CHECK_STATUS(fedrt_device_init(memory + 1, sized - 1, "board-7", kKey, sizeof kKey, rig.model.model, &view, NULL, 0,
                                 &options, &rig.callbacks, &rig.device),
               FEDRT_OUT_OF_RANGE);
  CHECK(strstr(fedrt_last_error(), "fedrt_device_size") != NULL);
  CHECK(rig.device == NULL);
  CHECK_STATUS(fedrt_device_init(NULL, sized, "board-7", kKey, sizeof kKey, rig.model.model, &view, NULL, 0, &options,
                                 &rig.callbacks, &rig.device),
               FEDRT_INVALID_ARGUMENT);
  REQUIRE_OK(fedrt_device_init(memory + 1, sized, "board-7", kKey, sizeof kKey, rig.model.model, &view, NULL, 0,
                               &options, &rig.callbacks, &rig.device));
  CHECK_STATUS(fedrt_device_run_session(rig.device), FEDRT_OK);
  CHECK(fedrt_device_finished(rig.device) == 1);
  CHECK(test_aggregator_rounds(rig.session.aggregator) == 3);
  CHECK(test_aggregator_updates(rig.session.aggregator) == 3);
  CHECK(test_aggregator_last_loss(rig.session.aggregator) < test_aggregator_first_loss(rig.session.aggregator));
  /* No codec it accepts keeps a residual: there is none to restore. */
  {
    float residual[1] = {0};
    CHECK_STATUS(fedrt_device_restore_residual(rig.device, residual, kParameters), FEDRT_FAILED_PRECONDITION);
  }
  fedrt_device_destroy(rig.device); /* the memory stays ours */
  free(memory);
  test_aggregator_destroy(rig.session.aggregator);
  free_model(&rig.model);
}

int main(void) {
  make_data();
  options_default_to_those_of_fedrt_device();
  creation_errors_have_their_pinned_status();
  a_session_trains_every_round_until_the_aggregator_leaves();
  the_library_hmac_serves_when_the_callback_is_null();
  a_wrong_key_is_refused_for_good();
  a_lost_link_is_unavailable_and_the_next_session_resumes();
  a_join_without_an_answer_runs_out_of_time();
  should_stop_cancels_the_session();
  a_receive_callback_that_overflows_is_an_internal_error();
  a_residual_is_restored_only_when_it_fits();
  a_device_in_caller_memory_runs_its_rounds();
  return check_finish();
}
