// The collective context over the application's byte streams
// (stream_peer_context.h): one StreamConnection per neighbour, fed by
// pulling the neighbour's stream while a collective waits for it, and the
// join on each stream when the peers hold keys.
#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/runtime/stream_peer_context.h"
#include "fedrt/transport/join.h"
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
// While several streams are joining, how long a read waits on one of them
// before the next one's turn.
constexpr uint32_t kJoinTurnMs = 10;

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
  // Both ends proved the key (or there is no join): its frames are trusted.
  bool joined() const { return joined_; }
  void set_joined() { joined_ = true; }
  const Status& close_reason() const { return close_reason_; }
  std::vector<std::unique_ptr<transport::FrameSlot>>& slots() { return slots_; }

 private:
  const uint32_t rank_;
  std::shared_ptr<transport::StreamConnection> connection_;
  std::deque<Frame> frames_;
  bool left_ = false;
  bool closed_ = false;
  bool joined_ = false;
  Status close_reason_;
  std::vector<std::unique_ptr<transport::FrameSlot>> slots_;
};

// The two halves of one stream's join (transport/join.h): this peer joining
// the neighbour, and answering the neighbour's join.
struct StreamJoiner {
  StreamJoiner(const std::string& self, const transport::KeyStore& keys, transport::Crypto& crypto,
               const transport::FrameLimits& limits)
      : client(self, *keys.Find(self), crypto, limits), server(keys, crypto, limits) {}
  transport::JoinClient client;
  transport::JoinServer server;
};

