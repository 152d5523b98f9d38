// The peer trainer in one caller block (PeerTrainer::RequiredBytes, then
// CreateIn): the models after a few steps are the same bits as before the
// block existed (golden hashes, recorded from the heap engine), for the dense
// ring, IWP, gossip and Moniqua gossip over the in-process loopback, one
// thread per rank; and the step path allocates nothing, the collectives' and
// the loopback binding's included. The allocation counter
// (tests/support/allocation_counter.h) counts every thread: the ranks' and
// the loopback's event loop.
#include <doctest/doctest.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "allocation_counter.h"
#include "engine_fixtures.h"
#include "fedrt/platform/config.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/peer.h"
#include "fedrt/runtime/peer_trainer.h"
#include "peer_ring.h"

namespace fedrt {
namespace {

using testing::Blobs;
using testing::LoopbackRing;

constexpr const char* kModel = "mlp:16-8-4";
constexpr int kRanks = 3;
constexpr uint32_t kSteps = 8;
constexpr std::size_t kCountFrom = 2;  // the step from which allocations are counted

// FNV-1a of every rank's parameters, rank by rank.
uint64_t Hash(const std::vector<Model>& models) {
  uint64_t h = 1469598103934665603ull;
  for (const Model& m : models) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(m.parameters());
    for (std::size_t i = 0; i < m.parameter_count() * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

// Every rank waits at step kCountFrom until all are there; the last one in
// starts counting, so the window holds steps kCountFrom.. of every rank.
class CountingObserver : public peer::PeerTrainerObserver {
 public:
  struct Shared {
    std::mutex mutex;
    std::condition_variable all_in;
    int arrived = 0;
  };
  explicit CountingObserver(Shared& shared) : shared_(shared) {}
  void OnStep(int epoch, std::size_t steps_done, std::size_t) override {
    if (epoch != 0 || steps_done != kCountFrom) return;
    std::unique_lock<std::mutex> lock(shared_.mutex);
    if (++shared_.arrived == kRanks) {
      testing::StartCountingAllocations();
      shared_.all_in.notify_all();
    } else {
      shared_.all_in.wait(lock, [&] { return shared_.arrived == kRanks; });
    }
  }

 private:
  Shared& shared_;
};

struct RunResult {
  uint64_t hash = 0;
  long allocations = 0;  // every thread, from step kCountFrom to the end of Run
};

peer::PeerTrainerOptions Options(peer::PeerReduce reduce, const std::string& codec) {
  peer::PeerTrainerOptions o;
  o.reduce = reduce;
  o.codec = codec;
  o.sgd.schedule.base_lr = 0.05;
  o.sgd.momentum = 0.5f;
  o.batch = 8;
  o.seed = 5;
  o.max_steps = kSteps;
  o.moniqua_refresh_steps = 3;  // Moniqua: theta agreed again within the window
  o.iwp.density = 0.25f;
  o.iwp.dense_below = 0;        // every tensor sparse: the accumulator carries values across steps
  return o;
}

// Trains kRanks ranks for kSteps steps; `arena`: each trainer in a caller
// block at an odd address (CreateIn), else on Create's heap block.
RunResult Run(const peer::PeerTrainerOptions& options, bool arena) {
  Blobs train(kRanks * 40, 7);
  LoopbackRing ring(kRanks);
  ring.FormAll();
  std::vector<std::vector<uint32_t>> shares(kRanks);
  for (uint32_t i = 0; i < train.view.count; ++i) shares[i % kRanks].push_back(i);
  std::vector<Model> models;  // made here: the window counts the ranks' training only
  for (int r = 0; r < kRanks; ++r) models.push_back(Model::Create(kModel, 1).value());
  CountingObserver::Shared shared;
  const std::vector<Status> statuses = ring.Each(ring.All(), [&](uint32_t r) -> Status {
    Model* model = &models[r];
    peer::PeerData data;
    data.set = train.view;
    data.share = shares[r].data();
    data.share_size = shares[r].size();
    CountingObserver observer(shared);
    Status trained;
    if (arena) {
      Result<std::size_t> bytes = peer::PeerTrainer::RequiredBytes(*model, data, ring.groups[r]->context(), options);
      if (!bytes.ok()) return bytes.status();
      std::vector<unsigned char> memory(*bytes + 1);
      // At an odd address: the trainer aligns inside.
      Result<peer::PeerTrainer*> trainer =
          peer::PeerTrainer::CreateIn(memory.data() + 1, *bytes, *model, data, ring.groups[r]->context(), options);
      if (!trainer.ok()) return trainer.status();
      trained = (*trainer)->Run(observer);
      peer::PeerTrainer::Destroy(*trainer);
    } else {
      Result<std::unique_ptr<peer::PeerTrainer>> trainer =
          peer::PeerTrainer::Create(*model, data, ring.groups[r]->context(), options);
      if (!trainer.ok()) return trainer.status();
      trained = (*trainer)->Run(observer);
    }
    return trained;
  });
  RunResult result;
  result.allocations = testing::StopCountingAllocations();
  for (const Status& s : statuses) REQUIRE_MESSAGE(s.ok(), s.ToString());
  result.hash = Hash(models);
  return result;
}

// Allocations of steps 2-7 on every thread (3 ranks and the loopback):
// before the trainer's block 84, 174, 120 and 510; with the block 84, 216
// (IWP's sum on the ring), 108 and 486 (504 on aarch64 and on an AMD EPYC
// x86-64 host), all of them the collectives' (frames built on the heap,
// codecs made per Moniqua theta, vectors of the mixing) and the loopback's
// (each frame's wire copy, parsed body and posted delivery, the inbox's
// deque nodes). Now none: the collectives' state is in the block
// (CollectiveShape, Bind), codecs are built in place, frames go into the
// links' slots, and the loopback keeps its frame storage and delivery
// blocks (transport/loopback.h).
struct Golden {
  const char* name;
  peer::PeerReduce reduce;
  const char* codec;
  uint64_t hash;
};
constexpr Golden kGolden[] = {
    {"dense ring", peer::PeerReduce::kDense, "", 7709527574034432310ull},
    // IWP's per-layer dispersion threshold (the paper's rule) changed its
    // selection; re-recorded from the heap engine before the collectives'
    // state moved into the block.
    {"IWP", peer::PeerReduce::kIwp, "", 10284345766146738954ull},
    {"gossip", peer::PeerReduce::kGossip, "", 5142260540464254107ull},
    {"Moniqua gossip", peer::PeerReduce::kGossip, "moniqua:bits=2", 13929963281616526414ull},
};

TEST_CASE("peer arena: the models after a few steps are the golden ones, in a caller block or on the heap") {
  for (const Golden& g : kGolden) {
    uint64_t heap_hash = 0;
    for (bool arena : {false, true}) {
      INFO(std::string(g.name) << std::string(arena ? " in a caller block" : " on the heap"));
      const RunResult r = Run(Options(g.reduce, g.codec), arena);
      MESSAGE(std::string(g.name) << std::string(arena ? " (block)" : " (heap)") << ": hash " << r.hash
                                  << ", allocations from step " << kCountFrom << ": " << r.allocations);
      // On every target: the block changes no bit.
      if (!arena) heap_hash = r.hash;
      CHECK(r.hash == heap_hash);
#if defined(__x86_64__) && FEDRT_HAVE_OPENBLAS
      // Recorded on x86-64 with OpenBLAS's Haswell SGEMM kernel from the heap
      // engine before the block existed; the built-in GEMM and OpenBLAS's
      // other kernels sum in other orders (other last bits).
      if (testing::GoldenGemmKernel()) CHECK(r.hash == g.hash);
#endif
      CHECK(r.allocations == 0);
    }
  }
}

// The collectives the golden runs do not reach: the codec ring (fp16 on
// every hop), CHOCO replica gossip and per-tensor gossip (dqsg), each bound in
// the block; the same bits as on the heap, and no allocation either.
TEST_CASE("peer arena: the codec ring and replica and per-tensor gossip allocate nothing on the step path") {
  struct Case {
    const char* name;
    peer::PeerReduce reduce;
    const char* codec;
  };
  const Case cases[] = {
      {"fp16 ring", peer::PeerReduce::kCodec, "fp16"},
      {"CHOCO gossip", peer::PeerReduce::kGossip, "choco:gamma=0.5+sign:b=32"},
      {"dqsg gossip", peer::PeerReduce::kGossip, "dqsg:s=2"},
      // The compressed all-gather keeps its state on the heap (not in the
      // block), made at its first step; its steps allocate nothing either.
      {"dqsg all-gather", peer::PeerReduce::kCompressed, "dqsg:s=2"},
      {"topk all-gather", peer::PeerReduce::kCompressed, "topk:k=0.1"},
  };
  for (const Case& c : cases) {
    uint64_t heap_hash = 0;
    for (bool arena : {false, true}) {
      INFO(std::string(c.name) << std::string(arena ? " in a caller block" : " on the heap"));
      const RunResult r = Run(Options(c.reduce, c.codec), arena);
      MESSAGE(std::string(c.name) << std::string(arena ? " (block)" : " (heap)") << ": hash " << r.hash
                                  << ", allocations from step " << kCountFrom << ": " << r.allocations);
      if (!arena) heap_hash = r.hash;
      CHECK(r.hash == heap_hash);
      CHECK(r.allocations == 0);
    }
  }
}

TEST_CASE("peer arena: the trainer's own step allocates nothing (the local baseline: no collective)") {
  for (bool arena : {false, true}) {
    INFO(std::string(arena ? "in a caller block" : "on the heap"));
    peer::PeerTrainerOptions options = Options(peer::PeerReduce::kLocal, "");
    options.dp.noise_multiplier = 0;
    const RunResult r = Run(options, arena);
    CHECK(r.allocations == 0);
  }
}

TEST_CASE("peer arena: the size query covers the block, a smaller block is refused, bad options are named") {
  Blobs train(40, 7);
  LoopbackRing ring(1);
  ring.FormAll();
  std::vector<uint32_t> share;
  for (uint32_t i = 0; i < train.view.count; ++i) share.push_back(i);
  Model model = Model::Create(kModel, 1).value();
  peer::PeerData data;
  data.set = train.view;
  data.share = share.data();
  data.share_size = share.size();
  peer::CollectiveContext& context = ring.groups[0]->context();
  const peer::PeerTrainerOptions dense = Options(peer::PeerReduce::kDense, "");
  Result<std::size_t> bytes = peer::PeerTrainer::RequiredBytes(model, data, context, dense);
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().ToString());
  std::vector<unsigned char> memory(*bytes);
  CHECK(peer::PeerTrainer::CreateIn(memory.data(), *bytes - 1, model, data, context, dense).status().code() ==
        StatusCode::kOutOfRange);
  CHECK(peer::PeerTrainer::CreateIn(nullptr, *bytes, model, data, context, dense).status().code() ==
        StatusCode::kOutOfRange);
  Result<peer::PeerTrainer*> made = peer::PeerTrainer::CreateIn(memory.data(), *bytes, model, data, context, dense);
  REQUIRE_MESSAGE(made.ok(), made.status().ToString());
  CHECK((*made)->steps_per_epoch() == 40 / 8);
  peer::PeerTrainer::Destroy(*made);
  peer::PeerTrainer::Destroy(nullptr);
  // The IWP accumulator (and its velocity) and the repair's vectors are in the block.
  CHECK(*peer::PeerTrainer::RequiredBytes(model, data, context, Options(peer::PeerReduce::kIwp, "")) >
        *bytes + 2 * model.parameter_count() * sizeof(float));
  peer::PeerTrainerOptions repair = dense;
  repair.repair = true;
  CHECK(*peer::PeerTrainer::RequiredBytes(model, data, context, repair) >=
        *bytes + model.parameter_count() * sizeof(float));
  // Bad bounds and options that do not apply: kInvalidArgument, from the query as from CreateIn.
  peer::PeerTrainerOptions no_batch = dense;
  no_batch.batch = 0;
  CHECK(peer::PeerTrainer::RequiredBytes(model, data, context, no_batch).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(peer::PeerTrainer::CreateIn(memory.data(), *bytes, model, data, context, no_batch).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(peer::PeerTrainer::RequiredBytes(model, data, context, Options(peer::PeerReduce::kDense, "fp16"))
            .status()
            .code() == StatusCode::kInvalidArgument);
  peer::PeerTrainerOptions bad_lr = dense;
  bad_lr.sgd.schedule.base_lr = -1;
  CHECK(peer::PeerTrainer::RequiredBytes(model, data, context, bad_lr).status().code() ==
        StatusCode::kInvalidArgument);
  peer::PeerData empty = data;
  empty.share_size = 0;
  CHECK(peer::PeerTrainer::RequiredBytes(model, empty, context, dense).status().code() ==
        StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedrt
