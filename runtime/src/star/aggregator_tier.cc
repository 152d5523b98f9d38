// RoundPartial coding, merging and the reduce-scatter of the round sums,
// AllToAll and GatherToRank0 on AllGather, and the rendezvous hash of the
// aggregator tier (fedrt/runtime/aggregator_tier.h). The bytes only travel between the
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
  r.F64s(out->size(), out->data());
}

std::vector<uint8_t> EncodeF64s(const double* values, std::size_t count) {
  persist::Writer w;
  w.F64s(values, count);
  return std::move(w).Take();
}

// A partial; `sum_values` false sends the sum's length only (its values
// travel in ReduceSums).
std::vector<uint8_t> EncodePartial(const RoundPartial& p, bool sum_values) {
  persist::Writer w;
  w.U32(kPartialMagic);
  w.U64(p.sum.size());
  if (sum_values) w.F64s(p.sum.data(), p.sum.size());
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

// `sum_values` as EncodePartial's; the sum's length goes to *sum_size.
Result<RoundPartial> DecodePartial(const std::vector<uint8_t>& bytes, bool sum_values, uint64_t* sum_size) {
  persist::Reader r(bytes.data(), bytes.size());
  RoundPartial p;
  if (r.U32() != kPartialMagic) return Corrupt("round partial: bad magic");
  *sum_size = r.U64();
  if (sum_values) F64s(r, *sum_size, &p.sum);
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

// Every rank's `mine` (d doubles on every rank) added in rank order, on
// every rank: rank j adds slice j ([d j / K, d (j + 1) / K)) of every rank's
// sum, 0 + rank 0's + rank 1's + ..., as MergeRoundPartial adds whole sums,
// so the bits are the same; then every rank gathers the K added slices. A
// rank sends and receives about 2 d doubles, whatever K (a reduce-scatter
// and an all-gather), where gathering every rank's sum costs K d.
Result<std::vector<double>> ReduceSums(AggregatorTier& tier, const std::vector<double>& mine) {
  const std::size_t ranks = static_cast<std::size_t>(tier.size());
  const std::size_t self = static_cast<std::size_t>(tier.rank());
  const std::size_t d = mine.size();
  const auto begin = [&](std::size_t j) { return d * j / ranks; };
  std::vector<std::vector<uint8_t>> to(ranks), from;
  for (std::size_t j = 0; j < ranks; ++j) to[j] = EncodeF64s(mine.data() + begin(j), begin(j + 1) - begin(j));
  FEDRT_RETURN_IF_ERROR(tier.AllToAll(to, &from));
  to.clear();
  const std::size_t length = begin(self + 1) - begin(self);
  if (from.size() != ranks) return Corrupt("round sum: " + std::to_string(from.size()) + " slices");
  std::vector<double> slice(length, 0.0), part(length);
  for (std::size_t i = 0; i < ranks; ++i) {
    if (from[i].size() != length * 8) {
      return Corrupt("round sum: rank " + std::to_string(i) + "'s slice has " + std::to_string(from[i].size()) +
                     " bytes, not " + std::to_string(length * 8));
    }
    persist::Reader r(from[i].data(), from[i].size());
    r.F64s(length, part.data());
    for (std::size_t x = 0; x < length; ++x) slice[x] += part[x];
  }
  from.clear();
  std::vector<std::vector<uint8_t>> slices;
  FEDRT_RETURN_IF_ERROR(tier.AllGather(EncodeF64s(slice.data(), slice.size()), &slices));
  if (slices.size() != ranks) return Corrupt("round sum: " + std::to_string(slices.size()) + " added slices");
  std::vector<double> sum(d);
  for (std::size_t j = 0; j < ranks; ++j) {
    if (slices[j].size() != (begin(j + 1) - begin(j)) * 8) {
      return Corrupt("round sum: rank " + std::to_string(j) + "'s added slice has " +
                     std::to_string(slices[j].size()) + " bytes");
    }
    persist::Reader r(slices[j].data(), slices[j].size());
    r.F64s(begin(j + 1) - begin(j), sum.data() + begin(j));
  }
  return sum;
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

Status AggregatorTier::AllToAll(const std::vector<std::vector<uint8_t>>& to, std::vector<std::vector<uint8_t>>* from) {
  if (to.size() != static_cast<std::size_t>(size())) {
    return InvalidArgument("aggregator tier: " + std::to_string(to.size()) + " parts for " + std::to_string(size()) +
                           " ranks");
  }
  persist::Writer w;
  for (const std::vector<uint8_t>& part : to) {
    w.U64(part.size());
    w.Bytes(part.data(), part.size());
  }
  std::vector<std::vector<uint8_t>> all;
  FEDRT_RETURN_IF_ERROR(AllGather(std::move(w).Take(), &all));
  from->assign(all.size(), {});
  for (std::size_t rank = 0; rank < all.size(); ++rank) {
    persist::Reader r(all[rank].data(), all[rank].size());
    const uint8_t* part = nullptr;
    uint64_t size = 0;
    for (int j = 0; j <= this->rank() && r.ok(); ++j) {
      size = r.U64();
      part = size <= r.left() ? r.Bytes(static_cast<std::size_t>(size)) : nullptr;
      if (part == nullptr) r.Fail();
    }
    if (!r.ok()) return Corrupt("aggregator tier: rank " + std::to_string(rank) + "'s parts");
    (*from)[rank].assign(part, part + size);
  }
  return Status::Ok();
}

Status AggregatorTier::GatherToRank0(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) {
  FEDRT_RETURN_IF_ERROR(AllGather(mine, all));
  if (rank() != 0) all->clear();
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

std::vector<uint8_t> EncodeRoundPartial(const RoundPartial& p) { return EncodePartial(p, /*sum_values=*/true); }

Result<RoundPartial> DecodeRoundPartial(const std::vector<uint8_t>& bytes) {
  uint64_t sum_size = 0;
  return DecodePartial(bytes, /*sum_values=*/true, &sum_size);
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
  // Everything but the sum's values to every rank (counts, statistics, NDQSG
  // payloads), merged in rank order; then the sums, added in rank order.
  std::vector<std::vector<uint8_t>> all;
  FEDRT_RETURN_IF_ERROR(tier.AllGather(EncodePartial(mine, /*sum_values=*/false), &all));
  RoundPartial combined;
  uint64_t length = 0;
  for (std::size_t rank = 0; rank < all.size(); ++rank) {
    uint64_t sum_size = 0;
    Result<RoundPartial> part = DecodePartial(all[rank], /*sum_values=*/false, &sum_size);
    if (!part.ok()) return Status(part.status().code(), "rank " + std::to_string(rank) + ": " + part.status().message());
    // Every rank sees every length: all refuse a mismatch, none waits below.
    if (rank == 0) length = sum_size;
    if (sum_size != length) {
      return InvalidArgument("round partials of " + std::to_string(length) + " and " + std::to_string(sum_size) +
                             " values");
    }
    FEDRT_RETURN_IF_ERROR(MergeRoundPartial(&combined, *part));
  }
  if (all.size() != static_cast<std::size_t>(tier.size())) {
    return Corrupt("aggregator tier: " + std::to_string(all.size()) + " partials from " + std::to_string(tier.size()) +
                   " ranks");
  }
  if (length > 0) {
    Result<std::vector<double>> sum = ReduceSums(tier, mine.sum);
    if (!sum.ok()) return sum.status();
    combined.sum = std::move(*sum);
  }
  return combined;
}

}  // namespace fedrt
