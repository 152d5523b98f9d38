/* SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) in portable C99: the
 * example port's implementation of the join's MAC, for builds of fedrt
 * without OpenSSL (the core preset, firmware). examples/03_embed.cc hands it
 * to the engines through transport::Crypto, examples/02_c_device.c through
 * fedrt_device_callbacks.hmac_sha256; a firmware port may reuse it where its
 * platform offers nothing better (mbedTLS, a secure element).
 *
 * It is a straightforward reference implementation, checked against the
 * test vectors of RFC 4231 (tests/examples/hmac_sha256_test.cc): not
 * hardened against side channels beyond what the MAC's use needs (no
 * secret-dependent branches or table lookups), and no faster than it needs
 * to be for a handshake.
 *
 * Memory: every call works in the caller's memory (the context below, on
 * the stack); nothing is allocated. Thread-safety: no shared state; a
 * context is used by one thread at a time.
 */
#ifndef FEDRT_EXAMPLES_PORT_HMAC_SHA256_H_
#define FEDRT_EXAMPLES_PORT_HMAC_SHA256_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PORT_SHA256_BYTES 32
#define PORT_SHA256_BLOCK_BYTES 64

/* An incremental SHA-256: init, update any number of times, final. */
typedef struct port_sha256 {
  uint32_t state[8];
  uint64_t length; /* bytes hashed so far */
  uint8_t block[PORT_SHA256_BLOCK_BYTES];
  size_t filled; /* bytes in block */
} port_sha256;

void port_sha256_init(port_sha256* ctx);
void port_sha256_update(port_sha256* ctx, const uint8_t* data, size_t size);
/* Writes the digest (PORT_SHA256_BYTES) and wipes the context. */
void port_sha256_final(port_sha256* ctx, uint8_t digest[PORT_SHA256_BYTES]);

/* HMAC-SHA256 of message[0 .. message_size) under key[0 .. key_size) (any
 * length: a key longer than a block is hashed first) into mac. */
void port_hmac_sha256(const uint8_t* key, size_t key_size, const uint8_t* message, size_t message_size,
                      uint8_t mac[PORT_SHA256_BYTES]);

#ifdef __cplusplus
}
#endif

#endif /* FEDRT_EXAMPLES_PORT_HMAC_SHA256_H_ */
