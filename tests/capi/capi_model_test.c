/* The C API's model from C99: init in caller memory, training, evaluation,
 * parameters and tensors, and every error path's pinned status. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_reference.h"
#include "check.h"
#include "fedrt/fedrt.h"

#define FEATURES 8
#define CLASSES 3
#define MAX_BATCH 12
static const char* const kSpec = "mlp:8-16-3";
static const size_t kParameters = 8 * 16 + 16 + 16 * 3 + 3;

/* A small learnable batch: class c has a bump on features 2c, 2c+1, plus a
 * deterministic jitter. */
static void make_batch(float* features, uint8_t* labels, int batch) {
  uint32_t state = 12345u;
  int n, j;
  for (n = 0; n < batch; ++n) {
    labels[n] = (uint8_t)(n % CLASSES);
    for (j = 0; j < FEATURES; ++j) {
      state = state * 1664525u + 1013904223u;
      features[n * FEATURES + j] = (float)(state >> 8) / 16777216.0f - 0.5f;
    }
    features[n * FEATURES + 2 * labels[n]] += 2.0f;
    features[n * FEATURES + 2 * labels[n] + 1] += 2.0f;
  }
}

/* Memory for fedrt_model_init, deliberately 1 byte past malloc's alignment. */
typedef struct {
  unsigned char* block;
  void* memory;
  size_t bytes;
} ModelMemory;

static ModelMemory model_memory(const char* spec, const fedrt_sgd_options* sgd, int max_batch) {
  ModelMemory m;
  m.bytes = 0;
  REQUIRE_OK(fedrt_model_size(spec, sgd, max_batch, &m.bytes));
  m.block = (unsigned char*)malloc(m.bytes + 1);
  REQUIRE(m.block != NULL);
  m.memory = m.block + 1;
  return m;
}

static void init_gives_the_parameters_of_the_cpp_model(void) {
  static const char* const specs[] = {"mlp:8-16-3", "cnn:6x6x2-c3k3-p2-d5-4"};
  size_t s;
  for (s = 0; s < sizeof specs / sizeof specs[0]; ++s) {
    ModelMemory m = model_memory(specs[s], NULL, 4);
    fedrt_model_t* model = NULL;
    size_t count, reference_count;
    float* ours;
    float* reference;
    printf("  %s: %zu bytes\n", specs[s], m.bytes);
    REQUIRE_OK(fedrt_model_init(m.memory, m.bytes, specs[s], NULL, 7, 4, &model));
    REQUIRE(model != NULL);
    count = fedrt_model_parameter_count(model);
    CHECK(count > 0);
    ours = (float*)malloc(count * sizeof(float));
    reference = (float*)malloc(count * sizeof(float));
    REQUIRE(ours != NULL && reference != NULL);
    REQUIRE_OK(fedrt_model_get_parameters(model, ours, count));
    reference_count = capi_reference_parameters(specs[s], 7, reference, count);
    CHECK(reference_count == count);
    CHECK(memcmp(ours, reference, count * sizeof(float)) == 0);
    /* Another seed gives other parameters. */
    reference_count = capi_reference_parameters(specs[s], 8, reference, count);
    CHECK(reference_count == count && memcmp(ours, reference, count * sizeof(float)) != 0);
    CHECK(strcmp(fedrt_model_spec(model), specs[s]) == 0);
    CHECK(fedrt_model_max_batch(model) == 4);
    fedrt_model_destroy(model);
    free(ours);
    free(reference);
    free(m.block);
  }
}

static void shapes_and_tensors_describe_the_flat_vector(void) {
  ModelMemory m = model_memory(kSpec, NULL, MAX_BATCH);
  fedrt_model_t* model = NULL;
  static const char* const names[] = {"dense1.weight", "dense1.bias", "dense2.weight", "dense2.bias"};
  size_t i, next = 0;
  fedrt_tensor_info info;
  REQUIRE_OK(fedrt_model_init(m.memory, m.bytes, kSpec, NULL, 1, MAX_BATCH, &model));
  CHECK(fedrt_model_parameter_count(model) == kParameters);
  CHECK(fedrt_model_input_size(model) == FEATURES);
  CHECK(fedrt_model_num_classes(model) == CLASSES);
  REQUIRE(fedrt_model_tensor_count(model) == 4);
  for (i = 0; i < 4; ++i) {
    REQUIRE_OK(fedrt_model_tensor(model, i, &info));
    printf("  %s: offset %zu, %zu floats\n", info.name, info.offset, info.size);
    CHECK(strcmp(info.name, names[i]) == 0);
    CHECK(info.offset == next);
    next += info.size;
  }
  CHECK(next == kParameters);
  CHECK_STATUS(fedrt_model_tensor(model, 4, &info), FEDRT_OUT_OF_RANGE);
  CHECK_STATUS(fedrt_model_tensor(model, 0, NULL), FEDRT_INVALID_ARGUMENT);
  fedrt_model_destroy(model);
  free(m.block);
}

