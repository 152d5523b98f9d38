// The collective context over transport connections (collective_context.h),
// shared by the bindings: TCP (tcp_context.cc) and the in-process loopback
// (loopback_context.cc). A binding only opens the links of a formation
// (Connect); everything else lives here: the links' inboxes, the failure
// reports both ways around the group, the suspicion exchange after a step
// deadline, frame slots and registered buffers.
//
// Links: on the ring, one connection to the right neighbour (dialled; data
// goes out on it) and one from the left (accepted; data comes in), so every
// link is full-duplex and no peer's writes wait on its own reads: the event
// loop receives (and places or reduces) what arrives from the left while the
// collective's thread writes to the right, itself over TCP
// (ConnectionOptions::direct_send_max_bytes, tcp_context.cc) or through the
// loop's queue. Gossip on a ring with more
// than two members also sends left on the accepted link. On a graph, one
// two-way connection per edge, dialled by the lower rank.
//
// Wire use (transport/README.md, "Peer protocol"): a failure report is an
// Error {unavailable, "peer rank R failed: ..."}, forwarded once each way; a
// neighbour that finished sends Leave before its close.
#ifndef FEDRT_RUNTIME_SRC_PEER_LINK_CONTEXT_H_
#define FEDRT_RUNTIME_SRC_PEER_LINK_CONTEXT_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/runtime/collective_context.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/messages.h"

namespace fedrt {
namespace peer {
namespace internal {

// What the links of a context share: one lock and one condition, so the
// collective's thread can wait for "a frame from the left, or any link
// closed, or a failure report" at once.
struct Signal {
  std::mutex mutex;
  std::condition_variable changed;
  // Set while the collective waits for its sends to be released, so write
  // completions only wake it then.
  std::atomic<bool> waiting_for_sends{false};
};

// With a clock other than SystemClock() (a ManualClock in tests, a board's
// tick counter), a wait cannot know how much real time the clock's deadline
// is away, nor hear the clock move: it wakes at least this often to read it.
inline constexpr uint64_t kForeignClockSliceMs = 1;

// Waits on `changed` (with `lock` held) until `ready()` or until `clock`
// reaches `deadline`; returns ready(). The deadline is the clock's: real
// time only paces the wake-ups (the time left with SystemClock(), at most
// kForeignClockSliceMs with another clock).
template <typename Ready>
bool WaitUntil(const Clock& clock, std::condition_variable& changed, std::unique_lock<std::mutex>& lock,
               Deadline deadline, Ready ready) {
  const bool system = &clock == &SystemClock();
  for (;;) {
    if (ready()) return true;
    const uint64_t now = clock.NowNanos();
    if (now >= deadline) return false;
    uint64_t wait = deadline - now;
    if (!system) wait = std::min<uint64_t>(wait, kForeignClockSliceMs * 1000000u);
    changed.wait_for(lock, std::chrono::nanoseconds(wait));
  }
}

// A link's inbox: frames in arrival order, in a ring over a vector that
// doubles when full and never shrinks, so a steady stream of frames
// allocates nothing (a std::deque allocates and frees a node every few).
class FrameQueue {
 public:
  FrameQueue() : ring_(16) {}
  bool empty() const { return count_ == 0; }
  std::size_t size() const { return count_; }
  transport::Frame& at(std::size_t i) { return ring_[(head_ + i) % ring_.size()]; }
  const transport::Frame& at(std::size_t i) const { return ring_[(head_ + i) % ring_.size()]; }
  void push_back(transport::Frame frame) {
    if (count_ == ring_.size()) Grow();
    at(count_) = std::move(frame);
    ++count_;
  }
  // Removes frame i (0: the oldest), keeping the others' order.
  transport::Frame Take(std::size_t i) {
    transport::Frame f = std::move(at(i));
    if (i == 0) {
      head_ = (head_ + 1) % ring_.size();
    } else {
      for (std::size_t j = i; j + 1 < count_; ++j) at(j) = std::move(at(j + 1));
      at(count_ - 1) = transport::Frame();
    }
    --count_;
    return f;
  }

 private:
  void Grow() {
    std::vector<transport::Frame> bigger(2 * ring_.size());
    for (std::size_t i = 0; i < count_; ++i) bigger[i] = std::move(at(i));
    ring_.swap(bigger);
    head_ = 0;
  }

  std::vector<transport::Frame> ring_;
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

// One connection's inbox (frames in arrival order) and its registered
// buffers. Handler callbacks run on the binding's event loop thread.
class Link : public transport::ConnectionHandler {
 public:
  explicit Link(std::shared_ptr<Signal> signal) : signal_(std::move(signal)) {}

