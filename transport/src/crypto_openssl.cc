// SystemCrypto(): the Crypto interface on libcrypto (OpenSSL 3).
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <climits>

#include "fedrt/transport/crypto.h"

namespace fedrt {
namespace transport {
namespace {

class OpenSslCrypto final : public Crypto {
 public:
  Status RandomBytes(uint8_t* out, std::size_t size) override {
    if (size > INT_MAX || RAND_bytes(out, static_cast<int>(size)) != 1) {
      return Status(StatusCode::kInternal, "RAND_bytes failed");
    }
    return Status::Ok();
  }

  Status HmacSha256(const uint8_t* key, std::size_t key_size, const uint8_t* message, std::size_t message_size,
                    std::array<uint8_t, kSha256Bytes>* mac) override {
    if (key_size > INT_MAX) return InvalidArgument("HMAC key too long");
    unsigned int length = 0;
    if (HMAC(EVP_sha256(), key, static_cast<int>(key_size), message, message_size, mac->data(), &length) ==
            nullptr ||
        length != kSha256Bytes) {
      return Status(StatusCode::kInternal, "HMAC-SHA256 failed");
    }
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
