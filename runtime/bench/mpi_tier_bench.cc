// What the MPI aggregator tier (fedrt/runtime/mpi_tier.h) costs each rank,
// the per-rank figures of the capacity model (runtime/README.md, "Aggregator
// tier on MPI"): the Tick agreement (an AllGather of 26 bytes a rank, every
// 20 ms slice), the close of a plain round (CombineRoundPartials of a
// model-sized double sum: the counts by AllGather, the sum as a
// reduce-scatter (AllToAll, each rank adding its slice in rank order) and an
// all-gather of the added slices), the NDQSG close's gather of the round's
// payloads, and a robust rule's close (every rank's decoded updates to rank
// 0 with GatherToRank0).
//
// Usage (built with the tier: FEDRT_WITH_MPI and an MPI found):
//   mpirun --oversubscribe -np 4 build/release/runtime/fedrt_mpi_tier_bench [iterations]
// Expected output (rank 0; p50 / p99 of rank 0's times over the iterations):
//   ranks 4  tick agreement                 p50 ... ms  p99 ... ms
//   ranks 4  plain close d=266610 (LeNet-300-100)  p50 ... ms  p99 ... ms  (... MB a rank)
//   ranks 4  plain close d=262144 (1 MB model)     ...
//   ranks 4  ndqsg close 64 payloads a rank of 33 KB  ...
//   ranks 4  robust close: 16 updates a rank to rank 0 (LeNet-300-100)  ...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "fedrt/runtime/aggregator_tier.h"
#include "fedrt/runtime/mpi_tier.h"

namespace {

using Clock = std::chrono::steady_clock;

void Time(fedrt::AggregatorTier& tier, const char* what, int iterations, const std::function<void()>& step) {
  std::vector<double> ms;
  step();  // warm-up
  for (int i = 0; i < iterations; ++i) {
    const auto start = Clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  if (tier.rank() == 0) {
    std::printf("ranks %d  %-48s p50 %8.3f ms  p99 %8.3f ms\n", tier.size(), what, ms[ms.size() / 2],
                ms[std::min(ms.size() - 1, ms.size() * 99 / 100)]);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 50;
  fedrt::Result<std::unique_ptr<fedrt::AggregatorTier>> started = fedrt::StartMpiTier();
  if (!started.ok()) {
    std::fprintf(stderr, "fedrt_mpi_tier_bench: %s\n", started.status().ToString().c_str());
    return 2;
  }
  fedrt::AggregatorTier& tier = **started;
  const std::vector<uint8_t> counts(26, 1);  // four counts and two flags
  std::vector<std::vector<uint8_t>> all;
  Time(tier, "tick agreement (26 bytes a rank)", iterations * 10, [&] { (void)tier.AllGather(counts, &all); });
  for (const auto& [d, name] : {std::pair<std::size_t, const char*>{266610, "LeNet-300-100"},
                                std::pair<std::size_t, const char*>{262144, "1 MB model"}}) {
    fedrt::RoundPartial mine;
    mine.sum.assign(d, 0.5);
    mine.weight = 100;
    mine.count = 10;
    char what[96];
    std::snprintf(what, sizeof what, "plain close d=%zu (%s, %.1f MB a rank)", d, name, static_cast<double>(d) * 8 / 1e6);
    Time(tier, what, iterations, [&] { (void)fedrt::CombineRoundPartials(tier, mine); });
  }
  // NDQSG: 64 nested payloads a rank of LeNet-300-100 at about 1 bit a coordinate.
  fedrt::RoundPartial nested;
  for (int i = 0; i < 64; ++i) {
    fedrt::ShardUpdate u;
    u.device_id = "dev-" + std::to_string(tier.rank() * 64 + i);
    u.spec = "ndqsg";
    u.payload.assign(33 * 1024, 7);
    nested.received.push_back(u);
  }
  Time(tier, "ndqsg close: 64 payloads of 33 KB a rank", iterations, [&] {
    (void)fedrt::CombineRoundPartials(tier, nested);
  });
  // A robust rule: 16 decoded LeNet-300-100 updates a rank (1.07 MB each) to rank 0.
  const std::vector<uint8_t> held(16 * 266610 * sizeof(float), 3);
  Time(tier, "robust close: 16 updates a rank to rank 0 (LeNet-300-100)", iterations, [&] {
    (void)tier.GatherToRank0(held, &all);
  });
  return 0;
}
