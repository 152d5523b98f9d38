// SystemCrypto(): the Crypto interface on libcrypto (OpenSSL 1.1 or 3) and
// the kernel's entropy.
//
// HMAC-SHA256 (RFC 2104) is built here on libcrypto's SHA-256, and nonces
// come from getentropy(), rather than through OpenSSL 3's EVP layer (HMAC(),
// RAND_bytes()): the first EVP call loads OpenSSL's default provider, about
// 2 MiB of resident memory, for a `fedrt device` that makes three MACs and
// draws one nonce per join (docs/design/star.md, "Device"). The MACs are the
// same bytes (RFC 4231's vectors in tests/transport/auth_test.cc). TLS, when
// configured, uses OpenSSL as it is.
#define OPENSSL_SUPPRESS_DEPRECATED  // SHA256_Init & co.: deprecated in OpenSSL 3.0, not removed
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "fedrt/transport/crypto.h"

namespace fedrt {
namespace transport {
namespace {

constexpr std::size_t kSha256BlockBytes = 64;

class OpenSslCrypto final : public Crypto {
 public:
  Status RandomBytes(uint8_t* out, std::size_t size) override {
    while (size > 0) {
      const std::size_t n = std::min<std::size_t>(size, 256);  // getentropy's most per call
      if (getentropy(out, n) != 0) return Status(StatusCode::kInternal, "getentropy failed");
      out += n;
      size -= n;
    }
    return Status::Ok();
  }

  Status HmacSha256(const uint8_t* key, std::size_t key_size, const uint8_t* message, std::size_t message_size,
                    std::array<uint8_t, kSha256Bytes>* mac) override {
    // K0: the key, hashed first when longer than a block, padded with zeros.
    uint8_t k0[kSha256BlockBytes] = {};
    uint8_t pad[kSha256BlockBytes];
    uint8_t inner[kSha256Bytes];
    bool ok = true;
    SHA256_CTX ctx;
    if (key_size > kSha256BlockBytes) {
      ok = SHA256_Init(&ctx) == 1 && SHA256_Update(&ctx, key, key_size) == 1 && SHA256_Final(k0, &ctx) == 1;
    } else if (key_size > 0) {
      std::memcpy(k0, key, key_size);
    }
    // H((K0 ^ ipad) || message), then H((K0 ^ opad) || inner).
    for (std::size_t i = 0; i < kSha256BlockBytes; ++i) pad[i] = k0[i] ^ 0x36;
    ok = ok && SHA256_Init(&ctx) == 1 && SHA256_Update(&ctx, pad, sizeof(pad)) == 1 &&
         SHA256_Update(&ctx, message, message_size) == 1 && SHA256_Final(inner, &ctx) == 1;
    for (std::size_t i = 0; i < kSha256BlockBytes; ++i) pad[i] = k0[i] ^ 0x5c;
    ok = ok && SHA256_Init(&ctx) == 1 && SHA256_Update(&ctx, pad, sizeof(pad)) == 1 &&
         SHA256_Update(&ctx, inner, sizeof(inner)) == 1 && SHA256_Final(mac->data(), &ctx) == 1;
    OPENSSL_cleanse(k0, sizeof(k0));
    OPENSSL_cleanse(pad, sizeof(pad));
    OPENSSL_cleanse(inner, sizeof(inner));
    OPENSSL_cleanse(&ctx, sizeof(ctx));
    if (!ok) return Status(StatusCode::kInternal, "HMAC-SHA256 failed");
    return Status::Ok();
  }

  bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, std::size_t size) override {
    return CRYPTO_memcmp(a, b, size) == 0;
  }
};

}  // namespace

Crypto& SystemCrypto() {
  static OpenSslCrypto crypto;
  return crypto;
}

}  // namespace transport
}  // namespace fedrt
