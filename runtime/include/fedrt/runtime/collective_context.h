// The collective context: what a collective algorithm (ring all-reduce,
// gossip, step agreement; collectives.h) sees of the group of peers it runs
// in. As in Gloo, an algorithm is one class over this small interface and the
// transport knows nothing of any algorithm:
//   - membership: this peer's rank, the members of the current formation
//     (original ranks, ascending), the ring neighbours (left, right) and the
//     gossip graph's neighbours with their Metropolis weights;
//   - frames: send a frame to a neighbour (a FrameSlot each, reused), receive
//     the next frame from a neighbour by a deadline;
//   - registered buffers: payloads of expected chunks that go straight into
//     the algorithm's memory as they arrive (placed, or reduced piece by
//     piece), where the binding can (TCP; the loopback delivers whole frames);
//   - failures: when a neighbour fails, the context records which rank
//     failed and reports it both ways around the group, so every survivor
//     fails the collective naming the same rank; Form() with the survivors
//     re-forms a smaller group (ring repair).
//
// Bindings: TCP (peer.h, TcpPeerContext: listens, dials, joins with the
// pre-shared keys) and the in-process loopback (LoopbackPeerNetwork below,
// no sockets: unit tests, one thread per rank).
//
// Failure reports (Error messages between peers):
//   "peer rank R failed: <reason>"         R is gone (its link closed) or was
//                                          found to be the stalled one;
//   "peer rank A waits on peer rank B"     A's step deadline passed while it
//                                          waited for B (a suspicion).
// A stalled peer stalls everyone behind it, and every one of them times out
// at about the same time. Each sends its suspicion both ways; after a short
// grace every survivor holds every suspicion and blames the rank that is
// waited on but waits on nobody: the stalled one. Peers agree without a vote.
// Errors name the peer by rank and id ("peer rank 2 (p2): ...").
//
// Time: every deadline (join, step, grace, the waits for the last sends) is
// a time on the Clock of ContextOptions (SystemClock() unless another is
// given), so a test drives a collective with a ManualClock: a peer that stays
// silent fails the step when the test advances the clock past the deadline,
// with no real time slept. The threaded bindings still block on a condition
// variable; with a clock other than SystemClock() they wake at least every
// millisecond to read it (kForeignClockSliceMs, link_context.h).
//
// Thread-safety: a context is used by one thread (the training loop, which
// runs the collectives one after the other); its connections run on the
// binding's event loop thread. Ownership: the context owns its links and
// frame slots; registered buffers stay the caller's (see ReleaseBuffers).
#ifndef FEDRT_RUNTIME_COLLECTIVE_CONTEXT_H_
#define FEDRT_RUNTIME_COLLECTIVE_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/status.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/frame.h"
#include "fedrt/transport/messages.h"

