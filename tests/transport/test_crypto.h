// The Crypto tests hand to the join and the engines: libcrypto's
// (SystemCrypto) where the build has it, otherwise a stand-in, as a firmware
// application would supply its own.
#ifndef FEDRT_TESTS_TRANSPORT_TEST_CRYPTO_H_
#define FEDRT_TESTS_TRANSPORT_TEST_CRYPTO_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "fedrt/platform/config.h"
#include "fedrt/platform/status.h"
#include "fedrt/transport/crypto.h"

namespace fedrt {
namespace transport {

#if FEDRT_HAVE_OPENSSL
inline Crypto& TestCrypto() { return SystemCrypto(); }
#else
// Without libcrypto the application supplies the primitives. This stand-in
// is NOT cryptography: a keyed FNV-1a spread over 32 bytes, enough to show
// that the join runs on whatever Crypto it is given and that a wrong key
// fails at the proof.
class ToyCrypto final : public Crypto {
 public:
  Status RandomBytes(uint8_t* out, std::size_t size) override {
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<uint8_t>((state_ = state_ * 6364136223846793005u + 1442695040888963407u) >> 56);
    return Status::Ok();
  }
  Status HmacSha256(const uint8_t* key, std::size_t key_size, const uint8_t* message, std::size_t message_size,
                    std::array<uint8_t, kSha256Bytes>* mac) override {
    for (std::size_t lane = 0; lane < kSha256Bytes; ++lane) {
      uint32_t h = 2166136261u ^ static_cast<uint32_t>(lane);
      for (std::size_t i = 0; i < key_size; ++i) h = (h ^ key[i]) * 16777619u;
      for (std::size_t i = 0; i < message_size; ++i) h = (h ^ message[i]) * 16777619u;
      (*mac)[lane] = static_cast<uint8_t>(h >> 24);
    }
    return Status::Ok();
  }
  bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, std::size_t size) override {
    uint8_t diff = 0;
    for (std::size_t i = 0; i < size; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
    return diff == 0;
  }

 private:
  uint64_t state_ = 1;
};
inline Crypto& TestCrypto() {
  static ToyCrypto crypto;
  return crypto;
}
#endif

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TESTS_TRANSPORT_TEST_CRYPTO_H_
