// Peer topology: devices that train together without an aggregator.
//
// The pieces, bottom up:
//   collective_context.h  CollectiveContext, what collectives see of the
//                         group (rank, members, neighbours, frames, failure
//                         reports), and its in-process binding;
//   this header           the TCP binding (TcpPeerContext) and PeerGroup, a
//                         context with one of each collective;
//   collectives.h         the algorithms, one per file;
//   peer_trainer.h        the training loop (PeerTrainer) over a context.
//
// TcpPeerContext is one peer's view of a static peer list (rank = position in
// the list). It listens on its own address and keeps authenticated TCP
// connections (transport/, the same pre-shared-key join as the star
// topology) to its neighbours only: on the ring it dials rank + 1 and accepts
// rank - 1 (modulo the ring); on a torus it holds one connection per graph
// edge, dialled by the lower rank. Form() must finish within
// join_timeout_ms, every collective within step_timeout_ms.
//
// Embedding peer training in an application (`fedrt peer` is this plus
// flags, data loading and printing; value() stands for error handling):
//
//   auto keys = transport::KeyStore::LoadFile("peer-keys.txt").value();
//   auto context = peer::TcpPeerContext::Create(peers, rank, keys, peer::PeerOptions()).value();
//   if (!context->Form({}).ok()) return 1;                   // every peer of the list
//   Model model = Model::Create("mlp:784-300-100-10", /*seed=*/1).value();  // the same seed everywhere
//   peer::PeerData data;                                     // the application's memory:
//   data.set = train;                                        //   a DataView of the whole set
//   data.share = share.data(), data.share_size = share.size();  // this peer's examples
//   peer::PeerTrainerOptions options;                        // dense all-reduce, 1 epoch
//   options.sgd.schedule.base_lr = 0.05;
//   options.repair = true;                                   // drop a failed peer, re-form, go on
//   auto trainer = peer::PeerTrainer::Create(model, data, *context, options).value();
//   Status trained = trainer->Run([&](const peer::PeerProgress& p) {
//     if (p.epoch_end) std::printf("epoch %d loss %.4f\n", p.epoch + 1, p.epoch_loss);
//     return Status::Ok();
//   });
//   (void)context->Close();  // the neighbours still need this peer's last chunks
//
// In one process (tests, simulations) LoopbackPeerNetwork's contexts take
// the place of TcpPeerContext, one thread per rank.
//
// Thread-safety: a context and a PeerGroup are used by one thread (the
// training loop); the TCP context's connections run on its own event loop
// thread (the binding's, started by Create).
#ifndef FEDRT_RUNTIME_PEER_H_
#define FEDRT_RUNTIME_PEER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fedrt/codecs/iwp.h"
#include "fedrt/platform/status.h"
#include "fedrt/runtime/collective_context.h"
#include "fedrt/runtime/collectives.h"
#include "fedrt/transport/link_profile.h"
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

struct PeerOptions : ContextOptions {
  // Ring all-reduce pipelining granularity in floats (RingAllReduce; 0:
  // automatic). Used by PeerGroup, not by the context.
  uint32_t chunk_floats = 0;
  // TLS on every link: cert_file + key_file (accepting) and ca_file (dialling;
  // peers then also require each other's certificates). Empty: plain TCP.
  transport::TlsConfig tls;
  // Shape this peer's links in user space (transport/shaper.h): what it
  // sends to all its neighbours shares the uplink, what it receives the
  // downlink, as on a real link of that rate, delay and loss. The neighbours
  // are taken to shape theirs too (LinkShaper::FarEnd::kShaped: a hop costs
  // a frame's time once, plus both ends' delays). Not shaped(): none (TCP
  // binding only).
  transport::LinkProfile link;
};

// The TCP binding of the collective context (built with the Linux hosts:
// FEDRT_WITH_ASIO and FEDRT_WITH_OPENSSL).
class TcpPeerContext : public virtual CollectiveContext {
 public:
  // Binds peers[rank]'s address (port 0: a free port, see port()) and starts
  // the binding's event loop thread. `keys` holds this peer's own key and
  // those of the peers it authenticates; it must outlive the context.
  static Result<std::unique_ptr<TcpPeerContext>> Create(std::vector<PeerAddress> peers, uint32_t rank,
                                                        const transport::KeyStore& keys, const PeerOptions& options);

  // The port actually bound (after Create with port 0).
  virtual uint16_t port() const = 0;
  // Tests that bind port 0 tell every context the real ports before Form().
  virtual void SetPort(uint32_t rank, uint16_t port) = 0;
};

