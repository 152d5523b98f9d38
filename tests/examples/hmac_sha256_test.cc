// The example port's SHA-256 and HMAC-SHA256 (examples/port/hmac_sha256.h)
// against the test vectors of FIPS 180-2 (SHA-256) and RFC 4231 (HMAC), and
// against libcrypto's HMAC where the build has it.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fedrt/platform/config.h"
#include "port/hmac_sha256.h"
#if FEDRT_HAVE_OPENSSL
#include "fedrt/transport/crypto.h"
#endif

namespace {

std::string Hex(const uint8_t* bytes, std::size_t size) {
  std::string out;
  char two[3];
  for (std::size_t i = 0; i < size; ++i) {
    std::snprintf(two, sizeof two, "%02x", bytes[i]);
    out += two;
  }
  return out;
}

std::vector<uint8_t> Bytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

std::string Sha256Hex(const std::vector<uint8_t>& message) {
  port_sha256 ctx;
  port_sha256_init(&ctx);
  port_sha256_update(&ctx, message.data(), message.size());
  uint8_t digest[PORT_SHA256_BYTES];
  port_sha256_final(&ctx, digest);
  return Hex(digest, sizeof digest);
}

std::string HmacHex(const std::vector<uint8_t>& key, const std::vector<uint8_t>& message) {
  uint8_t mac[PORT_SHA256_BYTES];
  port_hmac_sha256(key.data(), key.size(), message.data(), message.size(), mac);
  return Hex(mac, sizeof mac);
}

TEST_CASE("port SHA-256 gives the FIPS 180-2 digests, across block boundaries and in pieces") {
  CHECK(Sha256Hex({}) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256Hex(Bytes("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the padding needs a second block.
  CHECK(Sha256Hex(Bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // A million 'a', fed in uneven pieces.
  const std::vector<uint8_t> a(1000000, 'a');
  port_sha256 ctx;
  port_sha256_init(&ctx);
  std::size_t at = 0;
  for (std::size_t piece = 1; at < a.size(); piece = piece * 7 % 1021 + 1) {
    const std::size_t take = std::min(piece, a.size() - at);
    port_sha256_update(&ctx, a.data() + at, take);
    at += take;
  }
  uint8_t digest[PORT_SHA256_BYTES];
  port_sha256_final(&ctx, digest);
  CHECK(Hex(digest, sizeof digest) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("port HMAC-SHA256 gives the RFC 4231 test cases 1 to 7") {
  std::vector<uint8_t> key4;
  for (uint8_t b = 1; b <= 25; ++b) key4.push_back(b);
  const std::vector<uint8_t> long_key(131, 0xaa);
  CHECK(HmacHex(std::vector<uint8_t>(20, 0x0b), Bytes("Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(HmacHex(Bytes("Jefe"), Bytes("what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(HmacHex(std::vector<uint8_t>(20, 0xaa), std::vector<uint8_t>(50, 0xdd)) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  CHECK(HmacHex(key4, std::vector<uint8_t>(50, 0xcd)) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 5 gives the first 128 bits only.
  CHECK(HmacHex(std::vector<uint8_t>(20, 0x0c), Bytes("Test With Truncation")).substr(0, 32) ==
        "a3b6167473100ee06e0c796c2955552b");
  CHECK(HmacHex(long_key, Bytes("Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(HmacHex(long_key, Bytes("This is a test using a larger than block-size key and a larger than block-size "
                                "data. The key needs to be hashed before being used by the HMAC algorithm.")) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

#if FEDRT_HAVE_OPENSSL
TEST_CASE("port HMAC-SHA256 equals libcrypto's for every key and message length around the block size") {
  fedrt::transport::Crypto& crypto = fedrt::transport::SystemCrypto();
  uint32_t x = 12345;
  const auto next = [&x] { return static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 24); };
  for (std::size_t key_size : {1u, 16u, 32u, 63u, 64u, 65u, 128u}) {
    for (std::size_t size = 0; size <= 200; ++size) {
      std::vector<uint8_t> key(key_size), message(size);
      for (uint8_t& b : key) b = next();
      for (uint8_t& b : message) b = next();
      std::array<uint8_t, fedrt::transport::kSha256Bytes> expected{};
      REQUIRE(crypto.HmacSha256(key.data(), key.size(), message.data(), message.size(), &expected).ok());
      INFO("key ", key_size, " bytes, message ", size, " bytes");
      CHECK(HmacHex(key, message) == Hex(expected.data(), expected.size()));
    }
  }
}
#endif

}  // namespace
