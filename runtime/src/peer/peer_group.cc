// PeerGroup over TCP: ring formation (dial right, accept left, join with the
// pre-shared keys), failure reports, and the ring collectives.
//
// Wire use (transport/README.md, "Peer protocol"):
//   - the join is the star topology's Join / Challenge / Authenticate /
//     JoinResponse; Join.resume_round carries the ring generation, and the
//     accepting peer only takes the join of its expected left neighbour for
//     the current generation;
//   - data travels as RingChunk {collective, step, phase, source rank
//     (original), segment, codec, chunk}; chunks of one segment follow each
//     other on one connection, in order;
//   - a failure report is an Error {unavailable, "peer rank R failed: ..."},
//     forwarded once each way around the ring.
#include "fedrt/runtime/peer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/moniqua.h"
#include "fedrt/codecs/reduce.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/tcp.h"

namespace fedrt {
namespace peer {
namespace {

using transport::Connection;
using transport::Frame;
using transport::MessageKind;
using Clock = std::chrono::steady_clock;

constexpr const char kFailurePrefix[] = "peer rank ";
constexpr const char kAgreeStepSpec[] = "step";  // AgreeStep's frames (GossipModel)

// What both links of a group share: one lock and one condition, so the
// collective's thread can wait for "a frame from the left, or any link
// closed, or a failure report" at once.
struct Signal {
  std::mutex mutex;
  std::condition_variable changed;
  // Set while the collective waits for its sends to be released, so write
  // completions only wake it then.
  std::atomic<bool> waiting_for_sends{false};
};

// One connection's inbox. Frames are kept in arrival order.
class Link : public transport::ConnectionHandler {
 public:
  explicit Link(std::shared_ptr<Signal> signal) : signal_(std::move(signal)) {}

  void OnOpen(const std::shared_ptr<Connection>& connection) override {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    connection_ = connection;
    signal_->changed.notify_all();
  }
  void OnFrame(Connection&, Frame frame) override {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    placing_ = false;  // frames arrive one at a time: a placed payload is complete
    if (frame.kind() == MessageKind::kLeave) {
      left_ring_ = true;  // finished: its close that follows is no failure
      signal_->changed.notify_all();
      return;
    }
    frames_.push_back(std::move(frame));
    signal_->changed.notify_all();
  }
  void OnSent(Connection&) override {
    if (!signal_->waiting_for_sends.load()) return;
    std::lock_guard<std::mutex> lock(signal_->mutex);
    signal_->changed.notify_all();
  }
  void OnClose(Connection&, const Status& reason) override {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    placing_ = false;
    closed_ = true;
    close_reason_ = reason.ok() ? Status(StatusCode::kUnavailable, "closed") : reason;
    connection_.reset();
    signal_->changed.notify_all();
  }

  // Raw chunks of the running all-reduce never wait in a frame buffer: the
  // collective lists where each one goes before it sends anything, and the
  // connection asks here as each chunk's head arrives. All-gather chunks are
  // received straight into the caller's vector; reduce-scatter chunks are
  // added into it piece by piece as they arrive (ConsumePayload, on the loop
  // thread, while each piece is in cache). Only an exact match (collective,
  // phase, step, segment, chunk, size) is taken, so a chunk never lands
  // outside its own slice.
  struct Placement {
    uint64_t collective = 0;
    transport::RingPhase phase = transport::RingPhase::kAllGather;
    uint32_t source = 0;
    uint32_t step = 0;
    uint32_t segment = 0;
    uint32_t index = 0;
    uint8_t* data = nullptr;
    std::size_t size = 0;
  };
  bool WantsPlacement(Connection&) override { return wants_placement_.load(std::memory_order_acquire); }
  uint8_t* PlacePayload(Connection&, const transport::PayloadHead& head) override {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    const Placement* p = Match(head, transport::RingPhase::kAllGather);
    return p ? p->data : nullptr;
  }
  bool ConsumesPayload(Connection&, const transport::PayloadHead& head) override {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    const Placement* p = Match(head, transport::RingPhase::kReduceScatter);
    if (p == nullptr) return false;
    // p->data was made from a float* into the caller's vector (Reduce), so it is float-aligned.
    summing_into_ = static_cast<float*>(static_cast<void*>(p->data));
    return true;
  }
  // Loop thread, between ConsumesPayload and OnFrame/OnClose: the slice is
  // this link's alone (see Match), so the sum needs no lock.
  void ConsumePayload(Connection&, const uint8_t* piece, std::size_t offset, std::size_t size) override {
    // Pieces are whole multiples of 4 bytes apart; the piece buffer is 64-byte aligned.
    AddFloats(reinterpret_cast<const float*>(static_cast<const void*>(piece)), size / sizeof(float),
              summing_into_ + offset / sizeof(float));
  }
  // Under signal_->mutex (the collective's thread).
  std::vector<Placement>& placements() { return placements_; }
  void StartPlacement() {
    next_placement_ = 0;
    wants_placement_.store(!placements_.empty(), std::memory_order_release);
  }
  // Stops placing; true when no payload is being written any more.
  bool StopPlacement() {
    wants_placement_.store(false, std::memory_order_release);
    placements_.clear();
    next_placement_ = 0;
    return !placing_ || closed_;
  }
  bool placing() const { return placing_ && !closed_; }
  // The collective's thread only: frame slots for sends on this link (each
  // link has its own, so a stalled neighbour cannot starve a healthy one).
  std::vector<std::unique_ptr<transport::FrameSlot>>& slots() { return slots_; }

  // Under signal_->mutex.
  bool has_frame() const { return !frames_.empty(); }
  // The first failure report anywhere in the queue (a report can sit behind
  // data frames), removed; false when there is none.
  bool TakeError(Frame* out) {
    for (auto it = frames_.begin(); it != frames_.end(); ++it) {
      if (it->kind() == MessageKind::kError) {
        *out = std::move(*it);
        frames_.erase(it);
        return true;
      }
    }
    return false;
  }
  bool front_is_error() const { return !frames_.empty() && frames_.front().kind() == MessageKind::kError; }
  Frame TakeFrame() {
    Frame f = std::move(frames_.front());
    frames_.pop_front();
    return f;
  }
  bool closed() const { return closed_; }
  bool left_ring() const { return left_ring_; }
  const Status& close_reason() const { return close_reason_; }
  std::shared_ptr<Connection> connection() const { return connection_; }

 private:
  std::shared_ptr<Signal> signal_;
  std::deque<Frame> frames_;
  std::shared_ptr<Connection> connection_;
  bool closed_ = false;
  bool left_ring_ = false;
  Status close_reason_;
  // Under signal_->mutex: the first listed chunk of `phase` at or after
  // next_placement_ that `head` matches, which then is being received
  // (placing_); null when none does. Chunks arrive in list order; small
  // ones are never offered, so the search goes on past them.
  const Placement* Match(const transport::PayloadHead& head, transport::RingPhase phase) {
    for (std::size_t i = next_placement_; i < placements_.size(); ++i) {
      const Placement& p = placements_[i];
      if (p.phase == phase && head.kind == transport::MessageKind::kRingChunk && head.tag == p.collective &&
          head.stage == static_cast<uint32_t>(p.phase) && head.source == p.source && head.step == p.step &&
          head.segment == p.segment && head.index == p.index && head.size == p.size) {
        next_placement_ = i + 1;
        placing_ = true;
        return &p;
      }
    }
    return nullptr;
  }

  std::vector<Placement> placements_;
  std::size_t next_placement_ = 0;
  bool placing_ = false;  // a payload is being received into placements_' memory
  float* summing_into_ = nullptr;  // loop thread: where ConsumePayload adds
  std::atomic<bool> wants_placement_{false};
  std::vector<std::unique_ptr<transport::FrameSlot>> slots_;
};

// Hands every accepted connection its own Link and queues it for Form().
class Acceptor : public transport::ConnectionHandler {
 public:
  explicit Acceptor(std::shared_ptr<Signal> signal) : signal_(std::move(signal)) {}

  void OnOpen(const std::shared_ptr<Connection>& connection) override {
    auto link = std::make_shared<Link>(signal_);
    link->OnOpen(connection);
    std::lock_guard<std::mutex> lock(signal_->mutex);
    links_[connection->id()] = link;
    pending_.push_back(link);
    signal_->changed.notify_all();
  }
  void OnFrame(Connection& connection, Frame frame) override {
    std::shared_ptr<Link> link = Find(connection.id());
    if (link) link->OnFrame(connection, std::move(frame));
  }
  bool WantsPlacement(Connection& connection) override {
    std::shared_ptr<Link> link = Find(connection.id());
    return link && link->WantsPlacement(connection);
  }
  uint8_t* PlacePayload(Connection& connection, const transport::PayloadHead& head) override {
    std::shared_ptr<Link> link = Find(connection.id());
    return link ? link->PlacePayload(connection, head) : nullptr;
  }
  bool ConsumesPayload(Connection& connection, const transport::PayloadHead& head) override {
    std::shared_ptr<Link> link = Find(connection.id());
    return link && link->ConsumesPayload(connection, head);
  }
  void ConsumePayload(Connection& connection, const uint8_t* piece, std::size_t offset, std::size_t size) override {
    std::shared_ptr<Link> link = Find(connection.id());
    if (link) link->ConsumePayload(connection, piece, offset, size);
  }
  void OnClose(Connection& connection, const Status& reason) override {
    std::shared_ptr<Link> link = Find(connection.id());
    if (link) link->OnClose(connection, reason);
    std::lock_guard<std::mutex> lock(signal_->mutex);
    links_.erase(connection.id());
  }
  // Under signal_->mutex.
  std::deque<std::shared_ptr<Link>>& pending() { return pending_; }

