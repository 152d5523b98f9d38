// What the fuzz targets and their seed generator (make_seeds.cc) share: a
// deterministic Crypto for the join, the input layouts that both sides must
// agree on, and the checksum fix-ups that let mutations get past a CRC.
//
// Thread-safety: none needed (libFuzzer runs one input at a time).
#ifndef FEDRT_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define FEDRT_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/codecs/payload.h"
#include "fedrt/platform/status.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/frame.h"

namespace fedrt::fuzz {

// The join fuzzer's device and key. The seed generator records a join of
// this device with FixedCrypto, so the recorded proofs are the right ones
// for the nonces the fuzzer's FixedCrypto draws: mutations of a seed then
// reach the states after the proof.
inline constexpr char kJoinDevice[] = "dev-1";
inline constexpr char kJoinKeyHex[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

// Random bytes that are the same on every call (a fixed pattern), HMAC and
// constant-time comparison from the system's libcrypto. Only for fuzzing:
// the join's nonces must be unpredictable in real use.
class FixedCrypto final : public transport::Crypto {
 public:
  Status RandomBytes(uint8_t* out, std::size_t size) override {
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<uint8_t>(0xA5 ^ (i * 29));
    return Status::Ok();
  }
  Status HmacSha256(const uint8_t* key, std::size_t key_size, const uint8_t* message, std::size_t message_size,
                    std::array<uint8_t, transport::kSha256Bytes>* mac) override {
    return transport::SystemCrypto().HmacSha256(key, key_size, message, message_size, mac);
  }
  bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, std::size_t size) override {
    return transport::SystemCrypto().ConstantTimeEqual(a, b, size);
  }
};

// The join fuzzer's input: one side byte (bit 0: 0 the server's JoinServer,
// 1 the client's JoinClient), then frames as a socket delivers them, each a
// 4-byte little-endian body size and the body.
inline constexpr uint8_t kJoinServerSide = 0;
inline constexpr uint8_t kJoinClientSide = 1;

// The checkpoint fuzzer's input: one selector byte, then a file's bytes.
// Selector bits 0-1 pick the reader; bit 7 set: the trailing CRC-32C of the
// file is recomputed first (FixCrc32cTrailer), so mutations reach the fields.
enum class CheckpointReader : uint8_t { kModel = 0, kAggregator = 1, kDeviceState = 2 };
inline constexpr uint8_t kFixCrcBit = 0x80;
// The device state fuzzer reads residuals of this many values (the seeds' d).
inline constexpr std::size_t kDeviceStateValues = 37;

// The npy fuzzer's input: one selector byte, then a file's bytes. Bits 0-1:
// 0 .npy, 1 .npz, 2 a model .npz loaded into kNpyModelSpec.
enum class NpyReader : uint8_t { kNpy = 0, kNpz = 1, kModelNpz = 2 };
inline constexpr char kNpyModelSpec[] = "mlp:6-5-3";

// Stores the CRC-32C of bytes [0, size - 4) in the last four bytes (the
// persistence helper's and the model checkpoint's trailer).
inline void FixCrc32cTrailer(std::vector<uint8_t>& bytes) {
  if (bytes.size() < 4) return;
  StoreLe32(bytes.data() + bytes.size() - 4, Crc32c(bytes.data(), bytes.size() - 4));
}

}  // namespace fedrt::fuzz

#endif  // FEDRT_TESTS_FUZZ_FUZZ_SUPPORT_H_
