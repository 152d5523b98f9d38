// Peer topology: devices that train together without an aggregator.
//
// A PeerGroup is one peer's view of a static peer list (rank = position in
// the list). It listens on its own address and keeps authenticated TCP
// connections (transport/, the same pre-shared-key join as the star
// topology) to the two ring neighbours only: it dials rank + 1 and accepts
// rank - 1 (modulo the ring). Each connection carries data one way (the
// dialled one to the right, the accepted one from the left), so every link
// is full-duplex and no peer ever blocks on a write: sends are queued on the
// connection and go out from the event loop while the caller's thread waits
// for what arrives from the left.
//
// Collectives (all ranks call them in the same order with the same sizes):
//   AllReduce      ring all-reduce of a float vector, in place: reduce-scatter
//                  then all-gather, each segment cut into chunks that are
//                  forwarded as soon as they are reduced (pipelined). Dense
//                  fp32, or every hop carries a codec payload (e.g. "fp16"):
//                  reduce-scatter hops decode-and-add, the owner of a reduced
//                  segment encodes it once and every peer (the owner too)
//                  takes the decoded value, so all peers end bit-identical.
//   GossipStep     D-PSGD on the ring: models to both neighbours, full
//                  precision or Moniqua-coded, Metropolis mixing.
//   IwpAllReduce   IWP-sparse (codec specification, section 4): the leader of
//                  the step sends its index set around the ring; every peer
//                  all-reduces its accumulated values at those indices.
//
// Deadlines: Form() must finish within join_timeout_ms; every collective
// within step_timeout_ms. Errors name the peer by rank and id ("peer rank 2
// (p2): ..."). When a peer fails, the one that notices sends a failure report
// (an Error message "peer rank R failed: ...") both ways around the ring, so
// every survivor fails the step naming the same rank. FailedRank() tells the
// caller which rank it was; Form() with the surviving ranks re-forms a
// smaller ring (ring repair) on the same listener.
//
// Memory: scratch buffers (encoded hops, recovered models), the hop codec and
// the frame slots (one pool per link) are kept and reused. Raw ring chunks
// are sent straight from the caller's vector; received reduce-scatter chunks
// are added into the vector piece by piece as they arrive (one small buffer
// per connection) and all-gather chunks are received straight into the
// vector, so a steady-state dense all-reduce allocates no frame memory.
//
// Thread-safety: a PeerGroup is used by one thread (the training loop); its
// connections run on its own event loop thread.
#ifndef FEDRT_RUNTIME_PEER_H_
#define FEDRT_RUNTIME_PEER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/codecs/iwp.h"
#include "fedrt/platform/status.h"
#include "fedrt/transport/tls.h"

namespace fedrt {
namespace transport {
class KeyStore;
}

namespace peer {

struct PeerAddress {
  std::string id;    // device id: the key file's name for this peer
  std::string host;  // "127.0.0.1"
  uint16_t port = 0; // 0 only for a peer whose listener picks a free port (tests)
};

// The gossip graph over a group's members (in ascending rank order, node i =
// the i-th member). kRing: links to the two ring neighbours, used by every
// collective. kTorus: a 2-D torus of TorusShape(n) (rows x columns), node i
// at row i / columns, column i % columns, linked to its left, right, upper
// and lower neighbours (wrapping, duplicates merged); GossipStep only.
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

// Gossip with replicas (CHOCO-SGD, Koloskova et al. 2019): the gossip codec
// spec "choco+CODEC" or "choco:gamma=G+CODEC" (G in (0, 1], default 0.5;
// CODEC any codec that decodes without side information, e.g. sign:b=512).
// Each peer keeps 1 + (number of neighbours) more model-sized vectors: its
// public copy x^_i and a copy x^_j of each neighbour's. A step, in float32
// and this order:
//   x_i = x_i - lr g_i;  q_i = decode(encode(x_i - x^_i));  send q_i
//   x^_i = x^_i + q_i;  x^_j = x^_j + q_j for each neighbour j heard
//   x_i = x_i + sum_j (gamma W_ij) (x^_j - x^_i)       (MoniquaMixStep's order)
// The compression error stays in x_i - x^_i and is sent later, so 1-bit
// codecs reach consensus. All copies start at 0 and restart at 0 whenever
// the group's members change (every survivor does the same).
struct ChocoSpec {
  float gamma = 0.5f;
  std::string codec;  // the inner codec spec
};
bool IsChocoSpec(const std::string& spec);
// kInvalidArgument for a malformed spec (the inner codec is not checked here).
Result<ChocoSpec> ParseChocoSpec(const std::string& spec);

struct PeerOptions {
  GossipGraph graph = GossipGraph::kRing;
  uint32_t join_timeout_ms = 10000;  // Form(): dial, accept, authenticate
  uint32_t step_timeout_ms = 10000;  // each collective
  // Pipelining granularity in floats; 0: automatic, a segment (the vector's
  // share of one peer) over the ring size, within 1..4 MiB of fp32. Links
  // stay busy with two or more chunks per segment (the first segment's chunks
  // are all queued at once); the pipeline's drain grows with (ring size - 2)
  // chunks, so p chunks keep it under one segment; and fewer, larger frames
  // cost less per byte (16 MiB: 4 MiB chunks with 2 peers, 1 MiB with 4).
  uint32_t chunk_floats = 0;
  // TLS on every link: cert_file + key_file (accepting) and ca_file (dialling;
  // peers then also require each other's certificates). Empty: plain TCP.
  transport::TlsConfig tls;
};

struct AllReduceStats {
  uint64_t bytes_sent = 0;  // payload bytes this peer sent (frames' fields excluded)
  double seconds = 0;
};

struct GossipStats {
  uint64_t wrap_count = 0;  // Moniqua: coordinates recovered near the wrap boundary, all neighbours
  uint64_t bytes_sent = 0;  // payload bytes sent this step
};

class PeerGroup {
 public:
  // Binds peers[rank]'s address (port 0: a free port, see port()). `keys`
  // holds this peer's own key and those of the peers it authenticates.
  static Result<std::unique_ptr<PeerGroup>> Create(std::vector<PeerAddress> peers, uint32_t rank,
                                                   const transport::KeyStore& keys,
                                                   const PeerOptions& options);
  virtual ~PeerGroup() = default;

