// The example port's transport::Crypto (transport/crypto.h), for builds of
// fedrt without OpenSSL: HMAC-SHA256 from hmac_sha256.c (portable C99),
// random bytes from std::random_device (the kernel's randomness on Linux; a
// firmware port reads its TRNG instead), a constant-time compare.
// examples/03_embed.cc uses it, and so do the tests of builds without
// libcrypto (tests/transport/test_crypto.h).
//
// Ownership: nothing held. Thread-safety: every call may run on any thread
// (a random device is made for each call: nonces are drawn once per join).
#ifndef FEDRT_EXAMPLES_PORT_PORT_CRYPTO_H_
#define FEDRT_EXAMPLES_PORT_PORT_CRYPTO_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>

#include "fedrt/platform/status.h"
#include "fedrt/transport/crypto.h"
#include "port/hmac_sha256.h"

namespace fedrt_example {

class PortCrypto final : public fedrt::transport::Crypto {
 public:
  fedrt::Status RandomBytes(uint8_t* out, std::size_t size) override {
    std::random_device device;
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<uint8_t>(device());
    return fedrt::Status::Ok();
  }
  fedrt::Status HmacSha256(const uint8_t* key, std::size_t key_size, const uint8_t* message,
                           std::size_t message_size,
                           std::array<uint8_t, fedrt::transport::kSha256Bytes>* mac) override {
    port_hmac_sha256(key, key_size, message, message_size, mac->data());
    return fedrt::Status::Ok();
  }
  bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, std::size_t size) override {
    uint8_t diff = 0;
    for (std::size_t i = 0; i < size; ++i) diff = static_cast<uint8_t>(diff | (a[i] ^ b[i]));
    return diff == 0;
  }
};

}  // namespace fedrt_example

#endif  // FEDRT_EXAMPLES_PORT_PORT_CRYPTO_H_
