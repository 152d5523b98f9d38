// RoundPartial coding and merging, and the rendezvous hash of the aggregator
// tier (fedrt/runtime/aggregator_tier.h). The bytes only travel between the
// ranks of one job (same build), so the coding is the persistence helper's
// little-endian fields without a file frame.
#include "fedrt/runtime/aggregator_tier.h"

#include <cstring>
#include <utility>

#include "persist/coding.h"
#include "star/aggregator_checkpoint.h"

namespace fedrt {

namespace {

constexpr uint32_t kPartialMagic = 0x46525031u;  // "FRP1"
// Bounds on what one partial may claim, checked before anything is sized.
constexpr std::size_t kMaxText = 1024;
constexpr uint64_t kMaxCount = uint64_t{1} << 32;

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

void F64s(persist::Reader& r, uint64_t count, std::vector<double>* out) {
  if (count > r.left() / 8) return r.Fail();
  out->resize(static_cast<std::size_t>(count));
  for (double& v : *out) v = r.F64();
}

}  // namespace

std::string AggregatorTier::AddressOf(int rank) const {
  return rank >= 0 && static_cast<std::size_t>(rank) < addresses_.size() ? addresses_[static_cast<std::size_t>(rank)]
                                                                         : std::string();
}

Status AggregatorTier::ShareAddress(const std::string& mine) {
  std::vector<std::vector<uint8_t>> all;
  FEDRT_RETURN_IF_ERROR(AllGather(std::vector<uint8_t>(mine.begin(), mine.end()), &all));
  addresses_.clear();
  for (const std::vector<uint8_t>& address : all) addresses_.emplace_back(address.begin(), address.end());
  return Status::Ok();
}

Status AggregatorTier::BroadcastFromRank0(std::vector<uint8_t>* bytes) {
  std::vector<std::vector<uint8_t>> all;
  FEDRT_RETURN_IF_ERROR(AllGather(rank() == 0 ? *bytes : std::vector<uint8_t>(), &all));
  if (all.empty()) return Corrupt("aggregator tier: no rank 0 in the gather");
  *bytes = std::move(all[0]);
  return Status::Ok();
}

int ShardOfDevice(const std::string& device_id, int ranks) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a of the id
  for (unsigned char c : device_id) h = (h ^ c) * 1099511628211ULL;
  int best = 0;
  uint64_t best_score = 0;
  for (int r = 0; r < ranks; ++r) {
    const uint64_t score = Mix(h ^ Mix(static_cast<uint64_t>(r) + 1));
    if (r == 0 || score > best_score) {
      best = r;
      best_score = score;
    }
  }
  return best;
}

std::vector<uint8_t> EncodeRoundPartial(const RoundPartial& p) {
  persist::Writer w;
  w.U32(kPartialMagic);
  w.U64(p.sum.size());
  for (double v : p.sum) w.F64(v);
  w.F64(p.weight);
  w.U64(p.count);
  w.U64(p.updates);
  w.U64(p.rejected);
  w.U64(p.clipped);
  w.F64(p.loss_sum);
  w.F64(p.sample_sum);
  w.U64(p.bytes_up);
  w.U64(p.bytes_down);
  w.U64(p.full_models_down);
  PutLevelStatistics(w, p.levels);
  w.U64(p.received.size());
  for (const ShardUpdate& u : p.received) {
    w.String(u.device_id);
    w.U32(u.sender_id);
    w.String(u.spec);
    w.U8(u.role);
    w.I32(u.rho);
    w.U64(u.num_samples);
    w.F32(u.loss);
    w.U64(u.wire_bytes);
    w.U64(u.payload.size());
    w.Bytes(u.payload.data(), u.payload.size());
  }
  return std::move(w).Take();
}

Result<RoundPartial> DecodeRoundPartial(const std::vector<uint8_t>& bytes) {
  persist::Reader r(bytes.data(), bytes.size());
  RoundPartial p;
  if (r.U32() != kPartialMagic) return Corrupt("round partial: bad magic");
  F64s(r, r.U64(), &p.sum);
  p.weight = r.F64();
  p.count = r.U64();
  p.updates = r.U64();
  p.rejected = r.U64();
  p.clipped = r.U64();
  p.loss_sum = r.F64();
  p.sample_sum = r.F64();
  p.bytes_up = r.U64();
  p.bytes_down = r.U64();
  p.full_models_down = r.U64();
  ReadLevelStatistics(r, &p.levels);
  const uint64_t received = r.U64();
  if (received > kMaxCount) r.Fail();
  for (uint64_t i = 0; r.ok() && i < received; ++i) {
    ShardUpdate u;
    u.device_id = r.String(kMaxText);
    u.sender_id = r.U32();
    u.spec = r.String(kMaxText);
    u.role = r.U8();
    u.rho = r.I32();
    u.num_samples = r.U64();
    u.loss = r.F32();
    u.wire_bytes = r.U64();
    const uint64_t payload = r.U64();
    const uint8_t* data = payload <= r.left() ? r.Bytes(static_cast<std::size_t>(payload)) : nullptr;
    if (data == nullptr) break;
    u.payload.assign(data, data + payload);
    p.received.push_back(std::move(u));
  }
  if (!r.AtEnd()) return Corrupt("round partial: truncated or malformed (" + std::to_string(bytes.size()) + " bytes)");
  return p;
}

Status MergeRoundPartial(RoundPartial* into, const RoundPartial& from) {
  if (into->sum.empty()) {
    into->sum.assign(from.sum.size(), 0.0);
  } else if (!from.sum.empty() && from.sum.size() != into->sum.size()) {
    return InvalidArgument("round partials of " + std::to_string(into->sum.size()) + " and " +
                           std::to_string(from.sum.size()) + " values");
  }
  for (std::size_t i = 0; i < from.sum.size(); ++i) into->sum[i] += from.sum[i];
  into->weight += from.weight;
  into->count += from.count;
  into->updates += from.updates;
  into->rejected += from.rejected;
  into->clipped += from.clipped;
  into->loss_sum += from.loss_sum;
  into->sample_sum += from.sample_sum;
  into->bytes_up += from.bytes_up;
  into->bytes_down += from.bytes_down;
  into->full_models_down += from.full_models_down;
  into->levels.Merge(from.levels);
  into->received.insert(into->received.end(), from.received.begin(), from.received.end());
  return Status::Ok();
}

Result<RoundPartial> CombineRoundPartials(AggregatorTier& tier, const RoundPartial& mine) {
  std::vector<std::vector<uint8_t>> all;
  FEDRT_RETURN_IF_ERROR(tier.AllGather(EncodeRoundPartial(mine), &all));
  RoundPartial combined;
  for (std::size_t rank = 0; rank < all.size(); ++rank) {
    Result<RoundPartial> part = DecodeRoundPartial(all[rank]);
    if (!part.ok()) return Status(part.status().code(), "rank " + std::to_string(rank) + ": " + part.status().message());
    FEDRT_RETURN_IF_ERROR(MergeRoundPartial(&combined, *part));
  }
  return combined;
}

}  // namespace fedrt