namespace fedrt {
namespace transport {
class EventLoop;  // event_loop.h (the loopback binding's)
}  // namespace transport

namespace peer {

// A time on the context's clock (CollectiveContext::clock()), in
// nanoseconds: Clock::NowNanos() plus the time allowed.
using Deadline = uint64_t;

namespace internal {
struct LoopbackHub;  // private to the runtime (loopback_context.cc)
}  // namespace internal

// The gossip graph over a group's members (in ascending rank order, node i =
// the i-th member). kRing: links to the two ring neighbours, used by every
// collective. kTorus: a 2-D torus of TorusShape(n) (rows x columns), node i
// at row i / columns, column i % columns, linked to its left, right, upper
// and lower neighbours (wrapping, duplicates merged); gossip and step
// agreement only.
enum class GossipGraph : uint8_t { kRing, kTorus };

// rows x columns == n with rows <= columns and rows as large as possible
// (4: 2 x 2, 6: 2 x 3, 8: 2 x 4, 9: 3 x 3; a prime n gives 1 x n, a ring).
void TorusShape(uint32_t n, uint32_t* rows, uint32_t* columns);
// Each node's neighbours (node indices, ascending, no self, no duplicates).
std::vector<std::vector<uint32_t>> GraphNeighbours(GossipGraph graph, uint32_t n);
// Metropolis-Hastings mixing matrix of an undirected graph, n x n row-major:
// W_ij = 1 / (1 + max(deg i, deg j)) for neighbours, W_ii = 1 - the row's
// other weights, 0 elsewhere. Symmetric and doubly stochastic.
std::vector<double> MetropolisWeights(const std::vector<std::vector<uint32_t>>& neighbours);
// The eigenvalues of a symmetric n x n matrix (row-major), ascending. Cyclic
// Jacobi rotations in double with a fixed sweep order and stopping rule, so
// every peer computes the same values. Empty if w is not n x n.
std::vector<double> SymmetricEigenvalues(const std::vector<double>& w, std::size_t n);
// The second-largest eigenvalue modulus (SLEM) lambda of a symmetric n x n
// mixing matrix (row-major; SymmetricEigenvalues): how slowly gossip on it
// averages. 0 for n <= 1.
double SecondLargestEigenvalueModulus(const std::vector<double>& w, std::size_t n);
// The mixing time Moniqua's bound uses: ceil(ln(2n) / (1 - lambda)), at least 1.
uint32_t MixingTime(double lambda, std::size_t n);
// Moniqua's theta from its bound on neighbours' distance (fedrt's rule for
// the paper's: theta = c * lr * G * t_mix, G a bound on gradient coordinates).
double MoniquaTheta(double c, double lr, double grad_bound, uint32_t mixing_time);

// A gossip neighbour (original rank) and its mixing weight W_ij.
struct Neighbour {
  uint32_t rank = 0;
  float weight = 0;
};

// A registered buffer: where the payload of one expected chunk goes. Only a
// chunk whose head equals `head` in every field is taken (so a chunk never
// lands outside its own slice); chunks arrive in the order registered.
// reduce == nullptr: the payload is stored at data[0 .. head.size); else it
// is handed over in pieces as it arrives and reduce(piece, size, data +
// offset) folds each one in (on the event loop thread, while it is in cache;
// offsets are multiples of transport::kPayloadPieceBytes).
struct RegisteredBuffer {
  transport::PayloadHead head;
  uint8_t* data = nullptr;
  void (*reduce)(const uint8_t* piece, std::size_t size, uint8_t* into) = nullptr;
};

// What every binding takes.
struct ContextOptions {
  GossipGraph graph = GossipGraph::kRing;
  uint32_t join_timeout_ms = 10000;  // Form(): connect and join
  uint32_t step_timeout_ms = 10000;  // each collective
  // How long a collective waiting for a neighbour's frame, and the event loop
  // after a link's frame (transport::ConnectionOptions::busy_poll_us), keep
  // polling, yielding the CPU in between, before they sleep in the kernel.
  // Saves two thread wake-ups a hop, which is most of a small all-reduce's
  // time; costs up to this much CPU a wait. 0: sleep at once. TCP binding;
  // real time only (with `clock` set, waits sleep at once).
  uint32_t busy_poll_us = 200;
  // Where every deadline's time comes from; null: SystemClock(). Must outlive
  // the contexts (and the network) made with these options.
  const Clock* clock = nullptr;
};

class CollectiveContext {
 public:
  virtual ~CollectiveContext() = default;

  // ---- Membership ------------------------------------------------------------
  // (Re)forms the group over `members` (original ranks, this peer included;
  // empty: every peer), as a ring or as the graph of ContextOptions::graph.
  // Closes the previous neighbours' links gracefully (a failure report still
  // queued on them reaches the neighbours first). Each formation has a
  // generation number, the same on every member (it counts formations), so a
  // late join from an older one is refused. Must finish by join_timeout_ms.
  virtual Status Form(const std::vector<uint32_t>& members) = 0;
  // Leaves gracefully: what is queued for the neighbours (the last chunks of
  // the last collective) is sent before the links close; waits for the
  // neighbours' end of stream, at most 5 s. Destroying a context without
  // Close() drops whatever is still queued.
  virtual Status Close() = 0;

  virtual uint32_t rank() const = 0;        // this peer's original rank
  virtual uint32_t peer_count() const = 0;  // the original peer list's size
  virtual const std::vector<uint32_t>& members() const = 0;
  virtual std::size_t position() const = 0;  // this peer's index in members()
  virtual uint32_t generation() const = 0;   // formations so far (1 after the first Form)
  virtual GossipGraph graph() const = 0;
  // Ring neighbours (members() is the ring in ascending order).
  uint32_t left() const;
  uint32_t right() const;
  // The gossip neighbours in the order gossip mixes them: on the ring the
  // left then the right one (one neighbour, weight 1/2, with two members;
  // 1/3 each with more), on a graph ascending by rank with Metropolis weights.
  virtual const std::vector<Neighbour>& neighbours() const = 0;

