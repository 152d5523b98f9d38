#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fedrt/transport/auth.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/loopback.h"
#include "fedrt/transport/messages.h"

namespace fedrt {
namespace transport {
namespace {

constexpr char kKeys[] =
    "# fleet keys\n"
    "board-1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
    "\n"
    "board-2   ffeeddccbbaa99887766554433221100\n";

Key KeyOf(const KeyStore& store, const char* id) {
  const Key* key = store.Find(id);
  REQUIRE(key != nullptr);
  return *key;
}

KeyStore Fleet() {
  Result<KeyStore> store = KeyStore::Parse(kKeys);
  REQUIRE(store.ok());
  return std::move(*store);
}

// Runs join -> challenge -> authenticate and returns the server's verdict.
Result<JoinResponseMessage> RunJoin(ServerHandshake& server, ClientHandshake& device) {
  Result<JoinMessage> join = device.Start();
  REQUIRE(join.ok());
  Result<ChallengeMessage> challenge = server.OnJoin(*join);
  REQUIRE(challenge.ok());  // unknown devices get a challenge too: no hint
  Result<AuthenticateMessage> auth = device.OnChallenge(*challenge);
  REQUIRE(auth.ok());
  return server.OnAuthenticate(*auth);
}

TEST_CASE("hmac sha256 matches the RFC 4231 test vector") {
  const char* key = "Jefe";
  const char* data = "what do ya want for nothing?";
  std::array<uint8_t, kSha256Bytes> mac{};
  REQUIRE(SystemCrypto()
              .HmacSha256(reinterpret_cast<const uint8_t*>(key), 4, reinterpret_cast<const uint8_t*>(data),
                          std::strlen(data), &mac)
              .ok());
  const uint8_t expected[kSha256Bytes] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24,
                                          0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27,
                                          0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  CHECK(std::memcmp(mac.data(), expected, kSha256Bytes) == 0);
  CHECK(SystemCrypto().ConstantTimeEqual(mac.data(), expected, kSha256Bytes));
  mac[31] ^= 1;
  CHECK_FALSE(SystemCrypto().ConstantTimeEqual(mac.data(), expected, kSha256Bytes));
  // RFC 4231 test case 6: a key longer than SHA-256's block is hashed first.
  const std::vector<uint8_t> long_key(131, 0xaa);
  const char* long_data = "Test Using Larger Than Block-Size Key - Hash Key First";
  REQUIRE(SystemCrypto()
              .HmacSha256(long_key.data(), long_key.size(), reinterpret_cast<const uint8_t*>(long_data),
                          std::strlen(long_data), &mac)
              .ok());
  const uint8_t long_expected[kSha256Bytes] = {0x60, 0xe4, 0x31, 0x59, 0x1e, 0xe0, 0xb6, 0x7f, 0x0d, 0x8a, 0x26,
                                               0xaa, 0xcb, 0xf5, 0xb7, 0x7f, 0x8e, 0x0b, 0xc6, 0x21, 0x37, 0x28,
                                               0xc5, 0x14, 0x05, 0x46, 0x04, 0x0f, 0x0e, 0xe3, 0x7f, 0x54};
  CHECK(std::memcmp(mac.data(), long_expected, kSha256Bytes) == 0);
  // A nonce larger than one getentropy() call.
  std::vector<uint8_t> big_a(600), big_b(600);
  REQUIRE(SystemCrypto().RandomBytes(big_a.data(), big_a.size()).ok());
  REQUIRE(SystemCrypto().RandomBytes(big_b.data(), big_b.size()).ok());
  CHECK(big_a != big_b);
  Nonce a{}, b{};
  REQUIRE(SystemCrypto().RandomBytes(a.data(), a.size()).ok());
  REQUIRE(SystemCrypto().RandomBytes(b.data(), b.size()).ok());
  CHECK(a != b);
}

TEST_CASE("a device with the right key joins and both sides prove the key") {
  const KeyStore fleet = Fleet();
  ServerHandshake server(fleet, SystemCrypto());
  ClientHandshake device("board-1", KeyOf(fleet, "board-1"), SystemCrypto());
  Result<JoinResponseMessage> response = RunJoin(server, device);
  REQUIRE(response.ok());
  CHECK(response->accepted);
  CHECK(server.authenticated());
  CHECK(server.device_id() == "board-1");
  CHECK(device.OnJoinResponse(*response).ok());
}

TEST_CASE("a device with a wrong key is refused") {
  const KeyStore fleet = Fleet();
  ServerHandshake server(fleet, SystemCrypto());
  ClientHandshake device("board-1", KeyOf(fleet, "board-2"), SystemCrypto());
  Result<JoinResponseMessage> response = RunJoin(server, device);
  REQUIRE_FALSE(response.ok());
  CHECK(response.status().code() == StatusCode::kUnauthenticated);
  CHECK_FALSE(server.authenticated());
}

TEST_CASE("an unknown device is refused with the same answer as a wrong key") {
  const KeyStore fleet = Fleet();
  ServerHandshake server(fleet, SystemCrypto());
  ClientHandshake device("board-9", KeyOf(fleet, "board-1"), SystemCrypto());
  Result<JoinResponseMessage> response = RunJoin(server, device);
  REQUIRE_FALSE(response.ok());
  CHECK(response.status().code() == StatusCode::kUnauthenticated);
  CHECK(response.status().message() == "authentication failed");
}

TEST_CASE("a recorded join and proof replayed on a new connection are refused") {
  const KeyStore fleet = Fleet();
  ClientHandshake device("board-2", KeyOf(fleet, "board-2"), SystemCrypto());
  Result<JoinMessage> join = device.Start();
  REQUIRE(join.ok());
  ServerHandshake first(fleet, SystemCrypto());
  Result<ChallengeMessage> challenge = first.OnJoin(*join);
  REQUIRE(challenge.ok());
  Result<AuthenticateMessage> auth = device.OnChallenge(*challenge);
  REQUIRE(auth.ok());
  REQUIRE(first.OnAuthenticate(*auth).ok());

  // An eavesdropper replays both messages to a new connection.
  ServerHandshake second(fleet, SystemCrypto());
  Result<ChallengeMessage> fresh = second.OnJoin(*join);
  REQUIRE(fresh.ok());
  CHECK(fresh->server_nonce != challenge->server_nonce);
  Result<JoinResponseMessage> replayed = second.OnAuthenticate(*auth);
  REQUIRE_FALSE(replayed.ok());
  CHECK(replayed.status().code() == StatusCode::kUnauthenticated);
}

TEST_CASE("a handshake allows one proof attempt and rejects messages out of order") {
  const KeyStore fleet = Fleet();
  ServerHandshake server(fleet, SystemCrypto());
  CHECK(server.OnAuthenticate(AuthenticateMessage{}).status().code() == StatusCode::kFailedPrecondition);
  ServerHandshake again(fleet, SystemCrypto());
  ClientHandshake device("board-1", KeyOf(fleet, "board-1"), SystemCrypto());
  Result<JoinMessage> join = device.Start();
  REQUIRE(join.ok());
  Result<ChallengeMessage> challenge = again.OnJoin(*join);
  REQUIRE(challenge.ok());
  CHECK_FALSE(again.OnAuthenticate(AuthenticateMessage{}).ok());  // wrong guess
  Result<AuthenticateMessage> auth = device.OnChallenge(*challenge);
  REQUIRE(auth.ok());
  CHECK_FALSE(again.OnAuthenticate(*auth).ok());  // no second try
  JoinMessage old = *join;
  old.protocol_version = 0;
  ServerHandshake versioned(fleet, SystemCrypto());
  CHECK(versioned.OnJoin(old).status().code() == StatusCode::kUnsupported);
}

TEST_CASE("a device refuses a server that cannot prove it holds the key") {
  const KeyStore fleet = Fleet();
  ClientHandshake device("board-1", KeyOf(fleet, "board-1"), SystemCrypto());
  Result<JoinMessage> join = device.Start();
  REQUIRE(join.ok());
  Nonce server_nonce{};
  server_nonce.fill(4);
  REQUIRE(device.OnChallenge(ChallengeMessage{server_nonce}).ok());
  JoinResponseMessage fake;
  fake.accepted = true;
  fake.server_proof.fill(0x42);
  CHECK(device.OnJoinResponse(fake).code() == StatusCode::kUnauthenticated);
}

TEST_CASE("key files give ids and hex keys and name the line of a mistake") {
  const KeyStore fleet = Fleet();
  CHECK(fleet.size() == 2);
  CHECK(KeyOf(fleet, "board-1").size() == 32);
  CHECK(KeyOf(fleet, "board-2")[0] == 0xFF);
  CHECK(fleet.Find("board-3") == nullptr);
  CHECK(fleet.SingleDeviceId() == nullptr);

  Result<KeyStore> short_key = KeyStore::Parse("a 0011\n", "f");
  REQUIRE_FALSE(short_key.ok());
  CHECK(short_key.status().message().rfind("f:1:", 0) == 0);
  Result<KeyStore> not_hex = KeyStore::Parse("\n\nb zz0102030405060708090a0b0c0d0e0f\n", "f");
  REQUIRE_FALSE(not_hex.ok());
  CHECK(not_hex.status().message().rfind("f:3:", 0) == 0);
  CHECK_FALSE(KeyStore::Parse("dup 000102030405060708090a0b0c0d0e0f\ndup 000102030405060708090a0b0c0d0e0f\n").ok());
  CHECK_FALSE(KeyStore::Parse("bad/id 000102030405060708090a0b0c0d0e0f\n").ok());
  CHECK_FALSE(KeyStore::Parse("lonely\n").ok());
  Result<KeyStore> one = KeyStore::Parse("solo 000102030405060708090a0b0c0d0e0f");
  REQUIRE(one.ok());
  REQUIRE(one->SingleDeviceId() != nullptr);
  CHECK(*one->SingleDeviceId() == "solo");
}

TEST_CASE("a key file that other users can read is refused") {
  char path[] = "/tmp/fedrt_keys_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, kKeys, sizeof(kKeys) - 1) == static_cast<ssize_t>(sizeof(kKeys) - 1));
  ::close(fd);
  REQUIRE(::chmod(path, 0644) == 0);
  Result<KeyStore> open_to_all = KeyStore::LoadFile(path);
  REQUIRE_FALSE(open_to_all.ok());
  CHECK(open_to_all.status().code() == StatusCode::kFailedPrecondition);
  REQUIRE(::chmod(path, 0600) == 0);
  Result<KeyStore> private_file = KeyStore::LoadFile(path);
  REQUIRE(private_file.ok());
  CHECK(private_file->size() == 2);
  ::unlink(path);
  CHECK(KeyStore::LoadFile(path).status().code() == StatusCode::kNotFound);
}

TEST_CASE("the join handshake runs over a connection as frames") {
  const KeyStore fleet = Fleet();
  EventLoopThread loop;
  auto device_end = std::make_shared<FrameQueue>();
  auto server_end = std::make_shared<FrameQueue>();
  auto ends = MakeLoopbackPair(loop.loop(), device_end, server_end);
  const FrameLimits limits;
  ClientHandshake device("board-2", KeyOf(fleet, "board-2"), SystemCrypto());
  ServerHandshake server(fleet, SystemCrypto());

  Result<JoinMessage> join = device.Start();
  REQUIRE(join.ok());
  join->codecs = {"fp32", "dqsg"};
  join->isa = "avx2";
  REQUIRE(ends.first->Send(*Encode(*join, limits)).ok());
  Result<Frame> join_frame = server_end->Pop(5000);
  REQUIRE(join_frame.ok());
  Result<JoinMessage> received_join = DecodeJoin(*join_frame);
  REQUIRE(received_join.ok());
  CHECK(received_join->codecs.size() == 2);
  Result<ChallengeMessage> challenge = server.OnJoin(*received_join);
  REQUIRE(challenge.ok());
  REQUIRE(ends.second->Send(*Encode(*challenge, limits)).ok());

  Result<Frame> challenge_frame = device_end->Pop(5000);
  REQUIRE(challenge_frame.ok());
  Result<AuthenticateMessage> auth = device.OnChallenge(*DecodeChallenge(*challenge_frame));
  REQUIRE(auth.ok());
  REQUIRE(ends.first->Send(*Encode(*auth, limits)).ok());

  Result<Frame> auth_frame = server_end->Pop(5000);
  REQUIRE(auth_frame.ok());
  Result<JoinResponseMessage> response = server.OnAuthenticate(*DecodeAuthenticate(*auth_frame));
  REQUIRE(response.ok());
  REQUIRE(ends.second->Send(*Encode(*response, limits)).ok());

  Result<Frame> response_frame = device_end->Pop(5000);
  REQUIRE(response_frame.ok());
  CHECK(device.OnJoinResponse(*DecodeJoinResponse(*response_frame)).ok());
  ends.first->Close();
  CHECK(server_end->WaitClosed(5000));
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