  void OnOpen(const std::shared_ptr<transport::Connection>& connection) override;
  void OnFrame(transport::Connection& connection, transport::Frame frame) override;
  void OnSent(transport::Connection& connection) override;
  void OnClose(transport::Connection& connection, const Status& reason) override;

  // Registered buffers: the collective lists where each expected chunk goes
  // before it sends anything, and the connection asks here as each chunk's
  // head arrives (PlacePayload: stored; ConsumesPayload: reduced piece by
  // piece in ConsumePayload). Only an exact match is taken.
  bool WantsPlacement(transport::Connection& connection) override;
  uint8_t* PlacePayload(transport::Connection& connection, const transport::PayloadHead& head) override;
  bool ConsumesPayload(transport::Connection& connection, const transport::PayloadHead& head) override;
  void ConsumePayload(transport::Connection& connection, const uint8_t* piece, std::size_t offset,
                      std::size_t size) override;

  // Under signal_->mutex (the collective's thread).
  std::vector<RegisteredBuffer>& buffers() { return buffers_; }
  void StartPlacement();
  // Stops placing; true when no payload is being written any more.
  bool StopPlacement();
  bool placing() const { return placing_ && !closed_; }
  bool has_frame() const { return !frames_.empty(); }
  // The first failure report anywhere in the queue (a report can sit behind
  // data frames), removed; false when there is none.
  bool TakeError(transport::Frame* out);
  bool front_is_error() const;
  transport::Frame TakeFrame();
  bool closed() const { return closed_; }
  bool left_ring() const { return left_ring_; }
  const Status& close_reason() const { return close_reason_; }
  std::shared_ptr<transport::Connection> connection() const { return connection_; }

  // The collective's thread only: frame slots for sends on this link (each
  // link has its own, so a stalled neighbour cannot starve a healthy one).
  std::vector<std::unique_ptr<transport::FrameSlot>>& slots() { return slots_; }

 private:
  // Under signal_->mutex: the first registered buffer at or after next_
  // whose head equals `head` and that stores (reducing false) or reduces;
  // it is then being received (placing_). Chunks arrive in list order;
  // small ones are never offered, so the search goes on past them.
  const RegisteredBuffer* Match(const transport::PayloadHead& head, bool reducing);

  std::shared_ptr<Signal> signal_;
  FrameQueue frames_;
  std::shared_ptr<transport::Connection> connection_;
  bool closed_ = false;
  bool left_ring_ = false;
  Status close_reason_;
  std::vector<RegisteredBuffer> buffers_;
  std::size_t next_ = 0;
  bool placing_ = false;  // a payload is being received into a registered buffer
  // Loop thread, between ConsumesPayload and OnFrame/OnClose: the buffer
  // being reduced into (a copy: the list may be cleared meanwhile, see
  // LinkContext::ReleaseBuffers) is this link's alone (see Match), so no lock.
  RegisteredBuffer reducing_;
  std::atomic<bool> wants_placement_{false};
  std::vector<std::unique_ptr<transport::FrameSlot>> slots_;
};

// The next frame of one link (handshakes), or its close reason, or a deadline.
Result<transport::Frame> PopFrom(const Clock& clock, Signal& signal, Link& link, Deadline deadline);

// The CollectiveContext of a binding whose links are transport connections.
// Virtual inheritance: a binding's public class (TcpPeerContext) is a
// CollectiveContext too.
class LinkContext : public virtual CollectiveContext {
 public:
  // `ids[r]`: rank r's id, for error messages.
  LinkContext(std::vector<std::string> ids, uint32_t rank, const ContextOptions& options,
              const transport::FrameLimits& limits);
  ~LinkContext() override;

  Status Form(const std::vector<uint32_t>& members) override;
  Status Close() override;
  uint32_t rank() const override { return rank_; }
  uint32_t peer_count() const override { return static_cast<uint32_t>(ids_.size()); }
  const std::vector<uint32_t>& members() const override { return members_; }
  std::size_t position() const override { return position_; }
  uint32_t generation() const override { return generation_; }
  GossipGraph graph() const override { return options_.graph; }
  const std::vector<Neighbour>& neighbours() const override { return neighbours_; }
  uint32_t step_timeout_ms() const override { return options_.step_timeout_ms; }
  const Clock& clock() const override { return clock_; }
  const transport::FrameLimits& limits() const override { return limits_; }
  uint64_t NextCollectiveId() override { return ++collective_; }
  Result<transport::FrameSlot*> FreeSlot(uint32_t to, Deadline deadline, const char* what) override;
  Status Send(uint32_t to, Result<transport::OutFrame> frame) override;
  Result<transport::Frame> Receive(uint32_t from, Deadline deadline, bool leaving_is_ok) override;
  void ExpectPayloads(uint32_t from, const RegisteredBuffer* buffers, std::size_t count) override;
  void ReleaseBuffers(Deadline deadline) override;
  Status Fail(int failed, const Status& status) override;
  int failed_rank() const override { return failed_rank_; }
  std::string Name(uint32_t rank) const override;

