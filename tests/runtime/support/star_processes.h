// Helpers for star integration tests that run the real `fedrt` tool:
// ChildProcess (child_process.h) starts `fedrt serve` / `fedrt device`, and
// BlockingStarClient is a hand-driven device on a plain blocking socket that
// joins like a real one and then sends whatever bytes a test wants.
//
// Thread-safety: none; each object belongs to one test thread.
#ifndef FEDRT_TESTS_SUPPORT_STAR_PROCESSES_H_
#define FEDRT_TESTS_SUPPORT_STAR_PROCESSES_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "child_process.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/frame.h"
#include "fedrt/transport/messages.h"

namespace fedrt::testing {

// The port in "listening on port N" of a `fedrt serve` process, or 0.
inline uint16_t ListeningPort(ChildProcess& serve) {
  return static_cast<uint16_t>(std::atoi(serve.WaitForLine("listening on port ").c_str()));
}

// What a round's instructions carried (all chunks reassembled).
struct ReceivedRound {
  uint64_t round = 0;
  std::string codec_spec;
  uint64_t session_seed = 0;
  std::vector<uint8_t> model;  // the fp32 global model's bytes
};

class BlockingStarClient {
 public:
  BlockingStarClient() = default;
  BlockingStarClient(const BlockingStarClient&) = delete;
  BlockingStarClient& operator=(const BlockingStarClient&) = delete;
  ~BlockingStarClient() { Close(); }

  // Connects to 127.0.0.1:port; every later read gives up after timeout_s.
  bool Connect(uint16_t port, int timeout_s = 120) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return false;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval timeout{timeout_s, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    return ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

  Status SendBytes(const void* data, std::size_t size) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
      const ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL);
      if (n <= 0) return Status(StatusCode::kUnavailable, std::string("send: ") + std::strerror(errno));
      p += n;
      size -= static_cast<std::size_t>(n);
    }
    return Status();
  }

  Status Send(const Result<transport::OutFrame>& frame) {
    if (!frame.ok()) return frame.status();
    FEDRT_RETURN_IF_ERROR(SendBytes(frame->prefix(), transport::kFramePrefixBytes));
    return SendBytes(frame->body(), frame->body_size());
  }

  // The next frame that is not a heartbeat. kUnavailable when the server
  // closed the stream, kDeadlineExceeded when nothing came in time.
  Result<transport::Frame> Read() {
    for (;;) {
      std::vector<uint8_t> wire(transport::kFramePrefixBytes);
      FEDRT_RETURN_IF_ERROR(ReadExactly(wire.data(), wire.size()));
      Result<uint32_t> size = transport::ParseFramePrefix(wire.data(), limits_);
      if (!size.ok()) return size.status();
      wire.resize(transport::kFramePrefixBytes + *size);
      FEDRT_RETURN_IF_ERROR(ReadExactly(wire.data() + transport::kFramePrefixBytes, *size));
      Result<transport::Frame> frame = transport::ParseFrame(wire.data(), wire.size(), limits_);
      if (!frame.ok() || frame->kind() != transport::MessageKind::kHeartbeat) return frame;
    }
  }

  // The join handshake with the device's key (hex); OK once accepted.
  Status Join(const std::string& id, const std::string& hex_key) {
    Result<transport::KeyStore> keys = transport::KeyStore::Parse(id + " " + hex_key + "\n");
    if (!keys.ok()) return keys.status();
    transport::ClientHandshake handshake(id, *keys->Find(id), transport::SystemCrypto());
    Result<transport::JoinMessage> join = handshake.Start();
    if (!join.ok()) return join.status();
    FEDRT_RETURN_IF_ERROR(Send(transport::Encode(*join, limits_)));
    Result<transport::Frame> frame = Read();
    if (!frame.ok()) return frame.status();
    Result<transport::ChallengeMessage> challenge = transport::DecodeChallenge(*frame);
    if (!challenge.ok()) return challenge.status();
    Result<transport::AuthenticateMessage> proof = handshake.OnChallenge(*challenge);
    if (!proof.ok()) return proof.status();
    FEDRT_RETURN_IF_ERROR(Send(transport::Encode(*proof, limits_)));
    frame = Read();
    if (!frame.ok()) return frame.status();
    Result<transport::JoinResponseMessage> response = transport::DecodeJoinResponse(*frame);
    if (!response.ok()) return response.status();
    return handshake.OnJoinResponse(*response);
  }

  // Waits for the next round's instructions and reassembles its model.
  Result<ReceivedRound> AwaitRound() {
    ReceivedRound round;
    for (;;) {
      Result<transport::Frame> frame = Read();
      if (!frame.ok()) return frame.status();
      if (frame->kind() != transport::MessageKind::kRoundInstructions) continue;
      Result<transport::RoundInstructionsMessage> m = transport::DecodeRoundInstructions(*frame, limits_);
      if (!m.ok()) return m.status();
      if (m->payload.index == 0) {
        round.round = m->round_id;
        round.codec_spec = std::string(m->codec_spec);
        round.session_seed = m->session_seed;
        // The decoder checked total_size against limits_.max_payload_bytes.
        round.model.assign(static_cast<std::size_t>(m->payload.total_size), 0);
      }
      if (m->payload.offset + m->payload.size > round.model.size()) return Corrupt("chunk outside the model");
      std::memcpy(round.model.data() + m->payload.offset, m->payload.data, m->payload.size);
      if (m->payload.index + 1 == m->payload.count) return round;
    }
  }

  // Sends one single-chunk update.
  Status SendUpdate(uint64_t round, const std::string& spec, const std::vector<uint8_t>& payload,
                    uint64_t declared_size = 0) {
    transport::UpdateMessage update;
    update.round_id = round;
    update.num_samples = 64;
    update.codec_spec = spec;
    const uint64_t total = declared_size != 0 ? declared_size : payload.size();
    update.payload = transport::ChunkView{0, 1, total, 0, payload.data(), payload.size()};
    return Send(transport::Encode(update, limits_));
  }

  // Reads until the server ends the stream: true when it did (an Error
  // frame's reason, if one came first, goes to *reason).
  bool ReadUntilClosed(std::string* reason) {
    for (;;) {
      Result<transport::Frame> frame = Read();
      if (!frame.ok()) return frame.status().code() == StatusCode::kUnavailable;
      if (frame->kind() == transport::MessageKind::kError && reason != nullptr) {
        Result<transport::ErrorMessage> error = transport::DecodeError(*frame);
        if (error.ok()) *reason = transport::ToStatus(*error).ToString();
      }
    }
  }

  const transport::FrameLimits& limits() const { return limits_; }
  int fd() const { return fd_; }

 private:
  Status ReadExactly(uint8_t* data, std::size_t size) {
    while (size > 0) {
      const ssize_t n = ::recv(fd_, data, size, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return Status(StatusCode::kUnavailable, "closed by the server");
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status(StatusCode::kDeadlineExceeded, std::string("recv: ") + std::strerror(errno));
      data += n;
      size -= static_cast<std::size_t>(n);
    }
    return Status();
  }

  int fd_ = -1;
  transport::FrameLimits limits_;
};

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_SUPPORT_STAR_PROCESSES_H_
