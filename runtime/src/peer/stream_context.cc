// The collective context over the application's byte streams
// (stream_peer_context.h): one StreamConnection per neighbour, fed by
// pulling the neighbour's stream while a collective waits for it.
#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/runtime/stream_peer_context.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/stream.h"
#include "peer/formation.h"

namespace fedrt {
namespace peer {
namespace internal {
namespace {

using transport::Frame;
using transport::MessageKind;

// Bytes read from a stream at a time.
constexpr std::size_t kReadBytes = 64u << 10;

// One neighbour's stream: its connection and what arrived on it.
class StreamLink final : public transport::ConnectionHandler {
 public:
  explicit StreamLink(uint32_t rank) : rank_(rank) {}

  void OnFrame(transport::Connection&, Frame frame) override {
    if (frame.kind() == MessageKind::kLeave) {
      left_ = true;  // finished: nothing more comes, and that is no failure
      return;
    }
    frames_.push_back(std::move(frame));
  }
  void OnClose(transport::Connection&, const Status& reason) override {
    closed_ = true;
    close_reason_ = reason.ok() ? Status(StatusCode::kUnavailable, "closed") : reason;
  }

  uint32_t rank() const { return rank_; }
  transport::StreamConnection& connection() { return *connection_; }
  void set_connection(std::shared_ptr<transport::StreamConnection> c) { connection_ = std::move(c); }
  std::deque<Frame>& frames() { return frames_; }
  bool left() const { return left_; }
  bool closed() const { return closed_; }
  const Status& close_reason() const { return close_reason_; }
  std::vector<std::unique_ptr<transport::FrameSlot>>& slots() { return slots_; }

 private:
  const uint32_t rank_;
  std::shared_ptr<transport::StreamConnection> connection_;
  std::deque<Frame> frames_;
  bool left_ = false;
  bool closed_ = false;
  Status close_reason_;
  std::vector<std::unique_ptr<transport::FrameSlot>> slots_;
};

class StreamPeerContext final : public CollectiveContext {
 public:
  StreamPeerContext(uint32_t rank, uint32_t peer_count, PeerStreams streams, const ContextOptions& options,
                    const transport::FrameLimits& limits)
      : rank_(rank), peer_count_(peer_count), streams_(std::move(streams)), options_(options), limits_(limits),
        clock_(options.clock != nullptr ? *options.clock : SystemClock()), buffer_(kReadBytes) {}
  // Closing a connection lets go of its link (the handler), which holds it.
  ~StreamPeerContext() override {
    for (const auto& link : links_) link->connection().Close();
  }

  Status Form(const std::vector<uint32_t>& members) override {
    std::vector<uint32_t> ring;
    const Result<std::size_t> position = FormationMembers(members, rank_, peer_count_, &ring);
    if (!position.ok()) return position.status();
    if (generation_ > 0) {
      return Status(StatusCode::kUnsupported,
                    "the stream binding forms its group once: re-forming (ring repair) needs a binding whose "
                    "links join anew (TCP)");
    }
    ++generation_;
    members_ = ring;
    position_ = *position;
    neighbours_ = FormationNeighbours(options_.graph, members_, position_);
    // One stream per neighbour: on the ring the left and the right member
    // (one rank with two members), on a graph its neighbours.
    std::vector<uint32_t> ranks;
    for (const Neighbour& n : neighbours_) ranks.push_back(n.rank);
    std::sort(ranks.begin(), ranks.end());
    transport::ConnectionOptions connection;
    connection.limits = limits_;
    connection.heartbeat_interval_ms = 0;  // nothing polls the connection: the collectives are the traffic
    connection.idle_timeout_ms = 0;        // the step deadline is the only one
    connection.log_errors = false;         // the collective's status carries the reason
    for (uint32_t r : ranks) {
      auto link = std::make_shared<StreamLink>(r);
      auto write = [this, r](const uint8_t* data, std::size_t size) { return streams_.write(r, data, size); };
      auto c = transport::StreamConnection::Create(Name(r), write, link, connection, clock_);
      if (!c.ok()) return c.status();
      link->set_connection(*c);
      (*c)->Open();
      links_.push_back(std::move(link));
    }
    return Status::Ok();
  }