 protected:
  // The binding: opens this formation's links. Dials every rank in `dial`
  // (out[i] is dial[i]'s link) and takes the joins of every rank in `accept`
  // (in any order; in[i] is accept[i]'s link), both by `deadline`, the
  // formation numbered `generation`. A failed dial is returned before a
  // failed accept; the links that were made are kept in out / in.
  virtual Status Connect(const std::vector<uint32_t>& dial, const std::vector<uint32_t>& accept,
                         uint32_t generation, Deadline deadline, std::vector<std::shared_ptr<Link>>* out,
                         std::vector<std::shared_ptr<Link>>* in) = 0;
  // Closes every link: gracefully (queued frames first) or at once. A
  // binding's destructor drops them (not gracefully) while its event loop
  // still runs.
  void DropLinks(const char* why, bool graceful);

  const std::shared_ptr<Signal>& signal() const { return signal_; }
  const std::vector<std::string>& ids() const { return ids_; }
  const ContextOptions& options() const { return options_; }

 private:
  // Queues `frame` on `link` while it is open; a failed send is that link's
  // close, which the receiving side sees (failure reports, Leave).
  void Post(Link* link, const transport::OutFrame& frame);
  // The Error message of a failure report or suspicion.
  Result<transport::OutFrame> ReportFrame(std::string text) const;
  // Sends `frame` on `link` to `to`.
  Status SendOn(Link& link, uint32_t to, Result<transport::OutFrame> frame);
  // A send to `to` failed with `s`: OK when that neighbour has left, else the
  // step fails (blaming the peer a queued failure report names, or `to`).
  Status SendFailed(Link& link, uint32_t to, const Status& s);
  // Ring: the next data frame from the right or the left neighbour; failure
  // reports from either side end the wait. `leaving_is_ok`: that neighbour
  // having left (Leave, then its close) is kCancelled, not a failure.
  Result<transport::Frame> NextFrom(bool want_right, Deadline deadline, bool leaving_is_ok);
  // Graph: the next data frame from links_[i]; failure reports and closes on
  // any link end the wait. kCancelled: that neighbour left.
  Result<transport::Frame> NextFromNeighbour(std::size_t i, Deadline deadline);
  // The link data to `to` goes on, and the one data from `from` comes on.
  Link* LinkTo(uint32_t to) const;
  Link* LinkFrom(uint32_t from) const;
  // Lists every link of this formation in all_links_ (after Form: the
  // steady state iterates the list without allocating).
  void ListLinks();
  // Waits until `link`'s registered buffers are no longer written.
  void ReleasePlaced(Link& link, Deadline deadline);
  // WaitUntil on this context's signal and clock, after up to
  // ContextOptions::busy_poll_us of looking at ready() with the lock released
  // and the CPU yielded in between: a frame the loop hands over meanwhile
  // costs this thread no wake-up. Real time only (SystemClock()).
  template <typename Ready>
  bool Wait(std::unique_lock<std::mutex>& lock, Deadline deadline, Ready ready) {
    if (options_.busy_poll_us != 0 && &clock_ == &SystemClock() && !ready()) {
      const uint64_t until =
          std::min<uint64_t>(deadline, clock_.NowNanos() + uint64_t{options_.busy_poll_us} * 1000u);
      while (clock_.NowNanos() < until) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
        if (ready()) return true;
      }
    }
    return WaitUntil(clock_, signal_->changed, lock, deadline, ready);
  }

  const std::vector<std::string> ids_;
  const uint32_t rank_;
  const ContextOptions options_;
  const transport::FrameLimits limits_;
  const Clock& clock_;
  std::shared_ptr<Signal> signal_;

  std::vector<uint32_t> members_;
  std::size_t position_ = 0;
  uint32_t generation_ = 0;
  std::vector<Neighbour> neighbours_;
  std::shared_ptr<Link> right_;  // ring: we send here
  std::shared_ptr<Link> left_;   // ring: we receive from here
  // Graph: one two-way link per neighbour, in neighbours_' order.
  std::vector<std::shared_ptr<Link>> links_;
  std::vector<Link*> all_links_;  // right_, left_ and links_ that exist
  uint64_t collective_ = 0;
  int failed_rank_ = -1;
  bool reported_ = false;
};

}  // namespace internal
}  // namespace peer
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_SRC_PEER_LINK_CONTEXT_H_
