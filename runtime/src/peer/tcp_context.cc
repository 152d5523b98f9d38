// The TCP binding of the collective context (peer.h, TcpPeerContext): a
// listener on this peer's address, dialled and accepted links, and the join
// that authenticates them with the pre-shared keys.
//
// Wire use (transport/README.md, "Peer protocol"): the join is the star
// topology's Join / Challenge / Authenticate / JoinResponse;
// Join.resume_round carries the formation's generation, and the accepting
// peer only takes the join of a neighbour it expects in the current one.
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fedrt/runtime/peer.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/event_loop.h"
#include "fedrt/transport/join.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/shaper.h"
#include "fedrt/transport/tcp.h"
#include "peer/link_context.h"

namespace fedrt {
namespace peer {
namespace {

using internal::Link;
using internal::Signal;
using transport::Connection;
using transport::Frame;
using transport::MessageKind;
// Milliseconds from now until `deadline` on `clock` (0 once it has passed).
uint32_t Remaining(const Clock& clock, Deadline deadline) {
  const uint64_t now = clock.NowNanos();
  return deadline <= now ? 0 : static_cast<uint32_t>(std::min<uint64_t>((deadline - now) / 1000000u, UINT32_MAX));
}

// ---- The peer join ------------------------------------------------------------
//
// The only place the peer topology authenticates a link: the dialling side
// (DialJoin) and the accepting side (AcceptJoin) run the same join as the
// star topology (transport/join.h), with the formation's generation in
// Join.resume_round. These two functions only move its frames and decide who
// is admitted.

// Dialling side: joins as `self` over a fresh connection whose frames arrive
// in `link`. Errors are the peer's (unnamed).
Status DialJoin(const std::string& self, const transport::Key& key, uint32_t generation, Connection& connection,
                const Clock& clock, Signal& signal, Link& link, const transport::FrameLimits& limits,
                Deadline deadline) {
  transport::JoinClient join(self, key, transport::SystemCrypto(), limits);
  transport::JoinRequest request;
  request.resume_round = generation;
  Result<transport::OutFrame> out = join.Start(request);
  if (!out.ok()) return out.status();
  FEDRT_RETURN_IF_ERROR(connection.Send(*out));
  while (!join.done()) {
    auto frame = internal::PopFrom(clock, signal, link, deadline);
    if (!frame.ok()) return frame.status();
    out = join.OnFrame(*frame);
    if (!out.ok()) return out.status();
    if (!out->empty()) FEDRT_RETURN_IF_ERROR(connection.Send(*out));
  }
  return Status::Ok();
}

// What the accepting side makes of one join.
struct AcceptOutcome {
  enum Kind {
    kJoined,   // `which` joined
    kDropped,  // the connection went away or said nothing in time: wait for another
    kRefused,  // refused (the connection is aborted with the reason): wait for another
    kFailed,   // `which` failed to authenticate: the formation fails with `status`
  } kind = kDropped;
  std::size_t which = 0;
  Status status;
};

// Accepting side: takes the join on `link` if it comes from a rank of
// `expected` (ids[expected[i]]) not yet `joined`, for `generation`.
AcceptOutcome AcceptJoin(const transport::KeyStore& keys, const std::vector<std::string>& ids,
                         const std::vector<uint32_t>& expected, const std::vector<bool>& joined,
                         uint32_t generation, Connection& connection, const Clock& clock, Signal& signal,
                         Link& link, const transport::FrameLimits& limits, Deadline deadline) {
  AcceptOutcome out;
  auto refuse = [&](const Status& why) {
    connection.Abort(why, /*notify_peer=*/true);
    out.kind = AcceptOutcome::kRefused;
    return out;
  };
  transport::JoinServer join(keys, transport::SystemCrypto(), limits);
  auto frame = internal::PopFrom(clock, signal, link, deadline);
  if (!frame.ok()) return out;
  Result<transport::OutFrame> challenge = join.OnFrame(*frame, transport::JoinResult());
  if (!challenge.ok()) return refuse(challenge.status());
  std::size_t which = expected.size();
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (!joined[i] && join.announcement().device_id == ids[expected[i]]) which = i;
  }
  if (which == expected.size() || join.announcement().resume_round != generation) {
    return refuse(Status(StatusCode::kFailedPrecondition, "not this peer's neighbour in this ring"));
  }
  (void)connection.Send(*challenge);
  frame = internal::PopFrom(clock, signal, link, deadline);
  if (!frame.ok()) return out;
  if (frame->kind() != MessageKind::kAuthenticate) {
    return refuse(Status(StatusCode::kUnauthenticated, std::string(transport::MessageKindName(frame->kind())) +
                                                           " before the join completed"));
  }
  Result<transport::OutFrame> response = join.OnFrame(*frame, transport::JoinResult());
  if (!response.ok()) {
    refuse(response.status());
    if (response.status().code() == StatusCode::kCorrupt) return out;  // a malformed frame, not a wrong key
    out.kind = AcceptOutcome::kFailed;
    out.which = which;
    out.status = response.status();
    return out;
  }
  (void)connection.Send(*response);
  out.kind = AcceptOutcome::kJoined;
  out.which = which;
  return out;
}

// ---- Links --------------------------------------------------------------------------

// Hands every accepted connection its own Link and queues it for Connect().
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
  void OnSent(Connection& connection) override {
    std::shared_ptr<Link> link = Find(connection.id());
    if (link) link->OnSent(connection);
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

std::vector<std::string> Ids(const std::vector<PeerAddress>& peers) {
  std::vector<std::string> ids;
  for (const PeerAddress& p : peers) ids.push_back(p.id);
  return ids;
}

transport::ConnectionOptions LinkOptions(const PeerOptions& options) {
  transport::ConnectionOptions o;
  o.idle_timeout_ms = 0;  // the collectives keep their own deadlines
  o.heartbeat_interval_ms = 1000;
  o.io_timeout_ms = options.step_timeout_ms;
  // The collective's thread writes whole ring chunks itself while the loop
  // receives: the two socket copies run on two cores (it has nothing else
  // to do meanwhile; what arrives is placed or reduced by the loop). Not on
  // user-space shaped links: there the shaper's one thread hands frames to
  // the connection and also passes received ones on, so a send waiting for
  // room would hold up the receive side (an all-reduce at half the rate).
  if (!options.link.shaped()) o.direct_send_max_bytes = std::size_t{1} << 31;
  o.busy_poll_us = options.busy_poll_us;
  return o;
}

class TcpContext final : public TcpPeerContext, public internal::LinkContext {
 public:
  TcpContext(std::vector<PeerAddress> peers, uint32_t rank, const transport::KeyStore& keys,
             const PeerOptions& options)
      : internal::LinkContext(Ids(peers), rank, options, LinkOptions(options).limits),
        peers_(std::move(peers)), keys_(keys), tls_(options.tls), connection_options_(LinkOptions(options)),
        acceptor_(std::make_shared<Acceptor>(signal())),
        // Every peer shapes what it sends: frames arrive paced.
        shaper_(options.link.shaped() ? std::make_unique<transport::LinkShaper>(options.link, rank,
                                                                              transport::LinkShaper::FarEnd::kShaped)
                                      : nullptr) {}

  ~TcpContext() override {
    DropLinks("peer group closed", /*graceful=*/false);
    if (listener_) listener_->Close();
  }

  Status Listen() {
    Result<std::shared_ptr<const transport::TlsContext>> tls = transport::CreateTlsIfConfigured(tls_);
    if (!tls.ok()) return tls.status();
    if (*tls && (!(*tls)->can_listen() || !(*tls)->can_dial())) {
      return InvalidArgument("peer TLS needs a certificate, its key and a CA file (peers both accept and dial)");
    }
    connection_options_.tls = *tls;
    const PeerAddress& self = peers_[rank()];
    auto listener = transport::TcpListener::Listen(loop_.loop(), self.host, self.port, connection_options_,
                                                   Shaping(acceptor_));
    if (!listener.ok()) return Named(rank(), listener.status());
    listener_ = *listener;
    peers_[rank()].port = listener_->port();
    return Status::Ok();
  }

  uint16_t port() const override { return listener_ ? listener_->port() : 0; }
  void SetPort(uint32_t rank, uint16_t port) override {
    if (rank < peers_.size()) peers_[rank].port = port;
  }

 protected:
  // Accepts on another thread while dialling on this one: every member dials
  // and accepts at once, so neither may wait for the other.
  Status Connect(const std::vector<uint32_t>& dial, const std::vector<uint32_t>& accept, uint32_t generation,
                 Deadline deadline, std::vector<std::shared_ptr<Link>>* out,
                 std::vector<std::shared_ptr<Link>>* in) override {
    Status accepted;
    std::thread acceptor([&] { accepted = Accept(accept, generation, deadline, in); });
    Status dialled;
    out->assign(dial.size(), nullptr);
    for (std::size_t i = 0; i < dial.size() && dialled.ok(); ++i) {
      dialled = Dial(dial[i], generation, deadline, &(*out)[i]);
    }
    acceptor.join();
    if (!dialled.ok()) return dialled;
    return accepted;
  }

 private:
  // Dials `to` (retrying while it is not listening yet) and joins.
  Status Dial(uint32_t to, uint32_t generation, Deadline deadline, std::shared_ptr<Link>* out) {
    const PeerAddress& address = peers_[to];
    const transport::Key* key = keys_.Find(peers_[rank()].id);
    if (key == nullptr) return InvalidArgument("no key for this peer's id '" + peers_[rank()].id + "'");
    Status last(StatusCode::kDeadlineExceeded, "not reachable within the join deadline");
    while (Remaining(clock(), deadline) > 0) {
      auto link = std::make_shared<Link>(signal());
      auto connection = transport::TcpConnectAndWait(loop_.loop(), address.host, address.port, connection_options_,
                                                     Shaping(link), std::min<uint32_t>(Remaining(clock(), deadline), 2000));
      if (connection.ok() && shaper_) {  // the link was handed the shaped connection
        std::shared_ptr<Connection> shaped = shaper_->Shaped(**connection);
        connection = shaped ? Result<std::shared_ptr<Connection>>(shaped)
                            : Status(StatusCode::kUnavailable, "closed as it opened");
      }
      if (!connection.ok()) {
        last = connection.status();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the neighbour may start later
        continue;
      }
      Status s = DialJoin(peers_[rank()].id, *key, generation, **connection, clock(), *signal(), *link,
                          connection_options_.limits, deadline);
      if (!s.ok()) return Named(to, s);
      *out = link;
      return Status::Ok();
    }
    return Named(to, last);
  }

  // The handler to open connections with: `handler` itself, or wrapped by
  // the user-space shaper (then the handler sees shaped connections only).
  std::shared_ptr<transport::ConnectionHandler> Shaping(std::shared_ptr<transport::ConnectionHandler> handler) {
    return shaper_ ? shaper_->Wrap(std::move(handler)) : handler;
  }

  // Takes the joins of every rank in `expected` (any order).
  Status Accept(const std::vector<uint32_t>& expected, uint32_t generation, Deadline deadline,
                std::vector<std::shared_ptr<Link>>* out) {
    out->assign(expected.size(), nullptr);
    std::vector<bool> joined(expected.size(), false);
    std::size_t count = 0;
    while (count < expected.size() && Remaining(clock(), deadline) > 0) {
      std::shared_ptr<Link> link;
      std::shared_ptr<Connection> connection;
      {
        std::unique_lock<std::mutex> lock(signal()->mutex);
        internal::WaitUntil(clock(), signal()->changed, lock, deadline,
                            [&] { return !acceptor_->pending().empty(); });
        if (acceptor_->pending().empty()) break;
        link = acceptor_->pending().front();
        acceptor_->pending().pop_front();
        connection = link->connection();
      }
      if (!connection) continue;
      AcceptOutcome o = AcceptJoin(keys_, ids(), expected, joined, generation, *connection, clock(), *signal(), *link,
                                   connection_options_.limits, deadline);
      if (o.kind == AcceptOutcome::kFailed) return Named(expected[o.which], o.status);
      if (o.kind != AcceptOutcome::kJoined) continue;
      (*out)[o.which] = link;
      joined[o.which] = true;
      ++count;
    }
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if ((*out)[i] == nullptr) {
        return Named(expected[i], Status(StatusCode::kDeadlineExceeded, "did not join within the deadline"));
      }
    }
    return Status::Ok();
  }

  std::vector<PeerAddress> peers_;
  const transport::KeyStore& keys_;
  const transport::TlsConfig tls_;
  transport::ConnectionOptions connection_options_;
  std::shared_ptr<Acceptor> acceptor_;
  // PeerOptions::link; null: not shaped. Declared before the loop, which
  // must stop before the shaper does (transport/shaper.h).
  std::unique_ptr<transport::LinkShaper> shaper_;
  // Declared after the acceptor: the loop (and with it every connection)
  // goes first.
  transport::EventLoopThread loop_;
  std::shared_ptr<transport::TcpListener> listener_;
};

}  // namespace

Result<std::unique_ptr<TcpPeerContext>> TcpPeerContext::Create(std::vector<PeerAddress> peers, uint32_t rank,
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
  auto context = std::make_unique<TcpContext>(std::move(peers), rank, keys, options);
  FEDRT_RETURN_IF_ERROR(context->Listen());
  return std::unique_ptr<TcpPeerContext>(std::move(context));
}

Result<std::unique_ptr<PeerGroup>> PeerGroup::Create(std::vector<PeerAddress> peers, uint32_t rank,
                                                     const transport::KeyStore& keys, const PeerOptions& options) {
  auto context = TcpPeerContext::Create(std::move(peers), rank, keys, options);
  if (!context.ok()) return context.status();
  return std::make_unique<PeerGroup>(std::unique_ptr<CollectiveContext>(std::move(*context)), options.chunk_floats);
}

}  // namespace peer
}  // namespace fedrt