  // The port actually bound (after Create with port 0).
  virtual uint16_t port() const = 0;
  // Tests that bind port 0 tell every group the real ports before Form().
  virtual void SetPort(uint32_t rank, uint16_t port) = 0;

  // (Re)forms the ring over `members` (original ranks, ascending, this peer
  // included; empty: every peer). Closes the previous neighbours' links.
  // Each formation has a generation number, so a late join from an older
  // ring is refused.
  virtual Status Form(const std::vector<uint32_t>& members) = 0;

  // Sum over the ring's members, in place. `codec_spec` empty: raw fp32;
  // otherwise every hop carries that codec's payload ("fp16").
  virtual Status AllReduce(float* data, std::size_t n, const std::string& codec_spec = "") = 0;

  // One IWP step. The caller has already Accumulate()d its gradient into
  // `accumulator`. The leader (IwpLeader(seed, step, ring size), by ring
  // position) selects indices from `weights`, broadcasts them; every peer
  // gathers-and-zeroes its accumulator there and the ring sums the values.
  // On return `indices` holds the index set and `sums` the summed values.
  // When the sum fails after this peer gathered its values, `sums` holds
  // those values (not reduced) so the caller can put them back into the
  // accumulator (empty when nothing was gathered).
  virtual Status IwpAllReduce(IwpAccumulator& accumulator, const float* weights, uint64_t seed,
                              uint32_t step, std::vector<uint32_t>* indices,
                              std::vector<float>* sums) = 0;

  // One decentralized SGD (D-PSGD) step on the graph (options.graph) with
  // Metropolis weights (ring: 1/3 per neighbour, 1/2 with two peers; torus:
  // MetropolisWeights): this peer sends `model` to its neighbours, raw fp32 when `codec_spec` is empty, else as that codec's
  // payload (e.g. "moniqua:bits=1,theta=0.5"); recovers theirs (Moniqua: with
  // its own model as side information) and applies, in place,
  //   x += sum_i W_i (x'_i - x'_self) - lr * grad      (MoniquaMixStep)
  // where x'_self is its own model passed through the same channel. Every
  // peer calls it with the same step number and codec. After a re-formation
  // (the second Form() on) a neighbour's model of another step is taken too
  // (peers that re-formed after a failure may be steps apart; it is decoded
  // with the sender's step). A neighbour that has left (Close()) is skipped
  // and its weight stays with this peer.
  virtual Status GossipStep(float* model, const float* grad, std::size_t d, float lr,
                            const std::string& codec_spec, uint64_t step, GossipStats* stats) = 0;

  // After Form(): every member passes the step it would run next and gets
  // the largest of them (the same on every member), so peers that re-formed
  // after a failure resume at one step (a peer that finished the failed step
  // before the failure is one step ahead of those that did not). Flooded
  // over the gossip links (ring or graph), members - 1 rounds. Every member
  // calls it right after the same Form(), before any other collective.
  virtual Result<uint64_t> AgreeStep(uint64_t step) = 0;

  // Leaves the ring gracefully: what is queued for the neighbours (the last
  // chunks of the last collective) is sent before the links close; waits for
  // the neighbours' end of stream, at most 5 s. Destroying a group without
  // Close() drops whatever is still queued.
  virtual Status Close() = 0;

  // The ring's members (original ranks) and this peer's original rank.
  virtual const std::vector<uint32_t>& members() const = 0;
  virtual uint32_t rank() const = 0;
  // After a collective failed because a peer failed: its original rank, or -1.
  virtual int FailedRank() const = 0;
  virtual AllReduceStats last_stats() const = 0;
  virtual uint64_t total_bytes_sent() const = 0;
};

}  // namespace peer
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_PEER_H_