 private:
  std::shared_ptr<Link> Find(uint64_t id) {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    auto it = links_.find(id);
    return it == links_.end() ? nullptr : it->second;
  }
  std::shared_ptr<Signal> signal_;
  std::map<uint64_t, std::shared_ptr<Link>> links_;
  std::deque<std::shared_ptr<Link>> pending_;
};

uint32_t Remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<uint32_t>(left);
}

// How long peers exchange failure reports after a step deadline, and how long
// a failed collective waits for its last sends.
uint32_t GraceMs(uint32_t step_timeout_ms) {
  return std::max<uint32_t>(200, std::min<uint32_t>(1000, step_timeout_ms / 4));
}

// Next frame of one link (handshakes), or its close reason, or a deadline.
Result<Frame> PopFrom(Signal& signal, Link& link, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(signal.mutex);
  signal.changed.wait_until(lock, deadline, [&] { return link.has_frame() || link.closed(); });
  if (link.has_frame()) return link.TakeFrame();
  if (link.closed()) return link.close_reason();
  return Status(StatusCode::kDeadlineExceeded, "no answer within the join deadline");
}

class TcpPeerGroup : public PeerGroup {
 public:
  TcpPeerGroup(std::vector<PeerAddress> peers, uint32_t rank, const transport::KeyStore& keys,
               const PeerOptions& options)
      : peers_(std::move(peers)), rank_(rank), keys_(keys), options_(options),
        signal_(std::make_shared<Signal>()), acceptor_(std::make_shared<Acceptor>(signal_)) {
    connection_options_.idle_timeout_ms = 0;  // the collectives keep their own deadlines
    connection_options_.heartbeat_interval_ms = 1000;
    connection_options_.io_timeout_ms = options.step_timeout_ms;
  }

  ~TcpPeerGroup() override {
    DropLinks("peer group closed", /*graceful=*/false);
    if (listener_) listener_->Close();
  }

  Status Listen() {
    Result<std::shared_ptr<const transport::TlsContext>> tls = transport::CreateTlsIfConfigured(options_.tls);
    if (!tls.ok()) return tls.status();
    if (*tls && (!(*tls)->can_listen() || !(*tls)->can_dial())) {
      return InvalidArgument("peer TLS needs a certificate, its key and a CA file (peers both accept and dial)");
    }
    connection_options_.tls = *tls;
    const PeerAddress& self = peers_[rank_];
    auto listener = transport::TcpListener::Listen(loop_.loop(), self.host, self.port,
                                                   connection_options_, acceptor_);
    if (!listener.ok()) return Named(rank_, listener.status());
    listener_ = *listener;
    peers_[rank_].port = listener_->port();
    return Status::Ok();
  }

  uint16_t port() const override { return listener_ ? listener_->port() : 0; }
  void SetPort(uint32_t rank, uint16_t port) override {
    if (rank < peers_.size()) peers_[rank].port = port;
  }
  const std::vector<uint32_t>& members() const override { return members_; }
  uint32_t rank() const override { return rank_; }
  int FailedRank() const override { return failed_rank_; }
  AllReduceStats last_stats() const override { return stats_; }
  uint64_t total_bytes_sent() const override { return total_bytes_sent_; }

  Status Form(const std::vector<uint32_t>& members) override;
  Status Close() override {
    std::vector<std::shared_ptr<Link>> all = graph_links_;
    all.push_back(right_);
    all.push_back(left_);
    transport::LeaveMessage leave;
    leave.reason = "finished";
    auto frame = Encode(leave, connection_options_.limits);
    for (const auto& link : all) {
      std::shared_ptr<Connection> c;
      {
        std::lock_guard<std::mutex> lock(signal_->mutex);
        if (link) c = link->connection();
      }
      if (c && frame.ok()) (void)c->Send(*frame);
    }
    DropLinks("peer group closed", /*graceful=*/true);
    std::unique_lock<std::mutex> lock(signal_->mutex);
    const bool done = signal_->changed.wait_for(lock, std::chrono::seconds(5), [&] {
      return std::all_of(all.begin(), all.end(), [](const std::shared_ptr<Link>& k) { return !k || k->closed(); });
    });
    return done ? Status::Ok() : Status(StatusCode::kDeadlineExceeded, "neighbours did not close within 5 s");
  }
  Status AllReduce(float* data, std::size_t n, const std::string& codec_spec) override;
  Status IwpAllReduce(IwpAccumulator& accumulator, const float* weights, uint64_t seed,
                      uint32_t step, std::vector<uint32_t>* indices,
                      std::vector<float>* sums) override;
  Status GossipStep(float* model, const float* grad, std::size_t d, float lr,
                    const std::string& codec_spec, uint64_t step, GossipStats* stats) override;
  Result<uint64_t> AgreeStep(uint64_t step) override;

 private:
  std::string Name(uint32_t rank) const {
    return std::string(kFailurePrefix) + std::to_string(rank) + " (" + peers_[rank].id + ")";
  }
  Status Named(uint32_t rank, const Status& status) const {
    return Status(status.code(), Name(rank) + ": " + status.message());
  }
  uint32_t left() const { return members_[(position_ + members_.size() - 1) % members_.size()]; }
  uint32_t right() const { return members_[(position_ + 1) % members_.size()]; }

  void DropLinks(const char* why, bool graceful) {
    std::vector<std::shared_ptr<Connection>> connections;
    {
      std::lock_guard<std::mutex> lock(signal_->mutex);
      for (const auto& link : graph_links_) {
        if (link) connections.push_back(link->connection());
      }
      if (right_) connections.push_back(right_->connection());
      if (left_) connections.push_back(left_->connection());
    }
    // Re-forming closes gracefully: a failure report still queued on these
    // links reaches the neighbours before the end of stream, so they blame
    // the same rank instead of this peer's closing.
    for (const auto& c : connections) {
      if (!c) continue;
      if (graceful) {
        c->Close();
      } else {
        c->Abort(Status(StatusCode::kCancelled, why));
      }
    }
    right_.reset();
    left_.reset();
    graph_links_.clear();
    graph_ranks_.clear();
    graph_weights_.clear();
  }

  // Dials `to` and joins; *out is the link.
  Status Dial(uint32_t to, uint32_t generation, Clock::time_point deadline, std::shared_ptr<Link>* out);
  // Takes the joins of every rank in `from` (any order); out[i] is from[i]'s link.
  Status Accept(const std::vector<uint32_t>& from, uint32_t generation, Clock::time_point deadline,
                std::vector<std::shared_ptr<Link>>* out);
  Status FormGraph(Clock::time_point deadline);
  // Graph gossip: the next data frame from graph_links_[i]; failure reports
  // and closes on any link end the wait. kCancelled: that neighbour left.
  Result<Frame> NextFromNeighbour(std::size_t i, Clock::time_point deadline);
  // A gossip neighbour: its rank, the link sent to, the next data frame heard
  // from it, its mixing weight.
  struct Edge {
    uint32_t rank;
    Link* send;
    std::function<Result<Frame>()> next;
    float weight;
  };
  std::vector<Edge> GossipEdges(Clock::time_point deadline, bool left_is_ok);
  Status Send(Link& link, uint32_t to, Result<transport::OutFrame> frame);
  // A send to `to` failed with `s`: OK when that neighbour has left, else the
  // step fails (blaming the peer a queued failure report names, or `to`).
  Status SendFailed(Link& link, uint32_t to, const Status& s);
  // Fails the step: records the failed rank and reports it both ways.
  Status Fail(int failed, const Status& status);
  // Waits for the next data frame from one neighbour; failure reports from
  // either side end the wait. `left_is_ok` (gossip): that neighbour having
  // left (Leave, then its close) is kCancelled, not a failure.
  Result<Frame> NextFrom(bool want_right, Clock::time_point deadline, bool left_is_ok = false);
  Result<Frame> NextFromLeft(Clock::time_point deadline) { return NextFrom(false, deadline); }
  Status ExpectChunk(const Frame& frame, transport::RingPhase phase, uint32_t step,
                     uint32_t segment, uint32_t index, uint32_t count, uint64_t total,
                     uint64_t offset, transport::RingChunkMessage* out);

  std::vector<PeerAddress> peers_;
  const uint32_t rank_;
  const transport::KeyStore& keys_;
  PeerOptions options_;
  transport::ConnectionOptions connection_options_;
  std::shared_ptr<Signal> signal_;
  std::shared_ptr<Acceptor> acceptor_;
  transport::EventLoopThread loop_;
  std::shared_ptr<transport::TcpListener> listener_;