class StreamPeerContext final : public CollectiveContext {
 public:
  StreamPeerContext(uint32_t rank, uint32_t peer_count, PeerStreams streams, const ContextOptions& options,
                    const transport::FrameLimits& limits, const StreamJoin& join)
      : rank_(rank), peer_count_(peer_count), streams_(std::move(streams)), options_(options), limits_(limits),
        join_(join), clock_(options.clock != nullptr ? *options.clock : SystemClock()), buffer_(kReadBytes),
        joined_(join.keys == nullptr) {}
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
      if (join_.keys == nullptr) link->set_joined();
      (*c)->Open();
      links_.push_back(std::move(link));
    }
    return Status::Ok();
  }

  Status Close() override {
    // Unjoined streams carry nothing but the join: leaving needs no word
    // (no collective ran, so the neighbours wait for nothing from this peer).
    if (!joined_) {
      for (const auto& link : links_) link->connection().Close();
      return Status::Ok();
    }
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
    FEDRT_RETURN_IF_ERROR(Join());
    StreamLink* link = LinkOf(to);
    if (link == nullptr) return Internal(Name(to) + " is not a neighbour of this formation");
    if (link->left()) return Status::Ok();  // it finished and needs nothing more
    Status s = link->closed() ? link->close_reason() : link->connection().Send(std::move(*frame));
    if (s.ok()) return s;
    return Fail(static_cast<int>(to), Named(to, s));
  }

  Result<Frame> Receive(uint32_t from, Deadline deadline, bool leaving_is_ok) override {
    FEDRT_RETURN_IF_ERROR(Join());
    StreamLink* link = LinkOf(from);
    if (link == nullptr) return Internal(Name(from) + " is not a neighbour of this formation");
    for (;;) {
      if (!link->frames().empty()) {
        Frame frame = std::move(link->frames().front());
        link->frames().pop_front();
        if (frame.kind() == MessageKind::kJoin) {
          // Joined already, or this peer has no keys: a neighbour with keys
          // starts its streams with the join. It hears why it gets no answer.
          const bool keyless = join_.keys == nullptr;
          link->connection().Abort(Status(StatusCode::kUnauthenticated,
                                          keyless ? "has no key and cannot answer the join (every peer needs the "
                                                    "group's key, or none does)"
                                                  : "a second join"),
                                   /*notify_peer=*/true);
          return Fail(static_cast<int>(from),
                      Named(from, Status(StatusCode::kUnauthenticated,
                                         keyless ? "starts a join: it holds a key and this peer has none (every "
                                                   "peer needs the group's key, or none does)"
                                                 : "sent a second join")));
        }
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
      if (!Pull(*link, deadline)) {
        return Fail(static_cast<int>(from),
                    Named(from, Status(StatusCode::kDeadlineExceeded,
                                       "sent nothing within the step deadline of " +
                                           std::to_string(options_.step_timeout_ms) + " ms")));
      }
    }
  }

  // Payloads are never placed here: every chunk arrives in its frame.
  void ExpectPayloads(uint32_t, const RegisteredBuffer*, std::size_t) override {}
  // Sends wrote every byte before they returned: nothing borrows caller memory.
  void ReleaseBuffers(Deadline) override {}

  Status Fail(int failed, const Status& status) override {
    if (failed_rank_ < 0 && failed >= 0) {
      failed_rank_ = failed;
      failure_ = status.message();
    }
    if (!joining_) SendReport();
    return status;
  }
  int failed_rank() const override { return failed_rank_; }
  std::string Name(uint32_t rank) const override {
    return std::string(kFailurePrefix) + std::to_string(rank) + " (p" + std::to_string(rank) + ")";
  }

 private:
  // Reads what `link`'s stream brings within `deadline` into its connection
  // (frames to link.frames(); a failed read or a bad frame closes the link).
  // False when the deadline had passed.
  bool Pull(StreamLink& link, Deadline deadline) {
    const uint64_t now = clock_.NowNanos();
    if (now >= deadline) return false;
    const uint64_t left_ms = (deadline - now + 999999u) / 1000000u;
    const uint32_t timeout_ms = static_cast<uint32_t>(std::min<uint64_t>(left_ms, 0xffffffffu));
    Result<std::size_t> got = streams_.read(link.rank(), buffer_.data(), buffer_.size(), timeout_ms);
    if (!got.ok()) {
      link.connection().OnStreamClosed(got.status());
    } else if (*got > buffer_.size()) {
      link.connection().OnStreamClosed(Internal("the stream's read reported " + std::to_string(*got) +
                                                " bytes for a buffer of " + std::to_string(buffer_.size())));
    } else if (*got > 0) {
      (void)link.connection().Receive(buffer_.data(), *got);  // a bad frame closes the link: the caller sees it
    }
    return true;
  }

  // Reports the failed rank to the neighbours, once: only on joined streams
  // (a neighbour still joining would not trust it).
  void SendReport() {
    if (reported_ || failed_rank_ < 0) return;
    reported_ = true;
    std::string text = std::string(kFailurePrefix) + std::to_string(failed_rank_) + " failed: " + failure_;
    if (text.size() > transport::kMaxReasonBytes) text.resize(transport::kMaxReasonBytes);
    transport::ErrorMessage report;
    report.code = StatusCode::kUnavailable;
    report.message = text;
    auto frame = transport::Encode(report, limits_);
    for (const auto& link : links_) {
      if (frame.ok() && link->joined() && !link->closed() && !link->left()) (void)link->connection().Send(*frame);
    }
  }

  // Refuses neighbour `link.rank()` during the join: it hears why (an Error
  // frame), then the stream carries nothing more from this peer.
  Status Refuse(StreamLink& link, const Status& why) {
    const std::string refused = "refused the join of " + Name(link.rank()) + ": " + why.message();
    link.connection().Abort(Status(why.code(), refused), /*notify_peer=*/true);
    return Fail(static_cast<int>(link.rank()),
                Named(link.rank(), Status(why.code(), "refused its join: " + why.message())));
  }

  // The join on every stream, once, before the first frame. Every stream's
  // Join goes out first; then the streams advance together (reading each in
  // turn while more than one waits) until each has joined or failed, so a
  // neighbour that fails does not keep the others from joining, and the
  // joined ones hear of the failure in a report they can trust. The first
  // failure is the outcome, returned by every later call.
  Status Join() {
    if (joined_) return join_status_;
    joined_ = true;
    joining_ = true;
    const Deadline deadline = DeadlineAfterMs(options_.join_timeout_ms);
    const std::string self = internal::PeerId(rank_);
    std::vector<std::unique_ptr<StreamJoiner>> joiners;
    std::vector<std::size_t> pending;
    for (std::size_t i = 0; i < links_.size(); ++i) {
      joiners.push_back(std::make_unique<StreamJoiner>(self, *join_.keys, *join_.crypto, limits_));
      transport::JoinRequest request;
      request.resume_round = generation_;
      request.max_frame_bytes = limits_.max_frame_bytes;
      Result<transport::OutFrame> start = joiners.back()->client.Start(request);
      if (!start.ok()) {  // this peer's own failure (its Crypto)
        joining_ = false;
        return join_status_ = start.status();
      }
      StreamLink& link = *links_[i];
      if (!link.closed()) (void)link.connection().Send(std::move(*start));  // a failure closes it: seen below
      pending.push_back(i);
    }
    std::size_t turn = 0;
    while (!pending.empty()) {
      for (auto it = pending.begin(); it != pending.end();) {
        Result<bool> done = Advance(*links_[*it], *joiners[*it]);
        if (!done.ok() && join_status_.ok()) join_status_ = done.status();
        it = !done.ok() || *done ? pending.erase(it) : it + 1;
      }
      if (pending.empty()) break;
      StreamLink& link = *links_[pending[turn++ % pending.size()]];
      const Deadline until = pending.size() == 1 ? deadline : std::min(deadline, DeadlineAfterMs(kJoinTurnMs));
      if (Pull(link, until) || clock_.NowNanos() < deadline) continue;
      for (std::size_t i : pending) {
        Status late = Refuse(*links_[i], Status(StatusCode::kDeadlineExceeded,
                                                "did not complete the join within " +
                                                    std::to_string(options_.join_timeout_ms) + " ms"));
        if (join_status_.ok()) join_status_ = late;
      }
      pending.clear();
    }
    joining_ = false;
    SendReport();
    return join_status_;
  }

  // Moves one stream's join on with the frames that arrived: true when both
  // halves are done (the stream is joined), false while it waits for more;
  // a failure fails (and refuses) the neighbour. This peer's client
  // (started by Join) joins as PeerId(rank_) while its server answers the
  // neighbour's client, which must join as PeerId(link.rank()); the frames of
  // the two interleave on the stream, and their kinds tell them apart.
  // Until both are done the neighbour is not trusted: an Error from it fails
  // it, whatever rank its text names.
  Result<bool> Advance(StreamLink& link, StreamJoiner& join) {
    const uint32_t r = link.rank();
    const int failed = static_cast<int>(r);
    auto send = [&](Result<transport::OutFrame> out) {
      if (!out.ok()) return Refuse(link, out.status());
      if (out->empty()) return Status::Ok();
      Status sent = link.closed() ? link.close_reason() : link.connection().Send(std::move(*out));
      return sent.ok() ? sent : Fail(failed, Named(r, sent));
    };
    while (!join.client.done() || !join.server.done()) {
      if (link.frames().empty()) {
        if (link.left()) return Refuse(link, Status(StatusCode::kUnauthenticated, "left before the join completed"));
        if (link.closed()) {
          const Status& why = link.close_reason();
          return Fail(failed, Named(r, Status(why.code(), "during the join: " + why.message())));
        }
        return false;
      }
      Frame frame = std::move(link.frames().front());
      link.frames().pop_front();
      switch (frame.kind()) {
        case MessageKind::kError: {
          auto e = transport::DecodeError(frame);
          link.connection().Abort(Status(StatusCode::kCancelled, "the join failed"));
          return Fail(failed, Named(r, e.ok() ? transport::ToStatus(*e) : e.status()));
        }
        case MessageKind::kJoin: {
          Result<transport::OutFrame> challenge = join.server.OnFrame(frame, transport::JoinResult());
          if (!challenge.ok()) return Refuse(link, challenge.status());
          const transport::JoinAnnouncement& a = join.server.announcement();
          if (a.device_id != internal::PeerId(r)) {
            return Refuse(link, Status(StatusCode::kUnauthenticated,
                                       "it joins as '" + a.device_id + "' on the stream to " + internal::PeerId(r)));
          }
          if (a.resume_round != generation_) {
            return Refuse(link, Status(StatusCode::kFailedPrecondition,
                                       "it joins formation " + std::to_string(a.resume_round) + ", not " +
                                           std::to_string(generation_)));
          }
          FEDRT_RETURN_IF_ERROR(send(std::move(challenge)));
          break;
        }
        case MessageKind::kAuthenticate:
          FEDRT_RETURN_IF_ERROR(send(join.server.OnFrame(frame, transport::JoinResult())));
          break;
        case MessageKind::kChallenge:
        case MessageKind::kJoinResponse:
          FEDRT_RETURN_IF_ERROR(send(join.client.OnFrame(frame)));
          break;
        default:
          return Refuse(link, Status(StatusCode::kUnauthenticated,
                                     std::string("sent ") + transport::MessageKindName(frame.kind()) +
                                         " where the join was expected (does it hold the group's key?)"));
      }
    }
    link.set_joined();
    return true;
  }

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
  const StreamJoin join_;  // keys and crypto (both set, or keys null)
  const Clock& clock_;
  std::vector<uint8_t> buffer_;  // what a read brings in
  bool joined_;                  // the join ran (or there is none)
  bool joining_ = false;         // it runs: failures are reported when it ends
  Status join_status_;           // how it ended
  std::vector<uint32_t> members_;
  std::size_t position_ = 0;
  uint32_t generation_ = 0;
  std::vector<Neighbour> neighbours_;
  std::vector<std::shared_ptr<StreamLink>> links_;
  uint64_t collective_ = 0;
  int failed_rank_ = -1;
  std::string failure_;  // the failed rank's status message
  bool reported_ = false;
};

}  // namespace
}  // namespace internal

