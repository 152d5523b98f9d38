/* fedrt's star aggregator engine (fedrt/runtime/aggregator_engine.h) in
 * memory, for the C tests of the device client (fedrt_device_t): C
 * functions implemented in C++ (test_aggregator.cc). The aggregator serves
 * one connection at a time, a StreamConnection whose bytes a test's send
 * and receive callbacks move, on a manual clock that moves only when the
 * device waits for bytes. So a session runs synchronously on one thread: no
 * sockets, threads or wall-clock time. Faults are cut into the stream: the
 * link dropped right after the join, or an aggregator that never answers.
 *
 * Thread-safety: none. */
#ifndef FEDRT_TESTS_CAPI_TEST_AGGREGATOR_H_
#define FEDRT_TESTS_CAPI_TEST_AGGREGATOR_H_

#include <stddef.h>
#include <stdint.h>

#include "fedrt/fedrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct test_aggregator test_aggregator;

typedef struct test_aggregator_options {
  const char* device_id;   /* the device in its key store */
  const uint8_t* key;      /* that device's key */
  size_t key_size;
  const char* model;       /* the aggregator's model spec (its seed: 1) */
  const char* codec;       /* what the devices send, e.g. "fp32", "dqsg:ef=on" */
  uint32_t rounds;
  uint32_t local_steps;    /* per round (0: a whole epoch) */
  float learning_rate;
  /* Non-zero: the stream is cut right after the first completed join (a lost
   * link); test_aggregator_reconnect opens the next one. */
  int close_after_join;
  /* Non-zero: nothing the device sends reaches the aggregator and it never
   * answers (a join that times out). */
  int silent;
} test_aggregator_options;

/* NULL when the aggregator cannot be made (the message on stderr). */
test_aggregator* test_aggregator_create(const test_aggregator_options* options);
void test_aggregator_destroy(test_aggregator* aggregator);

/* Bytes the device sent (its send callback). FEDRT_UNAVAILABLE once the
 * stream is closed. */
fedrt_status test_aggregator_write(test_aggregator* aggregator, const uint8_t* data, size_t size);
/* Runs the aggregator's timers, then gives up to `capacity` bytes for the
 * device (its receive callback); *size 0 when there are none.
 * FEDRT_UNAVAILABLE when the stream closed and all was read. */
fedrt_status test_aggregator_read(test_aggregator* aggregator, uint8_t* buffer, size_t capacity, size_t* size);
/* A new connection to the same aggregator (the device reconnects). */
void test_aggregator_reconnect(test_aggregator* aggregator);

/* The manual clock both sides read (milliseconds), and moving it on. */
uint64_t test_aggregator_now_ms(const test_aggregator* aggregator);
void test_aggregator_wait(test_aggregator* aggregator, uint32_t ms);

/* Rounds completed and updates aggregated in them; non-zero once it told the
 * devices to leave. */
uint32_t test_aggregator_rounds(const test_aggregator* aggregator);
uint32_t test_aggregator_updates(const test_aggregator* aggregator);
int test_aggregator_finished(const test_aggregator* aggregator);
/* The training loss the devices reported in the first and the last round. */
double test_aggregator_first_loss(const test_aggregator* aggregator);
double test_aggregator_last_loss(const test_aggregator* aggregator);

/* The HMAC-SHA256 the aggregator's join uses (the tests' Crypto:
 * libcrypto's where the build has it, a stand-in that is not cryptography
 * otherwise), with the signature of fedrt_device_callbacks.hmac_sha256. */
fedrt_status test_hmac_sha256(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                              size_t message_size, uint8_t* mac);

#ifdef __cplusplus
}
#endif

#endif /* FEDRT_TESTS_CAPI_TEST_AGGREGATOR_H_ */
