/* A scripted aggregator for one device, in memory, for the C tests of the
 * device client (fedrt_device_t): C functions implemented in C++
 * (scripted_aggregator.cc) on the transport's sans-IO pieces (the join,
 * frames, chunking) and the codecs. It is not fedrt's aggregator: it admits
 * one device, sends it `rounds` rounds of instructions with a model, decodes
 * each update it gets back (the round's codec, the device's sender id) and
 * applies it to the model, then says Leave. A test's send callback hands
 * it the device's bytes and its receive callback reads its answers, so a
 * session runs synchronously on one thread: no sockets, threads or time.
 *
 * Thread-safety: none. */
#ifndef FEDRT_TESTS_CAPI_SCRIPTED_AGGREGATOR_H_
#define FEDRT_TESTS_CAPI_SCRIPTED_AGGREGATOR_H_

#include <stddef.h>
#include <stdint.h>

#include "fedrt/fedrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct scripted_aggregator scripted_aggregator;

typedef struct scripted_aggregator_options {
  const char* device_id;   /* the one device it admits */
  const uint8_t* key;      /* that device's key */
  size_t key_size;
  size_t parameters;       /* the model's parameter count (its start is made up here) */
  const char* codec;       /* what the device is told to send, e.g. "fp32", "dqsg:ef=on" */
  uint32_t rounds;         /* rounds before the Leave */
  uint32_t local_steps;    /* per round (0: a whole epoch) */
  float learning_rate;
  /* Non-zero: the join uses the system's HMAC (builds with OpenSSL); 0: the
   * toy MAC of toy_hmac_sha256, which the device must use too. */
  int system_crypto;
  /* Non-zero: the stream ends right after the first completed join (a lost
   * link); scripted_aggregator_reconnect opens the next one. */
  int close_after_join;
  /* Non-zero: the aggregator never answers (a join that times out). */
  int silent;
} scripted_aggregator_options;

scripted_aggregator* scripted_aggregator_create(const scripted_aggregator_options* options);
void scripted_aggregator_destroy(scripted_aggregator* aggregator);

/* Bytes the device sent (its send callback). FEDRT_UNAVAILABLE once this
 * side has closed the stream. */
fedrt_status scripted_aggregator_write(scripted_aggregator* aggregator, const uint8_t* data, size_t size);
/* Up to `capacity` bytes for the device (its receive callback); *size 0 when
 * there are none. FEDRT_UNAVAILABLE when this side closed the stream and all
 * was read. */
fedrt_status scripted_aggregator_read(scripted_aggregator* aggregator, uint8_t* buffer, size_t capacity, size_t* size);
/* A new connection: the join starts over; the rounds go on where they were. */
void scripted_aggregator_reconnect(scripted_aggregator* aggregator);

/* Joins completed, updates decoded and applied, Error frames the device sent. */
uint32_t scripted_aggregator_joins(const scripted_aggregator* aggregator);
uint32_t scripted_aggregator_updates(const scripted_aggregator* aggregator);
uint32_t scripted_aggregator_device_errors(const scripted_aggregator* aggregator);
/* The training loss the first and the last update reported. */
float scripted_aggregator_first_loss(const scripted_aggregator* aggregator);
float scripted_aggregator_last_loss(const scripted_aggregator* aggregator);
/* What went wrong on this side ("" when nothing did). */
const char* scripted_aggregator_failure(const scripted_aggregator* aggregator);

/* A stand-in for HMAC-SHA256 that is NOT cryptography (a keyed FNV-1a
 * spread over 32 bytes): enough for both ends of a test to agree, and for a
 * wrong key to fail the join. The signature of
 * fedrt_device_callbacks.hmac_sha256; `user` is ignored. */
fedrt_status toy_hmac_sha256(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                             size_t message_size, uint8_t* mac);

#ifdef __cplusplus
}
#endif

#endif /* FEDRT_TESTS_CAPI_SCRIPTED_AGGREGATOR_H_ */
