/* The C API's codecs from C99: round trips for several specs (side
 * information included), decode-accumulate, and the pinned status of every
 * error path, truncated and damaged payloads among them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fedrt/fedrt.h"

#define D 1000

static float input[D];
static float side_info[D]; /* the receiver's estimate: the input plus a little */
static float decoded[D];

static void make_vectors(void) {
  uint32_t state = 99u;
  int i;
  for (i = 0; i < D; ++i) {
    state = state * 1664525u + 1013904223u;
    input[i] = ((float)(state >> 8) / 16777216.0f - 0.5f) * 2.0f;
    side_info[i] = input[i] + (float)((i % 7) - 3) * 0.01f;
  }
}

static fedrt_codec_context context_for(uint32_t round) {
  fedrt_codec_context c;
  c.session_seed = 42;
  c.round = round;
  c.tensor_id = 3;
  c.sender_id = 17;
  return c;
}

/* ||decoded - input||^2 / ||input||^2 */
static double normalized_error(void) {
  double num = 0, den = 0;
  int i;
  for (i = 0; i < D; ++i) {
    num += ((double)decoded[i] - input[i]) * ((double)decoded[i] - input[i]);
    den += (double)input[i] * input[i];
  }
  return num / den;
}

static fedrt_codec_t* create(const char* spec) {
  fedrt_codec_t* codec = NULL;
  REQUIRE_OK(fedrt_codec_create(spec, &codec));
  REQUIRE(codec != NULL);
  return codec;
}

/* Encodes `input` with `spec`, decodes it and checks the error bound. */
static void round_trip(const char* spec, const char* name, int needs_side_info, double max_error) {
  fedrt_codec_t* codec = create(spec);
  const fedrt_codec_context context = context_for(5);
  const size_t capacity = fedrt_codec_max_encoded_size(codec, D);
  uint8_t* payload = (uint8_t*)malloc(capacity);
  uint8_t* again = (uint8_t*)malloc(capacity);
  size_t size = 0, size_again = 0;
  double error;
  REQUIRE(payload != NULL && again != NULL);
  CHECK(strcmp(fedrt_codec_name(codec), name) == 0);
  CHECK(strncmp(fedrt_codec_spec(codec), spec, strlen(name)) == 0);
  CHECK(fedrt_codec_needs_side_info(codec) == needs_side_info);
  REQUIRE_OK(fedrt_codec_encode(codec, input, D, &context, payload, capacity, &size));
  CHECK(size > 44 && size <= capacity);
  /* Encoding is deterministic: the same context gives the same bytes. */
  REQUIRE_OK(fedrt_codec_encode(codec, input, D, &context, again, capacity, &size_again));
  CHECK(size_again == size && memcmp(payload, again, size) == 0);
  REQUIRE_OK(fedrt_codec_decode(codec, payload, size, &context, needs_side_info ? side_info : NULL, decoded, D));
  error = normalized_error();
  printf("  %s: %zu bytes, normalized error %.3g\n", fedrt_codec_spec(codec), size, error);
  CHECK(error <= max_error);
  if (needs_side_info) {
    CHECK_STATUS(fedrt_codec_decode(codec, payload, size, &context, NULL, decoded, D), FEDRT_INVALID_ARGUMENT);
  }
  free(payload);
  free(again);
  fedrt_codec_destroy(codec);
}

static void codecs_round_trip(void) {
  round_trip("fp32", "fp32", 0, 0.0);
  round_trip("fp16", "fp16", 0, 1e-6);
  round_trip("bf16", "bf16", 0, 1e-4);
  round_trip("qsgd:s=16,b=256", "qsgd", 0, 1.0); /* variance bound min(b / s^2, sqrt(b) / s) = 1 */
  round_trip("dqsg:s=2", "dqsg", 0, 0.1);
  round_trip("dqsg:s=2,ec=pack", "dqsg", 0, 0.1);
  round_trip("ndqsg", "ndqsg", 1, 0.1);
  round_trip("topk:k=0.25", "topk", 0, 0.75);
  round_trip("moniqua:bits=4,theta=0.5", "moniqua", 1, 0.1);
}