  Status Close() override {
    transport::LeaveMessage leave;
    leave.reason = "finished";
    auto frame = transport::Encode(leave, limits_);
    for (const auto& link : links_) {
      if (frame.ok() && !link->closed()) (void)link->connection().Send(*frame);
      link->connection().Close();
    }
    return Status::Ok();
  }

  uint32_t rank() const override { return rank_; }
  uint32_t peer_count() const override { return peer_count_; }
  const std::vector<uint32_t>& members() const override { return members_; }
  std::size_t position() const override { return position_; }
  uint32_t generation() const override { return generation_; }
  GossipGraph graph() const override { return options_.graph; }
  const std::vector<Neighbour>& neighbours() const override { return neighbours_; }
  uint32_t step_timeout_ms() const override { return options_.step_timeout_ms; }
  const Clock& clock() const override { return clock_; }
  const transport::FrameLimits& limits() const override { return limits_; }
  uint64_t NextCollectiveId() override { return ++collective_; }

  Result<transport::FrameSlot*> FreeSlot(uint32_t to, Deadline deadline, const char* what) override {
    (void)deadline;
    StreamLink* link = LinkOf(to);
    if (link == nullptr) return Internal(Name(to) + " is not a neighbour of this formation");
    if (link->left()) return static_cast<transport::FrameSlot*>(nullptr);  // nothing more to send it
    // Send writes a frame before it returns, so a slot is free again then.
    auto& slots = link->slots();
    for (const auto& slot : slots) {
      if (!slot->busy()) return slot.get();
    }
    if (slots.size() < kMaxSlots) {
      slots.push_back(std::make_unique<transport::FrameSlot>());
      return slots.back().get();
    }
    return Fail(static_cast<int>(to),
                Named(to, Status(StatusCode::kResourceExhausted,
                                 std::string("cannot send ") + what + ": every frame slot is in use")));
  }

  Status Send(uint32_t to, Result<transport::OutFrame> frame) override {
    if (!frame.ok()) return frame.status();
    StreamLink* link = LinkOf(to);
    if (link == nullptr) return Internal(Name(to) + " is not a neighbour of this formation");
    if (link->left()) return Status::Ok();  // it finished and needs nothing more
    Status s = link->closed() ? link->close_reason() : link->connection().Send(std::move(*frame));
    if (s.ok()) return s;
    return Fail(static_cast<int>(to), Named(to, s));
  }

  Result<Frame> Receive(uint32_t from, Deadline deadline, bool leaving_is_ok) override {
    StreamLink* link = LinkOf(from);
    if (link == nullptr) return Internal(Name(from) + " is not a neighbour of this formation");
    for (;;) {
      if (!link->frames().empty()) {
        Frame frame = std::move(link->frames().front());
        link->frames().pop_front();
        if (frame.kind() != MessageKind::kError) return frame;
        auto e = transport::DecodeError(frame);
        if (!e.ok()) return Fail(static_cast<int>(from), Named(from, e.status()));
        Report report;
        if (!ParseReport(e->message, &report) || report.a < 0 || report.a >= static_cast<int>(peer_count_)) {
          // A neighbour that gives up for its own reason.
          return Fail(static_cast<int>(from), Named(from, transport::ToStatus(*e)));
        }
        if (report.failed) return Fail(report.a, Status(e->code, std::string(e->message)));
        continue;  // a suspicion: this binding does not exchange them
      }
      if (link->left()) {
        if (leaving_is_ok || options_.graph != GossipGraph::kRing) {
          return Status(StatusCode::kCancelled, Name(from) + " has left");
        }
        return Fail(static_cast<int>(from), Named(from, Status(StatusCode::kUnavailable, "left the group")));
      }
      if (link->closed()) return Fail(static_cast<int>(from), Named(from, link->close_reason()));
      const uint64_t now = clock_.NowNanos();
      if (now >= deadline) {
        return Fail(static_cast<int>(from),
                    Named(from, Status(StatusCode::kDeadlineExceeded,
                                       "sent nothing within the step deadline of " +
                                           std::to_string(options_.step_timeout_ms) + " ms")));
      }
      const uint64_t left_ms = (deadline - now + 999999u) / 1000000u;
      const uint32_t timeout_ms = static_cast<uint32_t>(std::min<uint64_t>(left_ms, 0xffffffffu));
      Result<std::size_t> got = streams_.read(from, buffer_.data(), buffer_.size(), timeout_ms);
      if (!got.ok()) {
        link->connection().OnStreamClosed(got.status());
      } else if (*got > buffer_.size()) {
        link->connection().OnStreamClosed(Internal("the stream's read reported " + std::to_string(*got) +
                                                   " bytes for a buffer of " + std::to_string(buffer_.size())));
      } else if (*got > 0) {
        (void)link->connection().Receive(buffer_.data(), *got);  // a bad frame closes the link: seen above
      }
    }
  }