  std::vector<uint32_t> members_;
  std::size_t position_ = 0;
  uint32_t generation_ = 0;
  std::shared_ptr<Link> right_;  // we send here
  std::shared_ptr<Link> left_;   // we receive from here
  // Torus: one two-way link per graph neighbour, their ranks and Metropolis weights.
  std::vector<std::shared_ptr<Link>> graph_links_;
  std::vector<uint32_t> graph_ranks_;
  std::vector<float> graph_weights_;
  bool lenient_step_ = false;  // gossip after a re-formation: neighbours' steps may differ
  std::vector<float> gathered_;  // IWP: this peer's gathered values, kept until the sum is done
  uint64_t collective_ = 0;
  int failed_rank_ = -1;
  bool reported_ = false;
  AllReduceStats stats_;
  uint64_t total_bytes_sent_ = 0;

  Status SendGossip(Link& link, uint32_t to, uint64_t step, const std::string& spec,
                    const uint8_t* bytes, std::size_t size, uint64_t* sent, Clock::time_point deadline);
  // Receives one neighbour's model; *sender_step is the step it was sent at.
  Status ReceiveGossip(uint32_t from, const std::function<Result<Frame>()>& next, uint64_t step,
                       std::size_t max_size, std::vector<uint8_t>* out, uint64_t* sender_step);

  // A slot to encode the next chunk to `link` in: a free one, a new one
  // while there are fewer than kMaxSlots, or the first one released (until
  // the deadline or `link` closes).
  Result<transport::FrameSlot*> FreeSlot(Link& link, Clock::time_point deadline);
  // Waits until no queued frame borrows the caller's vector any more (all
  // slots released, or the sending link closed, so nothing reads them). A
  // collective calls it before returning, on every path, so the caller may
  // change or free its vector. Aborts the sending link when the sends do not
  // complete in time.
  void ReleaseBorrowed(Clock::time_point deadline);
  // Stops placing all-gather chunks into the caller's vector and waits until
  // none is being received there (part of ReleaseBorrowed).
  void ReleasePlaced(Clock::time_point deadline);
  static constexpr std::size_t kMaxSlots = 64;  // per link

  // Buffers reused across collectives (steady state allocates nothing here).
  std::vector<uint8_t> encoded_;
  std::unique_ptr<Codec> ring_codec_;  // made once per spec, reused
  std::string ring_spec_;
  std::unique_ptr<Codec> gossip_codec_;
  std::string gossip_spec_;
  std::vector<float> own_recovered_;
  std::vector<std::vector<float>> recovered_;
  std::vector<std::vector<uint8_t>> received_;
  std::vector<MoniquaNeighbour> mix_;
  // Replica gossip (ChocoSpec): gamma (0: not in use), x^_i, the neighbours'
  // x^_j (one per gossip edge, in edge order), x_i - x^_i, and the members
  // the copies belong to.
  float choco_gamma_ = 0;
  std::vector<float> choco_public_;
  std::vector<std::vector<float>> choco_replicas_;
  std::vector<float> choco_diff_;
  std::vector<uint32_t> choco_members_;
};

Status TcpPeerGroup::Dial(uint32_t to, uint32_t generation, Clock::time_point deadline,
                          std::shared_ptr<Link>* out) {
  const PeerAddress& address = peers_[to];
  const transport::Key* key = keys_.Find(peers_[rank_].id);
  if (key == nullptr) return InvalidArgument("no key for this peer's id '" + peers_[rank_].id + "'");
  Status last(StatusCode::kDeadlineExceeded, "not reachable within the join deadline");
  while (Remaining(deadline) > 0) {
    auto link = std::make_shared<Link>(signal_);
    auto connection = transport::TcpConnectAndWait(loop_.loop(), address.host, address.port,
                                                   connection_options_, link,
                                                   std::min<uint32_t>(Remaining(deadline), 2000));
    if (!connection.ok()) {
      last = connection.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the neighbour may start later
      continue;
    }
    transport::ClientHandshake handshake(peers_[rank_].id, *key, transport::SystemCrypto());
    auto join = handshake.Start();
    if (!join.ok()) return join.status();
    join->resume_round = generation;
    const transport::FrameLimits& limits = connection_options_.limits;
    Status s = (*connection)->Send(Encode(*join, limits).value());
    if (!s.ok()) return Named(to, s);
    auto frame = PopFrom(*signal_, *link, deadline);
    if (!frame.ok()) return Named(to, frame.status());
    if (frame->kind() == MessageKind::kError) {
      auto e = transport::DecodeError(*frame);
      return Named(to, e.ok() ? transport::ToStatus(*e) : e.status());
    }
    auto challenge = transport::DecodeChallenge(*frame);
    if (!challenge.ok()) return Named(to, challenge.status());
    auto auth = handshake.OnChallenge(*challenge);
    if (!auth.ok()) return Named(to, auth.status());
    s = (*connection)->Send(Encode(*auth, limits).value());
    if (!s.ok()) return Named(to, s);
    frame = PopFrom(*signal_, *link, deadline);
    if (!frame.ok()) return Named(to, frame.status());
    auto response = transport::DecodeJoinResponse(*frame);
    if (!response.ok()) return Named(to, response.status());
    s = handshake.OnJoinResponse(*response);
    if (!s.ok()) return Named(to, s);
    *out = link;
    return Status::Ok();
  }
  return Named(to, last);
}

Status TcpPeerGroup::Accept(const std::vector<uint32_t>& expected, uint32_t generation,
                            Clock::time_point deadline, std::vector<std::shared_ptr<Link>>* out) {
  const transport::FrameLimits& limits = connection_options_.limits;
  out->assign(expected.size(), nullptr);
  std::size_t joined = 0;
  while (joined < expected.size() && Remaining(deadline) > 0) {
    std::shared_ptr<Link> link;
    {
      std::unique_lock<std::mutex> lock(signal_->mutex);
      signal_->changed.wait_until(lock, deadline, [&] { return !acceptor_->pending().empty(); });
      if (acceptor_->pending().empty()) break;
      link = acceptor_->pending().front();
      acceptor_->pending().pop_front();
    }
    std::shared_ptr<Connection> connection;
    {
      std::lock_guard<std::mutex> lock(signal_->mutex);
      connection = link->connection();
    }
    if (!connection) continue;
    auto refuse = [&](const Status& why) {
      connection->Abort(why, /*notify_peer=*/true);
    };
    auto frame = PopFrom(*signal_, *link, deadline);
    if (!frame.ok()) continue;
    auto join = transport::DecodeJoin(*frame);
    if (!join.ok()) { refuse(join.status()); continue; }
    std::size_t which = expected.size();
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if ((*out)[i] == nullptr && join->device_id == peers_[expected[i]].id) which = i;
    }
    if (which == expected.size() || join->resume_round != generation) {
      refuse(Status(StatusCode::kFailedPrecondition, "not this peer's neighbour in this ring"));
      continue;
    }
    const uint32_t from = expected[which];
    transport::ServerHandshake handshake(keys_, transport::SystemCrypto());
    auto challenge = handshake.OnJoin(*join);
    if (!challenge.ok()) { refuse(challenge.status()); continue; }
    (void)connection->Send(Encode(*challenge, limits).value());
    frame = PopFrom(*signal_, *link, deadline);
    if (!frame.ok()) continue;
    auto auth = transport::DecodeAuthenticate(*frame);
    if (!auth.ok()) { refuse(auth.status()); continue; }
    auto response = handshake.OnAuthenticate(*auth);
    if (!response.ok()) { refuse(response.status()); return Named(from, response.status()); }
    (void)connection->Send(Encode(*response, limits).value());
    (*out)[which] = link;
    ++joined;
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if ((*out)[i] == nullptr) {
      return Named(expected[i], Status(StatusCode::kDeadlineExceeded, "did not join within the deadline"));
    }
  }
  return Status::Ok();
}

Status TcpPeerGroup::Form(const std::vector<uint32_t>& members) {
  DropLinks("ring re-formed", /*graceful=*/true);
  std::vector<uint32_t> ring = members;
  if (ring.empty()) {
    for (uint32_t r = 0; r < peers_.size(); ++r) ring.push_back(r);
  }
  std::sort(ring.begin(), ring.end());
  auto self = std::find(ring.begin(), ring.end(), rank_);
  if (self == ring.end() || ring.back() >= peers_.size()) {
    return InvalidArgument("ring members must be ranks of the peer list and include this peer");
  }
  // The generation is the same on every member: it counts formations, and
  // every member re-forms after the same failures.
  ++generation_;
  members_ = ring;
  position_ = static_cast<std::size_t>(self - ring.begin());
  failed_rank_ = -1;
  reported_ = false;
  collective_ = 0;
  lenient_step_ = generation_ > 1;
  if (members_.size() == 1) return Status::Ok();
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(options_.join_timeout_ms);
  if (options_.graph != GossipGraph::kRing) return FormGraph(deadline);
  Status accepted;
  std::vector<std::shared_ptr<Link>> accepted_links;
  std::thread acceptor([&] { accepted = Accept({left()}, generation_, deadline, &accepted_links); });
  Status dialled = Dial(right(), generation_, deadline, &right_);
  acceptor.join();
  if (!dialled.ok()) return dialled;
  if (accepted.ok()) left_ = accepted_links[0];
  return accepted;
}

// Graph links: one connection per edge, dialled by the lower rank, carrying
// data both ways. Weights: Metropolis over the graph of the members.
Status TcpPeerGroup::FormGraph(Clock::time_point deadline) {
  const auto neighbours = GraphNeighbours(options_.graph, static_cast<uint32_t>(members_.size()));
  const std::vector<double> w = MetropolisWeights(neighbours);
  std::vector<uint32_t> lower, higher;
  for (uint32_t j : neighbours[position_]) {
    graph_ranks_.push_back(members_[j]);
    graph_weights_.push_back(static_cast<float>(w[position_ * members_.size() + j]));
    (members_[j] < rank_ ? lower : higher).push_back(members_[j]);
  }
  Status accepted;
  std::vector<std::shared_ptr<Link>> accepted_links;
  std::thread acceptor([&] { accepted = Accept(lower, generation_, deadline, &accepted_links); });
  Status dialled;
  std::vector<std::shared_ptr<Link>> dialled_links(higher.size());
  for (std::size_t i = 0; i < higher.size() && dialled.ok(); ++i) {
    dialled = Dial(higher[i], generation_, deadline, &dialled_links[i]);
  }
  acceptor.join();
  if (!dialled.ok()) return dialled;
  if (!accepted.ok()) return accepted;
  for (uint32_t r : graph_ranks_) {
    auto lo = std::find(lower.begin(), lower.end(), r);
    graph_links_.push_back(lo != lower.end() ? accepted_links[static_cast<std::size_t>(lo - lower.begin())]
                                             : dialled_links[static_cast<std::size_t>(
                                                   std::find(higher.begin(), higher.end(), r) - higher.begin())]);
  }
  return Status::Ok();
}

// Failure reports (Error messages between peers):
//   "peer rank R failed: <reason>"         R is gone (its link closed) or was
//                                          found to be the stalled one;
//   "peer rank A waits on peer rank B"     A's step deadline passed while it
//                                          waited for B (a suspicion).
// A stalled peer stalls everyone behind it, and every one of them times out
// at about the same time. Each sends its suspicion both ways; after a short
// grace every survivor holds every suspicion and blames the rank that is
// waited on but waits on nobody: the stalled one. Peers agree without a vote.
struct Report {
  bool failed = false;  // false: a suspicion
  int a = -1;           // failed rank, or the waiting rank
  int b = -1;           // the rank waited on
};

bool ParseRank(std::string_view text, std::size_t* at, int* rank) {
  const std::size_t n = sizeof(kFailurePrefix) - 1;
  if (text.compare(*at, n, kFailurePrefix) != 0) return false;
  std::size_t i = *at + n;
  int value = 0;
  const std::size_t start = i;
  for (; i < text.size() && i < start + 6 && text[i] >= '0' && text[i] <= '9'; ++i) {
    value = value * 10 + (text[i] - '0');
  }
  if (i == start) return false;
  *rank = value;
  *at = i;
  return true;
}

bool ParseReport(std::string_view text, Report* report) {
  std::size_t at = 0;
  if (!ParseRank(text, &at, &report->a)) return false;
  constexpr std::string_view kFailed = " failed";
  constexpr std::string_view kWaits = " waits on ";
  if (text.compare(at, kFailed.size(), kFailed) == 0) {
    report->failed = true;
    return true;
  }
  if (text.compare(at, kWaits.size(), kWaits) != 0) return false;
  at += kWaits.size();
  report->failed = false;
  return ParseRank(text, &at, &report->b);
}

Status TcpPeerGroup::Send(Link& link, uint32_t to, Result<transport::OutFrame> frame) {
  if (!frame.ok()) return frame.status();
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    connection = link.connection();
  }
  Status s = connection ? connection->Send(std::move(*frame))
                        : Status(StatusCode::kUnavailable, "link closed");
  if (s.ok()) return Status::Ok();
  return SendFailed(link, to, s);
}

