// Helpers shared by the transport tests that use real sockets: a server-side
// handler that records what happens, and a raw POSIX client for sending bytes
// no fedrt encoder would produce.
#ifndef FEDRT_TESTS_TRANSPORT_NET_TEST_SUPPORT_H_
#define FEDRT_TESTS_TRANSPORT_NET_TEST_SUPPORT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fedrt/transport/chunking.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/messages.h"

namespace fedrt {
namespace transport {
namespace testing {

// Records every server-side event; optionally answers each frame.
class Recorder : public ConnectionHandler {
 public:
  // Called on the loop thread for each frame; may Send on the connection.
  std::function<void(Connection&, const Frame&)> on_frame;

  void OnOpen(const std::shared_ptr<Connection>& connection) override {
    std::lock_guard<std::mutex> lock(mutex_);
    open_[connection->id()] = connection;
    ++opened_;
    changed_.notify_all();
  }
  void OnFrame(Connection& connection, Frame frame) override {
    if (on_frame) on_frame(connection, frame);
    std::lock_guard<std::mutex> lock(mutex_);
    kinds_.push_back(frame.kind());
    changed_.notify_all();
  }
  void OnClose(Connection& connection, const Status& reason) override {
    std::lock_guard<std::mutex> lock(mutex_);
    open_.erase(connection.id());
    closes_.push_back(reason);
    changed_.notify_all();
  }

  std::size_t opened() { std::lock_guard<std::mutex> lock(mutex_); return opened_; }
  std::size_t frames() { std::lock_guard<std::mutex> lock(mutex_); return kinds_.size(); }
  std::vector<Status> closes() { std::lock_guard<std::mutex> lock(mutex_); return closes_; }
  std::size_t closes_count() { std::lock_guard<std::mutex> lock(mutex_); return closes_.size(); }
  void CloseAll() {
    std::map<uint64_t, std::shared_ptr<Connection>> open;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open = open_;
    }
    for (auto& entry : open) entry.second->Abort(Status(StatusCode::kCancelled, "test over"));
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<uint64_t, std::shared_ptr<Connection>> open_;
  std::size_t opened_ = 0;
  std::vector<MessageKind> kinds_;
  std::vector<Status> closes_;
};

// Polls `predicate` every few milliseconds; false when it never held within
// `timeout_ms`.
inline bool Eventually(const std::function<bool()>& predicate, uint32_t timeout_ms = 5000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// A blocking POSIX socket to 127.0.0.1:port (the test's side of a raw peer).
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawClient() { Close(); }
  bool connected() const { return connected_; }
  bool Write(const std::vector<uint8_t>& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// An Ack frame for `round` (a small frame tests send and echo).
inline OutFrame AckFrame(uint64_t round) {
  return Encode(AckMessage{round, MessageKind::kUpdate}, FrameLimits()).value();
}

// A server answering every Ack with an Ack for the same round.
inline std::shared_ptr<Recorder> EchoServer() {
  auto server = std::make_shared<Recorder>();
  server->on_frame = [](Connection& connection, const Frame& frame) {
    if (frame.kind() != MessageKind::kAck) return;
    Result<AckMessage> ack = DecodeAck(frame);
    if (ack.ok()) (void)connection.Send(AckFrame(ack->round_id));
  };
  return server;
}

// Sends `payload` as the chunked fp32 Update of `round`.
inline Status SendChunkedUpdate(Connection& connection, uint64_t round, const std::vector<uint8_t>& payload,
                                const FrameLimits& limits) {
  Result<ChunkPlan> plan = ChunkPlan::Make(payload.size(), limits.MaxChunkBytes());
  if (!plan.ok()) return plan.status();
  for (uint32_t i = 0; i < plan->count(); ++i) {
    UpdateMessage m;
    m.round_id = round;
    m.codec_spec = "fp32";
    m.num_samples = 10;
    m.payload = plan->Chunk(i, payload.data());
    Result<OutFrame> frame = Encode(m, limits);
    if (!frame.ok()) return frame.status();
    FEDRT_RETURN_IF_ERROR(connection.Send(*frame));
  }
  return Status::Ok();
}

inline std::vector<uint8_t> WireBytes(const OutFrame& frame) {
  std::vector<uint8_t> bytes(frame.prefix(), frame.prefix() + kFramePrefixBytes);
  bytes.insert(bytes.end(), frame.body(), frame.body() + frame.body_size());
  return bytes;
}

// `count` Update frames, each carrying a copy of `payload`.
inline std::vector<OutFrame> UpdateFrames(const std::vector<uint8_t>& payload, int count) {
  std::vector<OutFrame> frames;
  for (int i = 0; i < count; ++i) {
    UpdateMessage m;
    m.round_id = static_cast<uint64_t>(i);
    m.codec_spec = "fp32";
    m.payload = {0, 1, payload.size(), 0, payload.data(), payload.size()};
    frames.push_back(Encode(m, FrameLimits()).value());
  }
  return frames;
}

}  // namespace testing
}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TESTS_TRANSPORT_NET_TEST_SUPPORT_H_
