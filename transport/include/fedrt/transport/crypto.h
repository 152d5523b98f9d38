// The cryptographic primitives the join handshake needs, behind a small
// interface so that a firmware build can plug in its platform's library
// (mbedTLS, a secure element) instead of OpenSSL. Linux builds, cross builds
// included, use SystemCrypto() (libcrypto from Debian's OpenSSL, and the
// kernel's entropy): fedrt implements no hash or cipher itself; it composes
// HMAC (RFC 2104, a dozen lines) around libcrypto's SHA-256.
//
// Thread-safety: implementations must be safe to call from any thread;
// SystemCrypto() is.
#ifndef FEDRT_TRANSPORT_CRYPTO_H_
#define FEDRT_TRANSPORT_CRYPTO_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "fedrt/platform/config.h"
#include "fedrt/platform/status.h"

namespace fedrt {
namespace transport {

inline constexpr std::size_t kSha256Bytes = 32;

class Crypto {
 public:
  virtual ~Crypto() = default;
  // Cryptographically secure random bytes (nonces).
  virtual Status RandomBytes(uint8_t* out, std::size_t size) = 0;
  // HMAC-SHA256 of `message` under `key`.
  virtual Status HmacSha256(const uint8_t* key, std::size_t key_size, const uint8_t* message,
                            std::size_t message_size, std::array<uint8_t, kSha256Bytes>* mac) = 0;
  // Equality in time independent of the contents (MAC comparison).
  virtual bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, std::size_t size) = 0;
};

#if FEDRT_HAVE_OPENSSL
// getentropy() for nonces, HMAC around libcrypto's SHA256_Init/Update/Final
// and CRYPTO_memcmp (not OpenSSL 3's EVP layer, whose first use loads its
// default provider: about 2 MiB resident, crypto_openssl.cc). Only in builds
// with FEDRT_WITH_OPENSSL; without it the application passes its own Crypto.
Crypto& SystemCrypto();
#endif

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_CRYPTO_H_