Status TcpPeerGroup::SendFailed(Link& link, uint32_t to, const Status& s) {
  {
    // A neighbour that finished and left needs nothing more from this peer.
    std::lock_guard<std::mutex> lock(signal_->mutex);
    if (link.left_ring()) return Status::Ok();
  }
  // The neighbour may have closed after reporting another peer's failure:
  // the report, not the close, names the failed peer.
  Frame report;
  bool have_report = false;
  {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    have_report = (left_ && left_->TakeError(&report)) || (right_ && right_->TakeError(&report));
    for (const auto& g : graph_links_) have_report = have_report || g->TakeError(&report);
  }
  if (have_report) {
    auto e = transport::DecodeError(report);
    Report parsed;
    if (e.ok() && ParseReport(e->message, &parsed) && parsed.failed && parsed.a >= 0 &&
        parsed.a < static_cast<int>(peers_.size())) {
      return Fail(parsed.a, Status(e->code, std::string(e->message)));
    }
  }
  return Fail(static_cast<int>(to), Named(to, s));
}

Status TcpPeerGroup::Fail(int failed, const Status& status) {
  if (failed_rank_ < 0) failed_rank_ = failed;
  if (!reported_ && failed_rank_ >= 0) {
    reported_ = true;
    transport::ErrorMessage report;
    report.code = StatusCode::kUnavailable;
    std::string text = std::string(kFailurePrefix) + std::to_string(failed_rank_) + " failed: " +
                       status.message();
    if (text.size() > transport::kMaxReasonBytes) text.resize(transport::kMaxReasonBytes);
    report.message = text;
    auto frame = Encode(report, connection_options_.limits);
    if (frame.ok()) {
      std::vector<Link*> links = {right_.get(), left_.get()};
      for (const auto& g : graph_links_) links.push_back(g.get());
      for (Link* link : links) {
        if (link == nullptr) continue;
        std::shared_ptr<Connection> connection;
        {
          std::lock_guard<std::mutex> lock(signal_->mutex);
          connection = link->connection();
        }
        if (connection) (void)connection->Send(*frame);
      }
    }
  }
  return status;
}

Result<Frame> TcpPeerGroup::NextFrom(bool want_right, Clock::time_point deadline, bool left_is_ok) {
  // `from` is the neighbour whose data we wait for, `to` the other one.
  const uint32_t from = want_right ? right() : left();
  const uint32_t to = want_right ? left() : right();
  Link* want = want_right ? right_.get() : left_.get();
  Link* other = want_right ? left_.get() : right_.get();
  const int n = static_cast<int>(peers_.size());
  Clock::time_point wait_until = deadline;
  bool grace = false;
  std::map<int, int> waits_on;  // waiting rank -> rank it waits on
  auto send_text = [&](Link* link, const std::string& text) {
    transport::ErrorMessage m;
    m.code = StatusCode::kUnavailable;
    m.message = text;
    auto frame = Encode(m, connection_options_.limits);
    if (!frame.ok() || link == nullptr) return;
    std::shared_ptr<Connection> connection;
    {
      std::lock_guard<std::mutex> lock(signal_->mutex);
      connection = link->connection();
    }
    if (connection) (void)connection->Send(*frame);
  };
  for (;;) {
    Frame frame;
    bool from_other = false;
    Status closed;
    int closed_rank = -1;
    bool left = false;
    {
      std::unique_lock<std::mutex> lock(signal_->mutex);
      signal_->changed.wait_until(lock, wait_until, [&] {
        return want->has_frame() || want->closed() || other->front_is_error() ||
               (other->closed() && !other->left_ring());
      });
      // From the other side only reports are taken here; its data (gossip)
      // stays queued for the call that waits for it.
      if (other->front_is_error()) {
        frame = other->TakeFrame();
        from_other = true;
      } else if (want->has_frame()) {
        frame = want->TakeFrame();
      } else if (other->TakeError(&frame)) {
        from_other = true;  // a report that arrived behind data, before a close
      } else if (want->closed() && left_is_ok && want->left_ring()) {
        left = true;  // it finished: everything it sent has been taken
      } else if (want->closed()) {
        closed = want->close_reason();
        closed_rank = static_cast<int>(from);
      } else if (other->closed() && !other->left_ring()) {
        closed = other->close_reason();
        closed_rank = static_cast<int>(to);
      }
    }
    const bool from_right = from_other != want_right;
    const uint32_t sender = from_other ? to : from;
    if (frame.kind() == MessageKind::kError) {
      auto e = transport::DecodeError(frame);
      if (!e.ok()) return Fail(static_cast<int>(sender), Named(sender, e.status()));
      Report report;
      if (!ParseReport(e->message, &report) || report.a < 0 || report.a >= n || report.b >= n) {
        // A neighbour that gives up for its own reason.
        return Fail(static_cast<int>(sender), Named(sender, transport::ToStatus(*e)));
      }
      if (report.failed) return Fail(report.a, Status(e->code, std::string(e->message)));
      if (report.a != static_cast<int>(rank_) && waits_on.count(report.a) == 0) {
        waits_on[report.a] = report.b;
        // Pass it on, away from where it came from.
        send_text(from_right ? left_.get() : right_.get(), std::string(e->message));
      }
      continue;
    }
    if (frame.kind() != MessageKind::kNone) return frame;
    if (left) return Status(StatusCode::kCancelled, Name(from) + " has left");
    if (closed_rank >= 0) {
      return Fail(closed_rank, Named(static_cast<uint32_t>(closed_rank), closed));
    }
    if (!grace) {
      grace = true;
      waits_on[static_cast<int>(rank_)] = static_cast<int>(from);
      const std::string text = std::string(kFailurePrefix) + std::to_string(rank_) + " waits on " +
                               kFailurePrefix + std::to_string(from);
      send_text(right_.get(), text);
      send_text(left_.get(), text);
      wait_until = Clock::now() + std::chrono::milliseconds(GraceMs(options_.step_timeout_ms));
      continue;
    }
    // The rank someone waits on that waits on nobody is the stalled one.
    int culprit = static_cast<int>(from);
    for (const auto& w : waits_on) {
      if (waits_on.count(w.second) == 0) {
        culprit = w.second;
        break;
      }
    }
    const uint32_t c = static_cast<uint32_t>(culprit);
    return Fail(culprit, Named(c, Status(StatusCode::kDeadlineExceeded,
                                         "made no progress within the step deadline of " +
                                             std::to_string(options_.step_timeout_ms) + " ms")));
  }
}

