/* SHA-256 (FIPS 180-4, section 6.2) and HMAC (RFC 2104) over it; contract
 * in hmac_sha256.h. Words are read and written big-endian byte by byte, so
 * the code is independent of the host's byte order and alignment. */
#include "hmac_sha256.h"

#include <string.h>

static const uint32_t kRoundConstants[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};

static uint32_t Rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32u - n)); }

static void Compress(uint32_t state[8], const uint8_t block[PORT_SHA256_BLOCK_BYTES]) {
  uint32_t w[64];
  uint32_t a, b, c, d, e, f, g, h;
  int t;
  for (t = 0; t < 16; ++t) {
    w[t] = (uint32_t)block[4 * t] << 24 | (uint32_t)block[4 * t + 1] << 16 | (uint32_t)block[4 * t + 2] << 8 |
           (uint32_t)block[4 * t + 3];
  }
  for (t = 16; t < 64; ++t) {
    const uint32_t s0 = Rotr(w[t - 15], 7) ^ Rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = Rotr(w[t - 2], 17) ^ Rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  a = state[0];
  b = state[1];
  c = state[2];
  d = state[3];
  e = state[4];
  f = state[5];
  g = state[6];
  h = state[7];
  for (t = 0; t < 64; ++t) {
    const uint32_t s1 = Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25);
    const uint32_t choose = (e & f) ^ (~e & g);
    const uint32_t t1 = h + s1 + choose + kRoundConstants[t] + w[t];
    const uint32_t s0 = Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22);
    const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = s0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

void port_sha256_init(port_sha256* ctx) {
  static const uint32_t kInitial[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                       0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
  memcpy(ctx->state, kInitial, sizeof kInitial);
  ctx->length = 0;
  ctx->filled = 0;
}

void port_sha256_update(port_sha256* ctx, const uint8_t* data, size_t size) {
  ctx->length += size;
  while (size > 0) {
    size_t take = PORT_SHA256_BLOCK_BYTES - ctx->filled;
    if (take > size) take = size;
    memcpy(ctx->block + ctx->filled, data, take);
    ctx->filled += take;
    data += take;
    size -= take;
    if (ctx->filled == PORT_SHA256_BLOCK_BYTES) {
      Compress(ctx->state, ctx->block);
      ctx->filled = 0;
    }
  }
}

void port_sha256_final(port_sha256* ctx, uint8_t digest[PORT_SHA256_BYTES]) {
  /* Padding: 0x80, zeros up to 56 bytes into a block, the length in bits
   * as 8 bytes big-endian. */
  const uint64_t bits = ctx->length * 8u;
  int i;
  ctx->block[ctx->filled++] = 0x80;
  if (ctx->filled > PORT_SHA256_BLOCK_BYTES - 8) {
    memset(ctx->block + ctx->filled, 0, PORT_SHA256_BLOCK_BYTES - ctx->filled);
    Compress(ctx->state, ctx->block);
    ctx->filled = 0;
  }
  memset(ctx->block + ctx->filled, 0, PORT_SHA256_BLOCK_BYTES - 8 - ctx->filled);
  for (i = 0; i < 8; ++i) ctx->block[PORT_SHA256_BLOCK_BYTES - 1 - i] = (uint8_t)(bits >> (8 * i));
  Compress(ctx->state, ctx->block);
  for (i = 0; i < 8; ++i) {
    digest[4 * i] = (uint8_t)(ctx->state[i] >> 24);
    digest[4 * i + 1] = (uint8_t)(ctx->state[i] >> 16);
    digest[4 * i + 2] = (uint8_t)(ctx->state[i] >> 8);
    digest[4 * i + 3] = (uint8_t)ctx->state[i];
  }
  memset(ctx, 0, sizeof *ctx);
}

void port_hmac_sha256(const uint8_t* key, size_t key_size, const uint8_t* message, size_t message_size,
                      uint8_t mac[PORT_SHA256_BYTES]) {
  /* K0: the key, hashed when longer than a block, zero-padded to a block. */
  uint8_t k0[PORT_SHA256_BLOCK_BYTES];
  uint8_t pad[PORT_SHA256_BLOCK_BYTES];
  uint8_t inner[PORT_SHA256_BYTES];
  port_sha256 ctx;
  size_t i;
  memset(k0, 0, sizeof k0);
  if (key_size > PORT_SHA256_BLOCK_BYTES) {
    port_sha256_init(&ctx);
    port_sha256_update(&ctx, key, key_size);
    port_sha256_final(&ctx, k0);
  } else if (key_size > 0) {
    memcpy(k0, key, key_size);
  }
  /* inner = H((K0 ^ ipad) || message), mac = H((K0 ^ opad) || inner). */
  for (i = 0; i < sizeof pad; ++i) pad[i] = (uint8_t)(k0[i] ^ 0x36u);
  port_sha256_init(&ctx);
  port_sha256_update(&ctx, pad, sizeof pad);
  port_sha256_update(&ctx, message, message_size);
  port_sha256_final(&ctx, inner);
  for (i = 0; i < sizeof pad; ++i) pad[i] = (uint8_t)(k0[i] ^ 0x5cu);
  port_sha256_init(&ctx);
  port_sha256_update(&ctx, pad, sizeof pad);
  port_sha256_update(&ctx, inner, sizeof inner);
  port_sha256_final(&ctx, mac);
  /* The key's traces do not outlive the call. */
  memset(k0, 0, sizeof k0);
  memset(pad, 0, sizeof pad);
  memset(inner, 0, sizeof inner);
}