static void decode_accumulate_adds_weighted_values(void) {
  fedrt_codec_t* codec = create("fp32");
  const fedrt_codec_context context = context_for(1);
  uint8_t* payload = (uint8_t*)malloc(fedrt_codec_max_encoded_size(codec, D));
  float accumulator[D];
  size_t size = 0;
  int i, exact = 1;
  REQUIRE(payload != NULL);
  REQUIRE_OK(fedrt_codec_encode(codec, input, D, &context, payload, fedrt_codec_max_encoded_size(codec, D), &size));
  for (i = 0; i < D; ++i) accumulator[i] = 1.0f;
  REQUIRE_OK(fedrt_codec_decode_accumulate(codec, payload, size, &context, NULL, 0.5f, accumulator, D));
  for (i = 0; i < D; ++i) exact &= accumulator[i] == 1.0f + 0.5f * input[i];
  CHECK(exact);
  CHECK_STATUS(fedrt_codec_decode_accumulate(codec, payload, size - 1, &context, NULL, 0.5f, accumulator, D),
               FEDRT_CORRUPT);
  CHECK_STATUS(fedrt_codec_decode_accumulate(codec, payload, size, &context, NULL, 0.5f, NULL, D),
               FEDRT_INVALID_ARGUMENT);
  free(payload);
  fedrt_codec_destroy(codec);

  /* A side-information codec accumulates too. */
  codec = create("ndqsg");
  payload = (uint8_t*)malloc(fedrt_codec_max_encoded_size(codec, D));
  REQUIRE(payload != NULL);
  REQUIRE_OK(fedrt_codec_encode(codec, input, D, &context, payload, fedrt_codec_max_encoded_size(codec, D), &size));
  REQUIRE_OK(fedrt_codec_decode(codec, payload, size, &context, side_info, decoded, D));
  for (i = 0; i < D; ++i) accumulator[i] = 0.0f;
  REQUIRE_OK(fedrt_codec_decode_accumulate(codec, payload, size, &context, side_info, 1.0f, accumulator, D));
  CHECK(memcmp(accumulator, decoded, sizeof accumulator) == 0);
  free(payload);
  fedrt_codec_destroy(codec);
}

static void errors_return_their_pinned_status(void) {
  fedrt_codec_t* codec = NULL;
  const fedrt_codec_context context = context_for(2);
  fedrt_codec_context other = context_for(3);
  size_t capacity, size = 0, written = 12345;
  uint8_t* payload;
  float bad[4] = {1.0f, 2.0f, 0.0f, 4.0f};

  /* Bad specs. */
  CHECK_STATUS(fedrt_codec_create("dqgs", &codec), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_codec_create("dqsg:s=0", &codec), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_codec_create("dqsg:bogus=1", &codec), FEDRT_INVALID_ARGUMENT);
  CHECK(strstr(fedrt_last_error(), "bogus") != NULL);
  CHECK_STATUS(fedrt_codec_create("", &codec), FEDRT_INVALID_ARGUMENT);
  CHECK(codec == NULL);
  CHECK_STATUS(fedrt_codec_create(NULL, &codec), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_codec_create("fp32", NULL), FEDRT_INVALID_ARGUMENT);

  codec = create("dqsg:s=2");
  capacity = fedrt_codec_max_encoded_size(codec, D);
  payload = (uint8_t*)malloc(capacity);
  REQUIRE(payload != NULL);

  /* Encode: a buffer one byte short of the bound, NaN, NULLs. */
  CHECK_STATUS(fedrt_codec_encode(codec, input, D, &context, payload, capacity - 1, &written), FEDRT_OUT_OF_RANGE);
  CHECK(written == 12345);
  bad[2] = (float)nan("");
  CHECK_STATUS(fedrt_codec_encode(codec, bad, 4, &context, payload, capacity, &written), FEDRT_INVALID_ARGUMENT);
  CHECK(strstr(fedrt_last_error(), "NaN at coordinate 2") != NULL);
  CHECK_STATUS(fedrt_codec_encode(NULL, input, D, &context, payload, capacity, &written), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_codec_encode(codec, NULL, D, &context, payload, capacity, &written), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_codec_encode(codec, input, D, NULL, payload, capacity, &written), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_codec_encode(codec, input, D, &context, NULL, capacity, &written), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_codec_encode(codec, input, D, &context, payload, capacity, NULL), FEDRT_INVALID_ARGUMENT);

  /* Decode: truncated at every length of the header and beyond, damaged,
   * another context, another length, NULLs. */
  REQUIRE_OK(fedrt_codec_encode(codec, input, D, &context, payload, capacity, &size));
  {
    size_t cut;
    int all_corrupt = 1;
    for (cut = 0; cut < size; cut += (cut < 64 ? 1 : 37)) {
      all_corrupt &= fedrt_codec_decode(codec, payload, cut, &context, NULL, decoded, D) == FEDRT_CORRUPT;
    }
    CHECK(all_corrupt);
  }
  CHECK_STATUS(fedrt_codec_decode(codec, payload, size - 1, &context, NULL, decoded, D), FEDRT_CORRUPT);
  printf("  truncated: %s\n", fedrt_last_error());
  payload[size / 2] ^= 0x10;
  CHECK_STATUS(fedrt_codec_decode(codec, payload, size, &context, NULL, decoded, D), FEDRT_CORRUPT);
  payload[size / 2] ^= 0x10;
  CHECK_STATUS(fedrt_codec_decode(codec, payload, size, &context, NULL, decoded, D), FEDRT_OK);
  CHECK_STATUS(fedrt_codec_decode(codec, payload, size, &other, NULL, decoded, D), FEDRT_FAILED_PRECONDITION);
  CHECK_STATUS(fedrt_codec_decode(codec, payload, size, &context, NULL, decoded, D - 1), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_codec_decode(NULL, payload, size, &context, NULL, decoded, D), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_codec_decode(codec, NULL, size, &context, NULL, decoded, D), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_codec_decode(codec, payload, size, NULL, NULL, decoded, D), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_codec_decode(codec, payload, size, &context, NULL, NULL, D), FEDRT_INVALID_ARGUMENT);
  {
    /* A payload of another codec. */
    fedrt_codec_t* fp32 = create("fp32");
    CHECK_STATUS(fedrt_codec_decode(fp32, payload, size, &context, NULL, decoded, D), FEDRT_INVALID_ARGUMENT);
    fedrt_codec_destroy(fp32);
  }

  /* Getters on a NULL handle; destroy ignores NULL. */
  CHECK(fedrt_codec_spec(NULL) == NULL);
  CHECK(fedrt_codec_name(NULL) == NULL);
  CHECK(fedrt_codec_needs_side_info(NULL) == 0);
  CHECK(fedrt_codec_max_encoded_size(NULL, D) == 0);
  fedrt_codec_destroy(NULL);
  free(payload);
  fedrt_codec_destroy(codec);
}