Result<Frame> TcpPeerGroup::NextFromNeighbour(std::size_t i, Clock::time_point deadline) {
  Link* want = graph_links_[i].get();
  const int n = static_cast<int>(peers_.size());
  for (;;) {
    Frame frame;
    uint32_t sender = graph_ranks_[i];
    Status closed;
    int closed_rank = -1;
    bool left = false;
    {
      std::unique_lock<std::mutex> lock(signal_->mutex);
      auto other_event = [&] {
        for (const auto& g : graph_links_) {
          if (g.get() != want && (g->front_is_error() || (g->closed() && !g->left_ring()))) return true;
        }
        return false;
      };
      signal_->changed.wait_until(lock, deadline, [&] {
        return want->has_frame() || want->closed() || want->left_ring() || other_event();
      });
      // Failure reports first, from any neighbour (they may sit behind data).
      for (std::size_t k = 0; k < graph_links_.size() && frame.kind() == MessageKind::kNone; ++k) {
        if (graph_links_[k]->TakeError(&frame)) sender = graph_ranks_[k];
      }
      if (frame.kind() == MessageKind::kNone) {
        if (want->has_frame()) {
          frame = want->TakeFrame();
        } else if (want->left_ring()) {
          left = true;
        } else {
          for (std::size_t k = 0; k < graph_links_.size(); ++k) {
            const Link& g = *graph_links_[k];
            if (g.closed() && !g.left_ring()) {
              closed = g.close_reason();
              closed_rank = static_cast<int>(graph_ranks_[k]);
              if (k == i) break;
            }
          }
        }
      }
    }
    if (frame.kind() == MessageKind::kError) {
      auto e = transport::DecodeError(frame);
      if (!e.ok()) return Fail(static_cast<int>(sender), Named(sender, e.status()));
      Report report;
      if (!ParseReport(e->message, &report) || report.a < 0 || report.a >= n) {
        return Fail(static_cast<int>(sender), Named(sender, transport::ToStatus(*e)));
      }
      if (report.failed) return Fail(report.a, Status(e->code, std::string(e->message)));
      continue;  // suspicions are a ring matter
    }
    if (frame.kind() != MessageKind::kNone) return frame;
    if (left) return Status(StatusCode::kCancelled, Name(graph_ranks_[i]) + " has left");
    if (closed_rank >= 0) return Fail(closed_rank, Named(static_cast<uint32_t>(closed_rank), closed));
    const uint32_t r = graph_ranks_[i];
    return Fail(static_cast<int>(r), Named(r, Status(StatusCode::kDeadlineExceeded,
                                                     "sent nothing within the step deadline of " +
                                                         std::to_string(options_.step_timeout_ms) + " ms")));
  }
}

Status TcpPeerGroup::ExpectChunk(const Frame& frame, transport::RingPhase phase, uint32_t step,
                                 uint32_t segment, uint32_t index, uint32_t count, uint64_t total,
                                 uint64_t offset, transport::RingChunkMessage* out) {
  const uint32_t from = left();
  auto m = transport::DecodeRingChunk(frame, connection_options_.limits);
  if (!m.ok()) return Fail(static_cast<int>(from), Named(from, m.status()));
  const auto& p = m->payload;
  const bool raw = m->codec_spec.empty();
  if (m->collective_id != collective_ || m->phase != phase || m->step != step ||
      m->segment != segment || m->source_rank != from || p.index != index || p.count != count ||
      (raw && (p.total_size != total || p.offset != offset))) {
    return Fail(static_cast<int>(from),
                Named(from, Corrupt("unexpected ring chunk (collective " +
                                    std::to_string(m->collective_id) + ", step " +
                                    std::to_string(m->step) + ", segment " +
                                    std::to_string(m->segment) + ", chunk " +
                                    std::to_string(p.index) + ")")));
  }
  *out = *m;
  return Status::Ok();
}

Result<transport::FrameSlot*> TcpPeerGroup::FreeSlot(Link& link, Clock::time_point deadline) {
  auto& slots = link.slots();
  for (;;) {
    for (const auto& slot : slots) {
      if (!slot->busy()) return slot.get();
    }
    if (slots.size() < kMaxSlots) {
      slots.push_back(std::make_unique<transport::FrameSlot>());
      return slots.back().get();
    }
    std::unique_lock<std::mutex> lock(signal_->mutex);
    signal_->waiting_for_sends = true;
    const bool ready = signal_->changed.wait_until(lock, deadline, [&] {
      if (link.closed()) return true;
      for (const auto& slot : slots) {
        if (!slot->busy()) return true;
      }
      return false;
    });
    signal_->waiting_for_sends = false;
    if (link.closed()) return Status(StatusCode::kUnavailable, "link closed");
    if (!ready) return Status(StatusCode::kDeadlineExceeded, "sends did not complete within the step deadline");
  }
}

void TcpPeerGroup::ReleaseBorrowed(Clock::time_point deadline) {
  ReleasePlaced(deadline);
  auto released = [&] {
    if (!right_ || right_->closed()) return true;
    for (const auto& slot : right_->slots()) {
      if (slot->busy()) return false;
    }
    return true;
  };
  std::unique_lock<std::mutex> lock(signal_->mutex);
  if (released()) return;
  // A healthy neighbour takes the last chunks at once; a stalled one gets a
  // short grace past the step deadline, then its link is closed (the ring
  // has failed by then anyway).
  const Clock::time_point until =
      std::max(deadline, Clock::now() + std::chrono::milliseconds(GraceMs(options_.step_timeout_ms)));
  signal_->waiting_for_sends = true;
  if (!signal_->changed.wait_until(lock, until, released)) {
    std::shared_ptr<Connection> c = right_->connection();
    lock.unlock();
    if (c) c->Abort(Status(StatusCode::kDeadlineExceeded, "ring chunks not sent within the step deadline"));
    lock.lock();
    // Once closed, the socket reads nothing more from the vector.
    signal_->changed.wait_for(lock, std::chrono::seconds(5), released);
  }
  signal_->waiting_for_sends = false;
}

void TcpPeerGroup::ReleasePlaced(Clock::time_point deadline) {
  if (!left_) return;
  std::unique_lock<std::mutex> lock(signal_->mutex);
  if (left_->StopPlacement()) return;
  // A chunk is arriving into the vector (only after a failure: on success
  // every placed chunk has been taken). Let it finish, or close the link.
  const Clock::time_point until =
      std::max(deadline, Clock::now() + std::chrono::milliseconds(GraceMs(options_.step_timeout_ms)));
  if (!signal_->changed.wait_until(lock, until, [&] { return !left_->placing(); })) {
    std::shared_ptr<Connection> c = left_->connection();
    lock.unlock();
    if (c) c->Abort(Status(StatusCode::kDeadlineExceeded, "ring chunk not received within the step deadline"));
    lock.lock();
    // Once closed, the socket writes nothing more into the vector.
    signal_->changed.wait_for(lock, std::chrono::seconds(5), [&] { return !left_->placing(); });
  }
}

}  // namespace

// ---- ring all-reduce --------------------------------------------------------