  // ---- Frames ----------------------------------------------------------------
  virtual uint32_t step_timeout_ms() const = 0;
  // The clock of every deadline (ContextOptions::clock).
  virtual const Clock& clock() const = 0;
  // Now plus `ms`, and now plus the step timeout, on clock().
  Deadline DeadlineAfterMs(uint32_t ms) const;
  Deadline StepDeadline() const;
  virtual const transport::FrameLimits& limits() const = 0;
  // Numbers the collectives of a formation (1, 2, ...; Form() restarts it).
  virtual uint64_t NextCollectiveId() = 0;

  // A slot to encode the next frame to neighbour `to` in (one pool per link,
  // so a stalled neighbour cannot starve a healthy one): a free one, a new
  // one while there are fewer than kMaxSlots, or the first one released. A
  // null slot: that neighbour has finished and left (nothing more to send
  // it). Errors (its link closed; no slot released by the deadline,
  // "cannot send <what>: ...") have been reported as the failure of a rank.
  static constexpr std::size_t kMaxSlots = 64;
  virtual Result<transport::FrameSlot*> FreeSlot(uint32_t to, Deadline deadline, const char* what) = 0;
  // Queues a frame for neighbour `to`. An encoding error is returned as it
  // is; a failed send is reported (OK when that neighbour has left, else the
  // failure of `to`, or of the rank a failure report queued here names).
  virtual Status Send(uint32_t to, Result<transport::OutFrame> frame) = 0;
  // The next data frame from neighbour `from`. Failure reports from any
  // neighbour and closed links end the wait with the failure (recorded and
  // reported); so does the deadline (ring: after the suspicion exchange
  // above). `leaving_is_ok`: that neighbour having finished and left (Close)
  // is kCancelled, not a failure (graph neighbours: always).
  virtual Result<transport::Frame> Receive(uint32_t from, Deadline deadline, bool leaving_is_ok = false) = 0;

  // ---- Registered buffers ----------------------------------------------------
  // Chunks from neighbour `from` whose payloads go straight into caller memory
  // (copied into the context's own list, which is reused). Such a chunk then
  // arrives as a Frame whose payload was placed (DecodeRingChunk points at
  // data) or consumed (payload data null: already reduced into data).
  virtual void ExpectPayloads(uint32_t from, const RegisteredBuffer* buffers, std::size_t count) = 0;
  // Waits until no queued frame borrows caller memory (PayloadMode::kBorrow)
  // and no payload is being written into a registered buffer, and forgets
  // the buffers. A collective calls it before returning, on every path, so
  // the caller may change or free its memory. A link whose transfers do not
  // finish by the deadline (plus a short grace) is aborted.
  virtual void ReleaseBuffers(Deadline deadline) = 0;

  // ---- Failures --------------------------------------------------------------
  // Fails the collective: records `failed` as the failed rank (the first one
  // recorded stays) and reports it both ways; returns `status`.
  virtual Status Fail(int failed, const Status& status) = 0;
  // After a collective failed because a peer failed: its original rank, or -1.
  virtual int failed_rank() const = 0;
  // kFailedPrecondition after a failure until the next Form().
  Status CheckUsable() const;
  // "peer rank 2 (p2)".
  virtual std::string Name(uint32_t rank) const = 0;
  Status Named(uint32_t rank, const Status& status) const;
};

// The in-process binding: n peers in one process joined over the loopback
// transport (transport/loopback.h), for tests and single-process
// simulations. Contexts form, fail (destroy one: its links close) and
// re-form as TCP contexts do; registered buffers are not placed (the
// loopback delivers whole frames), so collectives take their copying path.
// `loop` runs the links' handlers and must outlive the network and every
// context. Thread-safety: Connect and the contexts from any thread (each
// context by one).
class LoopbackPeerNetwork {
 public:
  LoopbackPeerNetwork(transport::EventLoop& loop, uint32_t peers, const ContextOptions& options = {});
  ~LoopbackPeerNetwork();
  LoopbackPeerNetwork(const LoopbackPeerNetwork&) = delete;
  LoopbackPeerNetwork& operator=(const LoopbackPeerNetwork&) = delete;

  // Rank `rank`'s context (ids "p0", "p1", ...); once per rank.
  Result<std::unique_ptr<CollectiveContext>> Connect(uint32_t rank);

 private:
  std::shared_ptr<internal::LoopbackHub> hub_;
};

}  // namespace peer
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_COLLECTIVE_CONTEXT_H_