static void train_steps_lower_the_loss(void) {
  fedrt_sgd_options sgd = fedrt_sgd_options_default();
  ModelMemory m;
  fedrt_model_t* model = NULL;
  float features[MAX_BATCH * FEATURES];
  uint8_t labels[MAX_BATCH];
  int predictions[MAX_BATCH];
  fedrt_batch_loss before, after, step;
  int i;
  sgd.learning_rate = 0.1;
  sgd.momentum = 0.9f;
  m = model_memory(kSpec, &sgd, MAX_BATCH);
  REQUIRE_OK(fedrt_model_init(m.memory, m.bytes, kSpec, &sgd, 3, MAX_BATCH, &model));
  make_batch(features, labels, MAX_BATCH);
  REQUIRE_OK(fedrt_model_evaluate(model, features, labels, MAX_BATCH, &before, NULL));
  for (i = 0; i < 20; ++i) {
    REQUIRE_OK(fedrt_model_train_step(model, features, labels, MAX_BATCH, &step));
    if (i == 0) CHECK(fabs(step.loss - before.loss) < 1e-6); /* the loss before the first update */
  }
  REQUIRE_OK(fedrt_model_train_step(model, features, labels, MAX_BATCH, NULL)); /* loss may be NULL */
  REQUIRE_OK(fedrt_model_evaluate(model, features, labels, MAX_BATCH, &after, predictions));
  printf("  loss %.4f -> %.4f, correct %d -> %d of %d\n", before.loss, after.loss, before.correct, after.correct,
         MAX_BATCH);
  CHECK(after.loss < 0.5 * before.loss);
  CHECK(after.correct == MAX_BATCH);
  for (i = 0; i < MAX_BATCH; ++i) CHECK(predictions[i] == labels[i]);
  /* A smaller batch works too. */
  CHECK_STATUS(fedrt_model_train_step(model, features, labels, 5, &step), FEDRT_OK);
  fedrt_model_destroy(model);
  free(m.block);
}

static void parameters_round_trip(void) {
  ModelMemory m = model_memory(kSpec, NULL, MAX_BATCH);
  fedrt_model_t* model = NULL;
  float original[8 * 16 + 16 + 16 * 3 + 3];
  float changed[8 * 16 + 16 + 16 * 3 + 3];
  float read_back[8 * 16 + 16 + 16 * 3 + 3 + 1];
  size_t i;
  REQUIRE_OK(fedrt_model_init(m.memory, m.bytes, kSpec, NULL, 1, MAX_BATCH, &model));
  REQUIRE_OK(fedrt_model_get_parameters(model, original, kParameters));
  for (i = 0; i < kParameters; ++i) changed[i] = original[i] * 0.5f + (float)i * 1e-3f;
  CHECK_STATUS(fedrt_model_set_parameters(model, changed, kParameters), FEDRT_OK);
  CHECK_STATUS(fedrt_model_get_parameters(model, read_back, kParameters + 1), FEDRT_OK); /* more room is fine */
  CHECK(memcmp(read_back, changed, sizeof changed) == 0);
  CHECK(memcmp(read_back, original, sizeof original) != 0);
  CHECK_STATUS(fedrt_model_set_parameters(model, original, kParameters), FEDRT_OK);
  CHECK_STATUS(fedrt_model_get_parameters(model, read_back, kParameters), FEDRT_OK);
  CHECK(memcmp(read_back, original, sizeof original) == 0);
  fedrt_model_destroy(model);
  free(m.block);
}