Status TcpPeerGroup::AllReduce(float* data, std::size_t n, const std::string& codec_spec) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::milliseconds(options_.step_timeout_ms);
  stats_ = AllReduceStats{};
  ++collective_;
  if (failed_rank_ >= 0) {
    return Status(StatusCode::kFailedPrecondition,
                  "the ring lost peer rank " + std::to_string(failed_rank_) + "; Form() again first");
  }
  const std::size_t p = members_.size();
  if (options_.graph != GossipGraph::kRing && p > 1) {
    return Status(StatusCode::kFailedPrecondition, "ring collectives need a group formed as a ring");
  }
  if (p == 1 || n == 0) return Status::Ok();
  if (codec_spec != ring_spec_ || (ring_codec_ == nullptr && !codec_spec.empty())) {
    ring_codec_.reset();
    ring_spec_ = codec_spec;
    if (!codec_spec.empty()) {
      auto made = MakeCodec(codec_spec);
      if (!made.ok()) return made.status();
      if ((*made)->needs_side_info()) {
        return InvalidArgument("codec '" + codec_spec +
                               "' needs side information: it does not compose with ring reduction");
      }
      ring_codec_ = std::move(*made);
    }
  }
  Codec* codec = ring_codec_.get();
  // On every return from here on, no queued frame may still read `data`.
  struct ReleaseOnReturn {
    TcpPeerGroup* group;
    Clock::time_point deadline;
    ~ReleaseOnReturn() { group->ReleaseBorrowed(deadline); }
  } release_on_return{this, deadline};
  // A chunk (raw or encoded) must fit one frame; codec headers need a little room.
  const std::size_t frame_floats = (connection_options_.limits.MaxChunkBytes() - 4096) / sizeof(float);
  std::size_t want = options_.chunk_floats;
  if (want == 0) want = std::min<std::size_t>(std::max<std::size_t>((n + p - 1) / p / p, 1u << 18), 1u << 20);
  const std::size_t chunk = std::max<std::size_t>(1, std::min<std::size_t>(want, frame_floats));
  auto seg_begin = [&](std::size_t s) { return s * n / p; };
  auto seg_size = [&](std::size_t s) { return seg_begin(s + 1) - seg_begin(s); };
  auto chunks_of = [&](std::size_t s) {
    return static_cast<uint32_t>(std::max<std::size_t>(1, (seg_size(s) + chunk - 1) / chunk));
  };
  if (codec) {
    const std::size_t need = codec->MaxEncodedSize(std::min(chunk, n));
    if (encoded_.size() < need) encoded_.resize(need);
  }
  const uint32_t to = right();
  const uint32_t from = left();
  const std::string spec = codec ? codec->spec() : std::string();
  CodecContext context;
  context.session_seed = 0;
  context.round = static_cast<uint32_t>(collective_);

  // Sends chunk k of segment s (its current values) for (phase, step).
  // With a codec, `decode_back` makes the sender take the decoded values too
  // (all-gather: every peer must end with the same bits).
  auto send_chunk = [&](transport::RingPhase phase, uint32_t step, std::size_t s, uint32_t k,
                        bool decode_back) -> Status {
    float* begin = data + seg_begin(s) + static_cast<std::size_t>(k) * chunk;
    const std::size_t len = std::min(chunk, seg_size(s) - std::min(seg_size(s), static_cast<std::size_t>(k) * chunk));
    transport::RingChunkMessage m;
    m.collective_id = collective_;
    m.step = step;
    m.phase = phase;
    m.source_rank = rank_;
    m.segment = static_cast<uint32_t>(s);
    m.payload.index = k;
    m.payload.count = chunks_of(s);
    if (!codec) {
      m.payload.total_size = seg_size(s) * sizeof(float);
      m.payload.offset = static_cast<uint64_t>(k) * chunk * sizeof(float);
      m.payload.data = reinterpret_cast<const uint8_t*>(begin);
      m.payload.size = len * sizeof(float);
    } else {
      // Each chunk is one self-contained codec payload.
      context.tensor_id = m.segment * 65536u + k;
      context.sender_id = rank_;
      auto size = codec->Encode(begin, len, context, encoded_.data(), encoded_.size());
      if (!size.ok()) return size.status();
      if (decode_back) {
        Status s2 = codec->Decode(encoded_.data(), *size, context, begin, len);
        if (!s2.ok()) return s2;
      }
      m.codec_spec = spec;
      m.payload.index = 0;
      m.payload.count = 1;
      m.payload.total_size = *size;
      m.payload.offset = 0;
      m.payload.data = encoded_.data();
      m.payload.size = *size;
      m.payload.index = k;  // chunk position within the segment
      m.payload.count = chunks_of(s);
    }
    stats_.bytes_sent += m.payload.size;
    // Raw floats are sent from the vector itself (the frame borrows them; see
    // ReleaseBorrowed); codec payloads are copied into the slot's frame, as
    // encoded_ is reused for the next chunk.
    auto slot = FreeSlot(*right_, deadline);
    if (!slot.ok() && slot.status().code() == StatusCode::kUnavailable) {
      return SendFailed(*right_, to, slot.status());  // the link closed
    }
    if (!slot.ok()) {
      return Fail(static_cast<int>(to), Named(to, Status(slot.status().code(), "cannot send a ring chunk: " +
                                                                                  slot.status().message())));
    }
    return Send(*right_, to,
                Encode(m, connection_options_.limits, **slot,
                       codec ? transport::PayloadMode::kCopy : transport::PayloadMode::kBorrow));
  };

  // Receives chunk k of segment s for (phase, step) and adds it (reduce) or
  // stores it (gather).
  auto receive_chunk = [&](transport::RingPhase phase, uint32_t step, std::size_t s, uint32_t k,
                           bool add) -> Status {
    auto frame = NextFromLeft(deadline);
    if (!frame.ok()) return frame.status();
    float* begin = data + seg_begin(s) + static_cast<std::size_t>(k) * chunk;
    const std::size_t len = std::min(chunk, seg_size(s) - std::min(seg_size(s), static_cast<std::size_t>(k) * chunk));
    transport::RingChunkMessage m;
    Status st = ExpectChunk(*frame, phase, step, static_cast<uint32_t>(s), k, chunks_of(s),
                            seg_size(s) * sizeof(float), static_cast<uint64_t>(k) * chunk * sizeof(float), &m);
    if (!st.ok()) return st;
    if (!codec) {
      if (m.payload.size != len * sizeof(float)) {
        return Fail(static_cast<int>(from), Named(from, Corrupt("ring chunk of the wrong size")));
      }
      if (add && m.payload.data == nullptr) {
        // Already added as it arrived (Link::ConsumePayload).
      } else if (add) {
        // Payload bytes start 16-byte aligned in the verified frame, so they
        // are read in place as floats.
        const float* in = reinterpret_cast<const float*>(static_cast<const void*>(m.payload.data));
        AddFloats(in, len, begin);
      } else if (m.payload.data == nullptr) {
        return Fail(static_cast<int>(from), Named(from, Corrupt("all-gather chunk without its payload")));
      } else if (m.payload.data != reinterpret_cast<const uint8_t*>(begin)) {
        std::memcpy(begin, m.payload.data, len * sizeof(float));  // not placed
      }
      return Status::Ok();
    }
    if (m.codec_spec != spec) {
      return Fail(static_cast<int>(from), Named(from, Corrupt("ring chunk with another codec")));
    }
    CodecContext c = context;
    c.tensor_id = static_cast<uint32_t>(s) * 65536u + k;
    c.sender_id = from;
    Status d = add ? codec->DecodeAccumulate(m.payload.data, m.payload.size, c, 1.0f, begin, len)
                   : codec->Decode(m.payload.data, m.payload.size, c, begin, len);
    if (!d.ok()) return Fail(static_cast<int>(from), Named(from, d));
    return Status::Ok();
  };

  using transport::RingPhase;
  const std::size_t r = position_;
  if (!codec && left_) {
    // Raw chunks go straight into the vector: reduce-scatter ones are added
    // as they arrive, all-gather ones stored (Link::PlacePayload), in the
    // order the left neighbour sends them.
    std::lock_guard<std::mutex> lock(signal_->mutex);
    auto& places = left_->placements();
    places.clear();
    for (RingPhase phase : {RingPhase::kReduceScatter, RingPhase::kAllGather}) {
      for (uint32_t t = 0; t + 1 < p; ++t) {
        const std::size_t s = phase == RingPhase::kReduceScatter ? (r + 2 * p - t - 1) % p : (r + 2 * p - t) % p;
        for (uint32_t k = 0; k < chunks_of(s); ++k) {
          const std::size_t at = static_cast<std::size_t>(k) * chunk;
          const std::size_t len = std::min(chunk, seg_size(s) - std::min(seg_size(s), at));
          if (len * sizeof(float) < transport::kMinPlacedFrameBytes / 2) continue;  // never offered
          Link::Placement place;
          place.collective = collective_;
          place.phase = phase;
          place.source = from;
          place.step = t;
          place.segment = static_cast<uint32_t>(s);
          place.index = k;
          place.data = reinterpret_cast<uint8_t*>(data + seg_begin(s) + at);
          place.size = len * sizeof(float);
          places.push_back(place);
        }
      }
    }
    left_->StartPlacement();
  }
  // Reduce-scatter: at step t this peer sends segment (r - t) and receives
  // segment (r - t - 1), which it reduces and forwards at step t + 1 chunk by
  // chunk, so the chunks flow around the ring without waiting for whole
  // segments. After p - 1 steps it owns the full sum of segment (r + 1).
  const std::size_t first = r;
  for (uint32_t k = 0; k < chunks_of(first); ++k) {
    Status s = send_chunk(RingPhase::kReduceScatter, 0, first, k, false);
    if (!s.ok()) return s;
  }
  for (uint32_t t = 0; t + 1 < p; ++t) {
    const std::size_t s = (r + 2 * p - t - 1) % p;
    for (uint32_t k = 0; k < chunks_of(s); ++k) {
      Status st = receive_chunk(RingPhase::kReduceScatter, t, s, k, true);
      if (!st.ok()) return st;
      st = (t + 2 < p) ? send_chunk(RingPhase::kReduceScatter, t + 1, s, k, false)
                       : send_chunk(RingPhase::kAllGather, 0, s, k, codec != nullptr);
      if (!st.ok()) return st;
    }
  }
  // All-gather: the reduced segments travel once more around the ring.
  for (uint32_t t = 0; t + 1 < p; ++t) {
    const std::size_t s = (r + 2 * p - t) % p;
    for (uint32_t k = 0; k < chunks_of(s); ++k) {
      Status st = receive_chunk(RingPhase::kAllGather, t, s, k, false);
      if (!st.ok()) return st;
      if (t + 2 < p) {
        // Forward the received bytes as they are: re-encoding a decoded
        // fp16 chunk gives the same payload, raw floats are copied.
        st = send_chunk(RingPhase::kAllGather, t + 1, s, k, false);
        if (!st.ok()) return st;
      }
    }
  }
  stats_.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  total_bytes_sent_ += stats_.bytes_sent;
  return Status::Ok();
}