// A context and one of each collective over it, for applications (and the
// trainer) that call collectives by name. Owns the context or borrows it.
class PeerGroup {
 public:
  // A TCP context (TcpPeerContext::Create) in a group (Linux hosts only,
  // like TcpPeerContext).
  static Result<std::unique_ptr<PeerGroup>> Create(std::vector<PeerAddress> peers, uint32_t rank,
                                                   const transport::KeyStore& keys, const PeerOptions& options);
  explicit PeerGroup(std::unique_ptr<CollectiveContext> context, uint32_t chunk_floats = 0);
  // `context` must outlive the group.
  explicit PeerGroup(CollectiveContext& context, uint32_t chunk_floats = 0);
  ~PeerGroup();
  PeerGroup(const PeerGroup&) = delete;
  PeerGroup& operator=(const PeerGroup&) = delete;

  CollectiveContext& context() { return context_; }

  Status Form(const std::vector<uint32_t>& members) { return context_.Form(members); }
  // Sum over the ring's members, in place. `codec_spec` empty: raw fp32
  // (RingAllReduce); otherwise every hop carries that codec's payload
  // (CompressedRingAllReduce, e.g. "fp16").
  Status AllReduce(float* data, std::size_t n, const std::string& codec_spec = "");
  // Sum over the ring's members of their compressed vectors
  // (AllGatherAllReduce: the quantizers and sparsifiers, error feedback).
  Status CompressedAllReduce(float* data, std::size_t n, const std::string& codec_spec);
  // AllGatherAllReduce's error-feedback residual (null: none).
  const float* compressed_residual() const { return gathered_.residual(); }
  // ALQ / AMQ in the compressed all-reduce: the current level table (null: none).
  const LevelTable* compressed_level_table() const { return gathered_.level_table(); }
  Status IwpAllReduce(IwpAccumulator& accumulator, const float* weights, uint64_t seed, uint32_t step,
                      std::vector<uint32_t>* indices, std::vector<float>* sums);
  Status GossipStep(float* model, const float* grad, std::size_t d, float lr, const std::string& codec_spec,
                    uint64_t step, GossipStats* stats);
  // The model's tensor table for the gossip codec and the compressed
  // all-reduce (Gossip::SetTensorTable, AllGatherAllReduce::SetTensorTable).
  // Gossip::SetDefense, Gossip::SetAlgorithm and Gossip::SetSendTransform.
  Status SetGossipDefense(const GossipDefense& defense) { return gossip_.SetDefense(defense); }
  Status SetGossipAlgorithm(GossipAlgorithm algorithm, float d2_gain = 1.0f, float d2_leak = 0.0f) {
    return gossip_.SetAlgorithm(algorithm, d2_gain, d2_leak);
  }
  void SetGossipSendTransform(std::function<void(uint64_t, float*, std::size_t)> transform) {
    gossip_.SetSendTransform(std::move(transform));
  }
  void SetTensorTable(std::vector<std::size_t> tensor_sizes) {
    gathered_.SetTensorTable(tensor_sizes);
    gossip_.SetTensorTable(std::move(tensor_sizes));
  }
  Result<uint64_t> AgreeStep(uint64_t step) { return peer::AgreeStep(context_, step); }
  // The collectives, to bind their memory (collectives.h, "Memory"; the
  // peer trainer carves it from its block).
  RingAllReduce& dense() { return dense_; }
  CompressedRingAllReduce& compressed() { return compressed_; }
  AllGatherAllReduce& gathered() { return gathered_; }
  peer::IwpAllReduce& iwp() { return iwp_; }
  Gossip& gossip() { return gossip_; }
  Status Close() { return context_.Close(); }

  const std::vector<uint32_t>& members() const { return context_.members(); }
  uint32_t rank() const { return context_.rank(); }
  // After a collective failed because a peer failed: its original rank, or -1.
  int FailedRank() const { return context_.failed_rank(); }
  // The last AllReduce or IwpAllReduce.
  AllReduceStats last_stats() const { return last_stats_; }
  // Payload bytes of every collective that completed (IWP: its index
  // broadcasts also when the sum failed).
  uint64_t total_bytes_sent() const;

 private:
  std::unique_ptr<CollectiveContext> owned_;
  CollectiveContext& context_;
  RingAllReduce dense_;
  CompressedRingAllReduce compressed_;
  AllGatherAllReduce gathered_;
  peer::IwpAllReduce iwp_;
  Gossip gossip_;
  AllReduceStats last_stats_;
};

}  // namespace peer
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_PEER_H_
