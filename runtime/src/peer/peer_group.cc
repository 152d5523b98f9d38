// PeerGroup: a collective context with one of each collective (peer.h).
#include "fedrt/runtime/peer.h"

#include <utility>

namespace fedrt {
namespace peer {

PeerGroup::PeerGroup(std::unique_ptr<CollectiveContext> context, uint32_t chunk_floats)
    : owned_(std::move(context)), context_(*owned_), dense_(context_, chunk_floats),
      compressed_(context_, chunk_floats), gathered_(context_), iwp_(context_, dense_), gossip_(context_) {}

PeerGroup::PeerGroup(CollectiveContext& context, uint32_t chunk_floats)
    : context_(context), dense_(context_, chunk_floats), compressed_(context_, chunk_floats), gathered_(context_),
      iwp_(context_, dense_), gossip_(context_) {}

PeerGroup::~PeerGroup() = default;

Status PeerGroup::AllReduce(float* data, std::size_t n, const std::string& codec_spec) {
  Status s;
  if (codec_spec.empty()) {
    s = dense_.Run(data, n);
    last_stats_ = dense_.stats();
  } else {
    s = compressed_.Run(data, n, codec_spec);
    last_stats_ = compressed_.stats();
  }
  return s;
}

Status PeerGroup::CompressedAllReduce(float* data, std::size_t n, const std::string& codec_spec) {
  Status s = gathered_.Run(data, n, codec_spec);
  last_stats_ = gathered_.stats();
  return s;
}

Status PeerGroup::IwpAllReduce(IwpAccumulator& accumulator, const float* weights, uint64_t seed, uint32_t step,
                               std::vector<uint32_t>* indices, std::vector<float>* sums) {
  Status s = iwp_.Run(accumulator, weights, seed, step, indices, sums);
  last_stats_ = iwp_.stats();
  return s;
}

Status PeerGroup::GossipStep(float* model, const float* grad, std::size_t d, float lr, const std::string& codec_spec,
                             uint64_t step, GossipStats* stats) {
  return gossip_.Step(model, grad, d, lr, codec_spec, step, stats);
}

uint64_t PeerGroup::total_bytes_sent() const {
  return dense_.total_bytes_sent() + compressed_.total_bytes_sent() + gathered_.total_bytes_sent() +
         iwp_.total_bytes_sent() +
         gossip_.total_bytes_sent();
}

}  // namespace peer
}  // namespace fedrt
