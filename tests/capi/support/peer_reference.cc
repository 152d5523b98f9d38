#include "peer_reference.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "fedrt/runtime/collective_context.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/peer_trainer.h"
#include "fedrt/transport/event_loop.h"

extern "C" size_t capi_reference_peer_ring(const char* spec, uint64_t model_seed, const float* features,
                                           const uint8_t* labels, size_t count, size_t example_size, int classes,
                                           uint32_t peers, int epochs, int batch, double learning_rate, float* out,
                                           size_t capacity) {
  using namespace fedrt;
  transport::EventLoopThread loop;
  peer::LoopbackPeerNetwork network(loop.loop(), peers);
  std::vector<std::vector<float>> parameters(peers);
  std::vector<Status> statuses(peers);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < peers; ++r) {
    threads.emplace_back([&, r] {
      auto context = network.Connect(r);
      if (!context.ok()) {
        statuses[r] = context.status();
        return;
      }
      Status formed = (*context)->Form({});
      if (!formed.ok()) {
        statuses[r] = formed;
        return;
      }
      auto model = Model::Create(spec, model_seed);
      if (!model.ok()) {
        statuses[r] = model.status();
        return;
      }
      std::vector<uint32_t> share;
      for (uint32_t i = r; i < count; i += peers) share.push_back(i);
      peer::PeerData data;
      data.set.count = count;
      data.set.example_size = example_size;
      data.set.num_classes = classes;
      data.set.features = features;
      data.set.labels = labels;
      data.share = share.data();
      data.share_size = share.size();
      peer::PeerTrainerOptions options;
      options.reduce = peer::PeerReduce::kDense;
      options.sgd.schedule.base_lr = learning_rate;
      options.epochs = epochs;
      options.batch = batch;
      auto trainer = peer::PeerTrainer::Create(*model, data, **context, options);
      if (!trainer.ok()) {
        statuses[r] = trainer.status();
        return;
      }
      statuses[r] = (*trainer)->Run([](const peer::PeerProgress&) { return Status::Ok(); });
      (void)(*context)->Close();
      parameters[r].assign(model->parameters(), model->parameters() + model->parameter_count());
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < peers; ++r) {
    if (!statuses[r].ok()) {
      std::fprintf(stderr, "reference rank %u: %s\n", r, statuses[r].ToString().c_str());
      return 0;
    }
  }
  if (parameters[0].size() > capacity) return 0;
  std::memcpy(out, parameters[0].data(), parameters[0].size() * sizeof(float));
  return parameters[0].size();
}