/* fedrt_codec_size then fedrt_codec_init at an odd address: the same
 * payload bytes and decoded floats as the heap codec; too little memory is
 * FEDRT_OUT_OF_RANGE. */
static void codecs_in_caller_memory(void) {
  static const char* const specs[] = {"fp32", "fp16", "dqsg", "ndqsg:ec=pack", "topk:k=0.1", "rtopk:k=0.1",
                                      "qsgd"};
  static float heap_decoded[D];
  size_t i;
  for (i = 0; i < sizeof specs / sizeof specs[0]; ++i) {
    fedrt_codec_t* heap = create(specs[i]);
    fedrt_codec_t* placed = NULL;
    const fedrt_codec_context context = context_for(9);
    const size_t capacity = fedrt_codec_max_encoded_size(heap, D);
    uint8_t* expected = (uint8_t*)malloc(capacity);
    uint8_t* payload = (uint8_t*)malloc(capacity);
    size_t bytes = 0, size = 0, expected_size = 0;
    unsigned char* memory;
    REQUIRE_OK(fedrt_codec_size(specs[i], D, &bytes));
    memory = (unsigned char*)malloc(bytes + 1);
    REQUIRE(memory != NULL && expected != NULL && payload != NULL);
    CHECK_STATUS(fedrt_codec_init(memory + 1, 40, specs[i], D, &placed), FEDRT_OUT_OF_RANGE);
    REQUIRE_OK(fedrt_codec_init(memory + 1, bytes, specs[i], D, &placed));
    CHECK(strcmp(fedrt_codec_spec(placed), fedrt_codec_spec(heap)) == 0);
    CHECK(strcmp(fedrt_codec_name(placed), fedrt_codec_name(heap)) == 0);
    REQUIRE_OK(fedrt_codec_encode(heap, input, D, &context, expected, capacity, &expected_size));
    REQUIRE_OK(fedrt_codec_encode(placed, input, D, &context, payload, capacity, &size));
    CHECK(size == expected_size && memcmp(payload, expected, size) == 0);
    REQUIRE_OK(fedrt_codec_decode(heap, payload, size, &context, side_info, heap_decoded, D));
    REQUIRE_OK(fedrt_codec_decode(placed, payload, size, &context, side_info, decoded, D));
    CHECK(memcmp(decoded, heap_decoded, sizeof decoded) == 0);
    fedrt_codec_destroy(placed);
    fedrt_codec_destroy(heap);
    free(memory);
    free(payload);
    free(expected);
  }
  CHECK_STATUS(fedrt_codec_size("dqgs", D, NULL), FEDRT_INVALID_ARGUMENT);
}

int main(void) {
  make_vectors();
  codecs_round_trip();
  codecs_in_caller_memory();
  decode_accumulate_adds_weighted_values();
  errors_return_their_pinned_status();
  return check_finish();
}