// ---- IWP-sparse all-reduce ----------------------------------------------------

Status TcpPeerGroup::IwpAllReduce(IwpAccumulator& accumulator, const float* weights, uint64_t seed,
                                  uint32_t step, std::vector<uint32_t>* indices,
                                  std::vector<float>* sums) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(options_.step_timeout_ms);
  if (failed_rank_ >= 0) {
    return Status(StatusCode::kFailedPrecondition,
                  "the ring lost peer rank " + std::to_string(failed_rank_) + "; Form() again first");
  }
  const std::size_t p = members_.size();
  if (options_.graph != GossipGraph::kRing && p > 1) {
    return Status(StatusCode::kFailedPrecondition, "ring collectives need a group formed as a ring");
  }
  const std::size_t d = accumulator.size();
  sums->clear();
  const uint32_t leader = IwpLeader(seed, step, static_cast<uint32_t>(p));
  uint64_t sent = 0;
  if (leader == position_) {
    IwpStepContext context;
    context.session_seed = seed;
    context.step = step;
    context.node_id = rank_;
    accumulator.SelectIndices(weights, context, indices);
  }
  if (p > 1) {
    ++collective_;
    const uint32_t to = right();
    // The index set goes around the ring from the leader: count (4 bytes LE)
    // then the compact index coding. Everyone but the leader's left
    // neighbour forwards it.
    if (leader == position_) {
      const std::size_t count = indices->size();
      const std::size_t need = 4 + IwpMaxEncodedIndicesSize(count);
      if (encoded_.size() < need) encoded_.resize(need);
      const uint32_t c32 = static_cast<uint32_t>(count);
      for (int i = 0; i < 4; ++i) encoded_[i] = static_cast<uint8_t>(c32 >> (8 * i));
      auto size = EncodeIwpIndices(indices->data(), count, encoded_.data() + 4, encoded_.size() - 4);
      if (!size.ok()) return size.status();
      transport::RingChunkMessage m;
      m.collective_id = collective_;
      m.phase = transport::RingPhase::kIndexBroadcast;
      m.source_rank = rank_;
      m.payload.total_size = 4 + *size;
      m.payload.data = encoded_.data();
      m.payload.size = 4 + *size;
      sent += m.payload.size;
      Status s = Send(*right_, to, Encode(m, connection_options_.limits));
      if (!s.ok()) return s;
    } else {
      auto frame = NextFromLeft(deadline);
      if (!frame.ok()) return frame.status();
      const uint32_t from = left();
      auto m = transport::DecodeRingChunk(*frame, connection_options_.limits);
      if (!m.ok()) return Fail(static_cast<int>(from), Named(from, m.status()));
      if (m->collective_id != collective_ || m->phase != transport::RingPhase::kIndexBroadcast ||
          m->payload.size < 4 || m->payload.count != 1) {
        return Fail(static_cast<int>(from), Named(from, Corrupt("unexpected index broadcast")));
      }
      const uint8_t* b = m->payload.data;
      const uint32_t count = uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
      if (count > d) return Fail(static_cast<int>(from), Named(from, Corrupt("index set larger than the model")));
      indices->resize(count);
      Status s = DecodeIwpIndices(b + 4, m->payload.size - 4, count, d, indices->data());
      if (!s.ok()) return Fail(static_cast<int>(from), Named(from, s));
      if ((position_ + 1) % p != leader) {
        transport::RingChunkMessage f = *m;
        f.source_rank = rank_;
        sent += f.payload.size;
        s = Send(*right_, to, Encode(f, connection_options_.limits));
        if (!s.ok()) return s;
      }
    }
  }
  sums->resize(indices->size());
  Status s = accumulator.GatherAndZero(indices->data(), indices->size(), sums->data());
  if (!s.ok()) return s;
  gathered_.assign(sums->begin(), sums->end());
  s = AllReduce(sums->data(), sums->size(), "");
  stats_.bytes_sent += sent;
  total_bytes_sent_ += sent;
  if (!s.ok()) sums->assign(gathered_.begin(), gathered_.end());  // what this peer gathered, for the caller to keep
  return s;
}

// ---- gossip (D-PSGD) ---------------------------------------------------------