Result<std::unique_ptr<CollectiveContext>> CreateStreamPeerContext(uint32_t rank, uint32_t peer_count,
                                                                   PeerStreams streams,
                                                                   const ContextOptions& options,
                                                                   const transport::FrameLimits& limits,
                                                                   const StreamJoin& join) {
  if (peer_count == 0 || rank >= peer_count) {
    return InvalidArgument("rank " + std::to_string(rank) + " is not one of " + std::to_string(peer_count) +
                           " peers");
  }
  if (!streams.write || !streams.read) return InvalidArgument("a stream peer context needs write and read");
  FEDRT_RETURN_IF_ERROR(limits.Validate());
  StreamJoin checked = join;
  if (checked.keys != nullptr) {
    if (checked.keys->Find(internal::PeerId(rank)) == nullptr) {
      return InvalidArgument("the keys have none for this peer ('" + internal::PeerId(rank) + "')");
    }
#if FEDRT_HAVE_OPENSSL
    if (checked.crypto == nullptr) checked.crypto = &transport::SystemCrypto();
#endif
    if (checked.crypto == nullptr) {
      return InvalidArgument("the join needs a Crypto: this build of fedrt has no HMAC-SHA256 of its own");
    }
  }
  return std::unique_ptr<CollectiveContext>(
      new internal::StreamPeerContext(rank, peer_count, std::move(streams), options, limits, checked));
}

}  // namespace peer
}  // namespace fedrt