static void errors_return_their_pinned_status(void) {
  fedrt_sgd_options sgd = fedrt_sgd_options_default();
  fedrt_sgd_options momentum = fedrt_sgd_options_default();
  ModelMemory m = model_memory(kSpec, NULL, MAX_BATCH);
  fedrt_model_t* model = NULL;
  static char sentinel;
  fedrt_model_t* const marker = (fedrt_model_t*)(void*)&sentinel;
  fedrt_model_t* untouched = marker; /* must stay as it is on failure */
  float features[(MAX_BATCH + 1) * FEATURES];
  uint8_t labels[MAX_BATCH + 1];
  float parameters[8 * 16 + 16 + 16 * 3 + 3];
  size_t bytes = 0, plain = 0, with_momentum = 0;
  fedrt_batch_loss loss;

  /* Bad specs, options and batch sizes. */
  CHECK_STATUS(fedrt_model_size("mlp:8", NULL, 4, &bytes), FEDRT_INVALID_ARGUMENT);
  CHECK(strstr(fedrt_last_error(), "mlp:8") != NULL);
  CHECK_STATUS(fedrt_model_size("rnn:8-3", NULL, 4, &bytes), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_size(kSpec, NULL, 0, &bytes), FEDRT_INVALID_ARGUMENT);
  sgd.learning_rate = 0.0;
  CHECK_STATUS(fedrt_model_size(kSpec, &sgd, 4, &bytes), FEDRT_INVALID_ARGUMENT);
  CHECK(strstr(fedrt_last_error(), "learning rate") != NULL);
  sgd = fedrt_sgd_options_default();
  sgd.nesterov = 1; /* without momentum */
  CHECK_STATUS(fedrt_model_size(kSpec, &sgd, 4, &bytes), FEDRT_INVALID_ARGUMENT);
  CHECK(bytes == 0); /* outputs are set only on success */
  CHECK_STATUS(fedrt_model_init(m.memory, m.bytes, "mlp:8-x-3", NULL, 1, MAX_BATCH, &untouched),
               FEDRT_INVALID_ARGUMENT);
  CHECK(untouched == marker);

  /* Momentum needs its state in the memory: the size query counts it. */
  momentum.momentum = 0.5f;
  REQUIRE_OK(fedrt_model_size(kSpec, NULL, MAX_BATCH, &plain));
  REQUIRE_OK(fedrt_model_size(kSpec, &momentum, MAX_BATCH, &with_momentum));
  CHECK(with_momentum >= plain + kParameters * sizeof(float));
  CHECK_STATUS(fedrt_model_init(m.memory, m.bytes, kSpec, &momentum, 1, MAX_BATCH, &model), FEDRT_OUT_OF_RANGE);

  /* Too little memory, by one byte, and NULL pointers. */
  CHECK_STATUS(fedrt_model_init(m.memory, m.bytes - 1, kSpec, NULL, 1, MAX_BATCH, &model), FEDRT_OUT_OF_RANGE);
  CHECK(strstr(fedrt_last_error(), "fedrt_model_size") != NULL);
  CHECK_STATUS(fedrt_model_init(NULL, m.bytes, kSpec, NULL, 1, MAX_BATCH, &model), FEDRT_INVALID_ARGUMENT);
  CHECK(strstr(fedrt_last_error(), "memory is NULL") != NULL);
  CHECK_STATUS(fedrt_model_init(m.memory, m.bytes, NULL, NULL, 1, MAX_BATCH, &model), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_init(m.memory, m.bytes, kSpec, NULL, 1, MAX_BATCH, NULL), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_size(NULL, NULL, 4, &bytes), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_size(kSpec, NULL, 4, NULL), FEDRT_INVALID_ARGUMENT);

  /* The memory as the size query says is enough. */
  REQUIRE_OK(fedrt_model_init(m.memory, m.bytes, kSpec, NULL, 1, MAX_BATCH, &model));
  make_batch(features, labels, MAX_BATCH + 1);
  CHECK_STATUS(fedrt_model_train_step(model, features, labels, MAX_BATCH + 1, &loss), FEDRT_OUT_OF_RANGE);
  CHECK(strstr(fedrt_last_error(), "does not fit") != NULL);
  CHECK_STATUS(fedrt_model_evaluate(model, features, labels, MAX_BATCH + 1, &loss, NULL), FEDRT_OUT_OF_RANGE);
  CHECK_STATUS(fedrt_model_train_step(model, features, labels, 0, &loss), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_train_step(model, features, labels, -1, &loss), FEDRT_INVALID_ARGUMENT);
  labels[2] = CLASSES; /* not a class of the model */
  CHECK_STATUS(fedrt_model_train_step(model, features, labels, MAX_BATCH, &loss), FEDRT_OUT_OF_RANGE);
  labels[2] = 2;
  CHECK_STATUS(fedrt_model_train_step(NULL, features, labels, 4, &loss), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_train_step(model, NULL, labels, 4, &loss), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_train_step(model, features, NULL, 4, &loss), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_evaluate(NULL, features, labels, 4, &loss, NULL), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_evaluate(model, NULL, labels, 4, &loss, NULL), FEDRT_INVALID_ARGUMENT);

  /* Parameter buffers of the wrong size. */
  CHECK_STATUS(fedrt_model_get_parameters(model, parameters, kParameters - 1), FEDRT_OUT_OF_RANGE);
  CHECK_STATUS(fedrt_model_get_parameters(model, NULL, kParameters), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_get_parameters(NULL, parameters, kParameters), FEDRT_INVALID_ARGUMENT);
  REQUIRE_OK(fedrt_model_get_parameters(model, parameters, kParameters));
  CHECK_STATUS(fedrt_model_set_parameters(model, parameters, kParameters - 1), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_set_parameters(model, parameters, kParameters + 1), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_set_parameters(model, NULL, kParameters), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_model_set_parameters(NULL, parameters, kParameters), FEDRT_INVALID_ARGUMENT);

  /* Getters on a NULL handle answer 0 or NULL; destroy ignores NULL. */
  CHECK(fedrt_model_parameter_count(NULL) == 0);
  CHECK(fedrt_model_input_size(NULL) == 0);
  CHECK(fedrt_model_num_classes(NULL) == 0);
  CHECK(fedrt_model_max_batch(NULL) == 0);
  CHECK(fedrt_model_tensor_count(NULL) == 0);
  CHECK(fedrt_model_spec(NULL) == NULL);
  fedrt_model_destroy(NULL);
  fedrt_model_destroy(model);
  free(m.block);
}

int main(void) {
  init_gives_the_parameters_of_the_cpp_model();
  shapes_and_tensors_describe_the_flat_vector();
  train_steps_lower_the_loss();
  parameters_round_trip();
  errors_return_their_pinned_status();
  return check_finish();
}
