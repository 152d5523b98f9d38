/* The C API's version, ISA name, pinned status values and error messages,
 * from C99. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "fedrt/fedrt.h"

static void version_matches_the_build(void) {
  int major = -1, minor = -1, patch = -1;
  char expected[64];
  fedrt_version(&major, &minor, &patch);
  CHECK(major == FEDRT_TEST_VERSION_MAJOR);
  CHECK(minor == FEDRT_TEST_VERSION_MINOR);
  CHECK(patch == FEDRT_TEST_VERSION_PATCH);
  snprintf(expected, sizeof expected, "%d.%d.%d", major, minor, patch);
  CHECK(strcmp(fedrt_version_string(), expected) == 0);
  fedrt_version(NULL, &minor, NULL); /* any argument may be NULL */
  CHECK(minor == FEDRT_TEST_VERSION_MINOR);
}

static void isa_name_is_a_kernel_isa(void) {
  const char* isa = fedrt_isa_name();
  printf("kernel isa: %s\n", isa);
  CHECK(strcmp(isa, "scalar") == 0 || strcmp(isa, "avx2") == 0 || strcmp(isa, "avx512") == 0 ||
        strcmp(isa, "neon") == 0);
  /* The ISA the build's tests must see on this machine (empty: not checked);
   * AVX-512 extends AVX2, so an avx2 expectation accepts it. */
  if (strlen(FEDRT_TEST_EXPECT_ISA) > 0) {
    CHECK(strcmp(isa, FEDRT_TEST_EXPECT_ISA) == 0 ||
          (strcmp(FEDRT_TEST_EXPECT_ISA, "avx2") == 0 && strcmp(isa, "avx512") == 0));
  }
}

static void status_values_are_pinned(void) {
  /* The numbers are part of the API and the wire: this list never changes,
   * it only grows. */
  static const struct {
    fedrt_status status;
    int value;
    const char* name;
  } pinned[] = {
      {FEDRT_OK, 0, "ok"},
      {FEDRT_INVALID_ARGUMENT, 1, "invalid_argument"},
      {FEDRT_OUT_OF_RANGE, 2, "out_of_range"},
      {FEDRT_CORRUPT, 3, "corrupt"},
      {FEDRT_UNSUPPORTED, 4, "unsupported"},
      {FEDRT_NOT_FOUND, 5, "not_found"},
      {FEDRT_IO_ERROR, 6, "io_error"},
      {FEDRT_DEADLINE_EXCEEDED, 7, "deadline_exceeded"},
      {FEDRT_UNAVAILABLE, 8, "unavailable"},
      {FEDRT_UNAUTHENTICATED, 9, "unauthenticated"},
      {FEDRT_RESOURCE_EXHAUSTED, 10, "resource_exhausted"},
      {FEDRT_FAILED_PRECONDITION, 11, "failed_precondition"},
      {FEDRT_INTERNAL, 12, "internal"},
      {FEDRT_CANCELLED, 13, "cancelled"},
  };
  size_t i;
  for (i = 0; i < sizeof pinned / sizeof pinned[0]; ++i) {
    printf("  %s = %d\n", pinned[i].name, pinned[i].value);
    CHECK((int)pinned[i].status == pinned[i].value);
    CHECK(strcmp(fedrt_status_name(pinned[i].status), pinned[i].name) == 0);
  }
}

static void last_error_keeps_the_last_failure(void) {
  fedrt_codec_t* codec = NULL;
  size_t bytes = 0;
  CHECK(strcmp(fedrt_last_error(), "") == 0); /* nothing has failed on this thread yet */
  CHECK_STATUS(fedrt_codec_create("dqgs", &codec), FEDRT_INVALID_ARGUMENT);
  CHECK(codec == NULL);
  printf("  message: %s\n", fedrt_last_error());
  CHECK(strstr(fedrt_last_error(), "invalid_argument: unknown codec 'dqgs'") == fedrt_last_error());
  CHECK(strstr(fedrt_last_error(), "dqsg") != NULL); /* the message lists the known codecs */
  /* A successful call leaves the message alone. */
  CHECK_STATUS(fedrt_model_size("mlp:4-3-2", NULL, 1, &bytes), FEDRT_OK);
  CHECK(strstr(fedrt_last_error(), "unknown codec 'dqgs'") != NULL);
  /* The next failure replaces it. */
  CHECK_STATUS(fedrt_model_size("mlp:4", NULL, 1, &bytes), FEDRT_INVALID_ARGUMENT);
  CHECK(strstr(fedrt_last_error(), "dqgs") == NULL);
  CHECK(strlen(fedrt_last_error()) > 0 && strlen(fedrt_last_error()) < FEDRT_ERROR_MESSAGE_SIZE);
}

static void long_messages_are_truncated_to_the_buffer(void) {
  char spec[600];
  size_t bytes = 0;
  memset(spec, 'x', sizeof spec - 1);
  spec[sizeof spec - 1] = '\0';
  CHECK_STATUS(fedrt_model_size(spec, NULL, 1, &bytes), FEDRT_INVALID_ARGUMENT);
  CHECK(strlen(fedrt_last_error()) == FEDRT_ERROR_MESSAGE_SIZE - 1);
}

int main(void) {
  version_matches_the_build();
  isa_name_is_a_kernel_isa();
  status_values_are_pinned();
  last_error_keeps_the_last_failure();
  long_messages_are_truncated_to_the_buffer();
  return check_finish();
}