  // Payloads are never placed here: every chunk arrives in its frame.
  void ExpectPayloads(uint32_t, const RegisteredBuffer*, std::size_t) override {}
  // Sends wrote every byte before they returned: nothing borrows caller memory.
  void ReleaseBuffers(Deadline) override {}

  Status Fail(int failed, const Status& status) override {
    if (failed_rank_ < 0) failed_rank_ = failed;
    if (!reported_ && failed_rank_ >= 0) {
      reported_ = true;
      std::string text =
          std::string(kFailurePrefix) + std::to_string(failed_rank_) + " failed: " + status.message();
      if (text.size() > transport::kMaxReasonBytes) text.resize(transport::kMaxReasonBytes);
      transport::ErrorMessage report;
      report.code = StatusCode::kUnavailable;
      report.message = text;
      auto frame = transport::Encode(report, limits_);
      for (const auto& link : links_) {
        if (frame.ok() && !link->closed() && !link->left()) (void)link->connection().Send(*frame);
      }
    }
    return status;
  }
  int failed_rank() const override { return failed_rank_; }
  std::string Name(uint32_t rank) const override {
    return std::string(kFailurePrefix) + std::to_string(rank) + " (p" + std::to_string(rank) + ")";
  }

 private:
  StreamLink* LinkOf(uint32_t rank) const {
    for (const auto& link : links_) {
      if (link->rank() == rank) return link.get();
    }
    return nullptr;
  }

  const uint32_t rank_;
  const uint32_t peer_count_;
  const PeerStreams streams_;
  const ContextOptions options_;
  const transport::FrameLimits limits_;
  const Clock& clock_;
  std::vector<uint8_t> buffer_;  // what a read brings in
  std::vector<uint32_t> members_;
  std::size_t position_ = 0;
  uint32_t generation_ = 0;
  std::vector<Neighbour> neighbours_;
  std::vector<std::shared_ptr<StreamLink>> links_;
  uint64_t collective_ = 0;
  int failed_rank_ = -1;
  bool reported_ = false;
};

}  // namespace
}  // namespace internal

Result<std::unique_ptr<CollectiveContext>> CreateStreamPeerContext(uint32_t rank, uint32_t peer_count,
                                                                   PeerStreams streams,
                                                                   const ContextOptions& options,
                                                                   const transport::FrameLimits& limits) {
  if (peer_count == 0 || rank >= peer_count) {
    return InvalidArgument("rank " + std::to_string(rank) + " is not one of " + std::to_string(peer_count) +
                           " peers");
  }
  if (!streams.write || !streams.read) return InvalidArgument("a stream peer context needs write and read");
  FEDRT_RETURN_IF_ERROR(limits.Validate());
  return std::unique_ptr<CollectiveContext>(
      new internal::StreamPeerContext(rank, peer_count, std::move(streams), options, limits));
}

}  // namespace peer
}  // namespace fedrt