Status TcpPeerGroup::SendGossip(Link& link, uint32_t to, uint64_t step, const std::string& spec,
                                const uint8_t* bytes, std::size_t size, uint64_t* sent,
                                Clock::time_point deadline) {
  const std::size_t chunk = connection_options_.limits.MaxChunkBytes();
  const std::size_t count = std::max<std::size_t>(1, (size + chunk - 1) / chunk);
  for (std::size_t k = 0; k < count; ++k) {
    transport::GossipModelMessage m;
    m.step = step;
    m.source_rank = rank_;
    m.codec_spec = spec;
    m.payload.index = static_cast<uint32_t>(k);
    m.payload.count = static_cast<uint32_t>(count);
    m.payload.total_size = size;
    m.payload.offset = k * chunk;
    m.payload.data = bytes + k * chunk;
    m.payload.size = std::min(chunk, size - k * chunk);
    *sent += m.payload.size;
    // Copied into a reusable slot: the bytes (the model or encoded_) change
    // before the next step, and the send queue may still hold them.
    auto slot = FreeSlot(link, deadline);
    if (!slot.ok() && slot.status().code() == StatusCode::kUnavailable) {
      return SendFailed(link, to, slot.status());  // the link closed
    }
    if (!slot.ok()) {
      return Fail(static_cast<int>(to), Named(to, Status(slot.status().code(), "cannot send the model: " +
                                                                                  slot.status().message())));
    }
    Status s = Send(link, to, Encode(m, connection_options_.limits, **slot, transport::PayloadMode::kCopy));
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status TcpPeerGroup::ReceiveGossip(uint32_t from, const std::function<Result<Frame>()>& next, uint64_t step,
                                   std::size_t max_size, std::vector<uint8_t>* out, uint64_t* sender_step) {
  uint32_t count = 1;
  uint64_t received = 0;
  for (uint32_t k = 0; k < count; ++k) {
    auto frame = next();
    if (!frame.ok()) return frame.status();
    auto m = transport::DecodeGossipModel(*frame, connection_options_.limits);
    if (!m.ok()) return Fail(static_cast<int>(from), Named(from, m.status()));
    const auto& p = m->payload;
    if (k == 0) {
      count = p.count;
      if (p.total_size > max_size) {
        return Fail(static_cast<int>(from), Named(from, Corrupt("gossip model larger than this model's payload")));
      }
      out->resize(static_cast<std::size_t>(p.total_size));  // bounded by max_size above
      *sender_step = m->step;
    }
    // After a re-formation neighbours may be steps apart.
    const bool step_ok = k == 0 ? (m->step == step || lenient_step_) : m->step == *sender_step;
    if (!step_ok || m->source_rank != from || p.index != k || p.count != count ||
        p.offset != received || p.total_size != out->size() || p.size > out->size() - received) {
      return Fail(static_cast<int>(from), Named(from, Corrupt("unexpected gossip chunk (step " +
                                                              std::to_string(m->step) + ")")));
    }
    if (p.size > 0) std::memcpy(out->data() + received, p.data, p.size);
    received += p.size;
  }
  if (received != out->size()) return Fail(static_cast<int>(from), Named(from, Corrupt("short gossip model")));
  return Status::Ok();
}

// The neighbours: on the ring the right and left links (with two peers the
// one neighbour is sent to on the right link and heard on the left); on a
// graph one two-way link each (a graph neighbour that left is always
// kCancelled: NextFromNeighbour).
std::vector<TcpPeerGroup::Edge> TcpPeerGroup::GossipEdges(Clock::time_point deadline, bool left_is_ok) {
  const std::size_t p = members_.size();
  std::vector<Edge> edges;
  if (options_.graph != GossipGraph::kRing) {
    for (std::size_t i = 0; i < graph_links_.size(); ++i) {
      edges.push_back({graph_ranks_[i], graph_links_[i].get(), [this, i, deadline] { return NextFromNeighbour(i, deadline); },
                       graph_weights_[i]});
    }
  } else if (p == 2) {
    edges.push_back({left(), right_.get(), [this, deadline, left_is_ok] { return NextFrom(false, deadline, left_is_ok); }, 0.5f});
  } else if (p > 2) {
    edges.push_back({left(), left_.get(), [this, deadline, left_is_ok] { return NextFrom(false, deadline, left_is_ok); },
                     1.0f / 3.0f});
    edges.push_back({right(), right_.get(), [this, deadline, left_is_ok] { return NextFrom(true, deadline, left_is_ok); },
                     1.0f / 3.0f});
  }
  return edges;
}

// Max-flooding over the group's links: in each of (members - 1) rounds (at
// least the diameter of any connected graph over them) every member sends
// the largest step it knows to each neighbour and takes the largest it
// hears. One GossipModel frame per link and round, codec spec "step", the
// step in the step field and no payload.
Result<uint64_t> TcpPeerGroup::AgreeStep(uint64_t step) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(options_.step_timeout_ms);
  if (failed_rank_ >= 0) {
    return Status(StatusCode::kFailedPrecondition,
                  "the ring lost peer rank " + std::to_string(failed_rank_) + "; Form() again first");
  }
  const std::vector<Edge> edges = GossipEdges(deadline, /*left_is_ok=*/false);
  uint64_t agreed = step;
  for (std::size_t round = 0; round + 1 < members_.size(); ++round) {
    const uint64_t known = agreed;
    for (std::size_t i = edges.size(); i-- > 0;) {
      transport::GossipModelMessage m;
      m.step = known;
      m.source_rank = rank_;
      m.codec_spec = kAgreeStepSpec;
      m.payload.index = 0;
      m.payload.count = 1;
      Status s = Send(*edges[i].send, edges[i].rank, Encode(m, connection_options_.limits));
      if (!s.ok()) return s;
    }
    for (const Edge& edge : edges) {
      auto frame = edge.next();
      if (!frame.ok()) return frame.status();
      auto m = transport::DecodeGossipModel(*frame, connection_options_.limits);
      if (!m.ok()) return Fail(static_cast<int>(edge.rank), Named(edge.rank, m.status()));
      if (m->codec_spec != kAgreeStepSpec || m->source_rank != edge.rank || m->payload.size != 0) {
        return Fail(static_cast<int>(edge.rank), Named(edge.rank, Corrupt("expected its step after the re-formation")));
      }
      agreed = std::max(agreed, m->step);
    }
  }
  return agreed;
}

Status TcpPeerGroup::GossipStep(float* model, const float* grad, std::size_t d, float lr,
                                const std::string& codec_spec, uint64_t step, GossipStats* stats) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(options_.step_timeout_ms);
  *stats = GossipStats{};
  if (failed_rank_ >= 0) {
    return Status(StatusCode::kFailedPrecondition,
                  "the ring lost peer rank " + std::to_string(failed_rank_) + "; Form() again first");
  }
  if (codec_spec != gossip_spec_ || (gossip_codec_ == nullptr && !codec_spec.empty())) {
    gossip_codec_.reset();
    gossip_spec_ = codec_spec;
    choco_gamma_ = 0;
    choco_public_.clear();
    if (!codec_spec.empty()) {
      std::string inner = codec_spec;
      if (IsChocoSpec(codec_spec)) {
        auto choco = ParseChocoSpec(codec_spec);
        if (!choco.ok()) return choco.status();
        choco_gamma_ = choco->gamma;
        inner = choco->codec;
      }
      auto made = MakeCodec(inner);
      if (!made.ok()) return made.status();
      if (choco_gamma_ > 0 && (*made)->needs_side_info()) {
        return InvalidArgument("'" + codec_spec + "': replica gossip needs a codec that decodes without side information");
      }
      gossip_codec_ = std::move(*made);
    }
  }
  Codec* codec = gossip_codec_.get();
  const bool choco = choco_gamma_ > 0;
  bool moniqua = false;
  float gamma = 1.0f;  // Moniqua's consensus step size: x_j += gamma sum_i W_ji (x'_i - x'_j)
  if (codec != nullptr) {
    auto parameters = GetMoniquaParameters(*codec);
    moniqua = parameters.ok();
    if (moniqua) gamma = parameters->gamma;
  }
  own_recovered_.resize(d);
  CodecContext context;
  context.round = static_cast<uint32_t>(step);
  context.sender_id = rank_;
  const uint8_t* payload = reinterpret_cast<const uint8_t*>(model);
  std::size_t payload_size = d * sizeof(float);
  std::size_t max_size = payload_size;
  const float* to_send = model;
  if (choco) {
    if (choco_public_.size() != d || choco_members_ != members_) {
      choco_public_.assign(d, 0.0f);
      choco_replicas_.clear();
      choco_members_ = members_;
    }
    // x_i - lr g_i is written into the model only once the step succeeds:
    // a failed step leaves the model as it was (the caller repeats it).
    choco_diff_.resize(d);
    for (std::size_t k = 0; k < d; ++k) {
      const float stepped = model[k] - lr * grad[k];
      choco_diff_[k] = stepped - choco_public_[k];
    }
    to_send = choco_diff_.data();
  }
  if (codec != nullptr) {
    max_size = codec->MaxEncodedSize(d);
    if (encoded_.size() < max_size) encoded_.resize(max_size);
    auto size = codec->Encode(to_send, d, context, encoded_.data(), encoded_.size());
    if (!size.ok()) return size.status();
    payload = encoded_.data();
    payload_size = *size;
    // x'_self: the own model through the same channel.
    Status s = codec->Decode(payload, payload_size, context, own_recovered_.data(), d,
                             codec->needs_side_info() ? model : nullptr);
    if (!s.ok()) return s;
  } else {
    std::copy(model, model + d, own_recovered_.begin());
  }
  const std::vector<Edge> edges = GossipEdges(deadline, /*left_is_ok=*/true);
  // The ring sends right first, then left.
  for (std::size_t i = edges.size(); i-- > 0;) {
    Status s = SendGossip(*edges[i].send, edges[i].rank, step, codec ? codec->spec() : std::string(), payload,
                          payload_size, &stats->bytes_sent, deadline);
    if (!s.ok()) return s;
  }
  if (received_.size() < edges.size()) {
    received_.resize(edges.size());
    recovered_.resize(edges.size());
  }
  mix_.clear();
  std::vector<bool> got(edges.size(), false);
  for (std::size_t i = 0; i < edges.size(); ++i) {
    const uint32_t from = edges[i].rank;
    uint64_t sender_step = step;
    Status s = ReceiveGossip(from, edges[i].next, step, max_size, &received_[i], &sender_step);
    if (s.code() == StatusCode::kCancelled && failed_rank_ < 0) continue;  // it left: its weight stays here
    if (!s.ok()) return s;
    recovered_[i].resize(d);
    if (codec == nullptr) {
      if (received_[i].size() != d * sizeof(float)) {
        return Fail(static_cast<int>(from), Named(from, Corrupt("gossip model of the wrong size")));
      }
      std::memcpy(recovered_[i].data(), received_[i].data(), received_[i].size());
    } else {
      CodecContext c = context;
      c.round = static_cast<uint32_t>(sender_step);
      c.sender_id = from;
      if (moniqua) {
        std::size_t near_wrap = 0;
        s = MoniquaDecode(*codec, received_[i].data(), received_[i].size(), c, model,
                          recovered_[i].data(), d, -1.0f, &near_wrap);
        stats->wrap_count += near_wrap;
      } else {
        s = codec->Decode(received_[i].data(), received_[i].size(), c, recovered_[i].data(), d,
                          codec->needs_side_info() ? model : nullptr);
      }
      if (!s.ok()) return Fail(static_cast<int>(from), Named(from, s));
    }
    mix_.push_back({recovered_[i].data(), gamma * edges[i].weight});
    got[i] = true;
  }
  if (choco) {
    // Every copy of x^_j is the same sum of the same decoded q_j, bit for
    // bit, so the mixing keeps the mean up to one step's rounding. A
    // neighbour that left keeps its last copy (it no longer changes).
    choco_replicas_.resize(edges.size(), std::vector<float>(d, 0.0f));
    for (std::size_t k = 0; k < d; ++k) model[k] = model[k] - lr * grad[k];
    for (std::size_t k = 0; k < d; ++k) choco_public_[k] = choco_public_[k] + own_recovered_[k];
    mix_.clear();
    for (std::size_t i = 0; i < edges.size(); ++i) {
      if (got[i]) {
        std::vector<float>& replica = choco_replicas_[i];
        for (std::size_t k = 0; k < d; ++k) replica[k] = replica[k] + recovered_[i][k];
      }
      mix_.push_back({choco_replicas_[i].data(), choco_gamma_ * edges[i].weight});
    }
    // x_i = x_i + sum_j gamma W_ij (x^_j - x^_i): the mixing step without a gradient (taken before).
    MoniquaMixStep(model, choco_public_.data(), mix_.data(), mix_.size(), 0.0f, own_recovered_.data(), d);
  } else {
    MoniquaMixStep(model, own_recovered_.data(), mix_.data(), mix_.size(), lr, grad, d);
  }
  total_bytes_sent_ += stats->bytes_sent;
  return Status::Ok();
}

Result<std::unique_ptr<PeerGroup>> PeerGroup::Create(std::vector<PeerAddress> peers, uint32_t rank,
                                                     const transport::KeyStore& keys,
                                                     const PeerOptions& options) {
  if (peers.empty() || rank >= peers.size()) {
    return InvalidArgument("rank " + std::to_string(rank) + " is not in a peer list of " +
                           std::to_string(peers.size()));
  }
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (!transport::IsValidDeviceId(peers[i].id)) {
      return InvalidArgument("peer " + std::to_string(i) + ": invalid id '" + peers[i].id + "'");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (peers[j].id == peers[i].id) return InvalidArgument("peer id '" + peers[i].id + "' appears twice");
    }
  }
  if (keys.Find(peers[rank].id) == nullptr) {
    return InvalidArgument("the key file has no key for this peer ('" + peers[rank].id + "')");
  }
  auto group = std::make_unique<TcpPeerGroup>(std::move(peers), rank, keys, options);
  Status s = group->Listen();
  if (!s.ok()) return s;
  return std::unique_ptr<PeerGroup>(std::move(group));
}

}  // namespace peer
}  // namespace fedrt
