// Aggregator intake benchmark: how many device updates per second the star
// aggregator turns from received wire frames into its round sum, on one core.
// Each update goes through the calls the aggregator makes for it, in its order
// (runtime/src/star/aggregator_engine.cc: OnUpdateFrame, CheckUpdate): the frame is
// copied into aligned storage and checked by the FlatBuffers Verifier
// (ParseFrame), decoded as an Update, its announced size checked against the
// codec, its chunks reassembled, the payload copied out, decoded by the codec,
// checked finite and added, weighted by its samples, to the round's
// UpdateAccumulator; the round ends with the mean.
//
// The N updates are made before timing: Laplace-distributed deltas (scale
// 1e-3, heavy-tailed like SGD deltas), one per device with its own sender id,
// encoded with the codec and cut into frames as a device sends them.
// Interleaved with the full intake, the codec's Decode alone is timed on the
// same payloads, so the share of the codec is a ratio measured under the same
// load. Process CPU time is reported beside wall time: on a shared machine it
// is the steadier figure.
//
// Usage: fedrt_aggregate_bench [updates] [codec] [model] [passes]
//        (defaults: 64 dqsg mlp:784-300-100-10 5)
// Expected output (numbers depend on the machine):
//   model mlp:784-300-100-10 (266610 parameters), codec dqsg:..., 64 updates of 66.0 KB, 1 frame each
//   intake (verify, reassemble, decode, sum):  812 updates/s wall  1.21 ms CPU per update
//   codec decode alone:                       1040 updates/s wall  0.95 ms CPU per update
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/platform/clock.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/device.h"
#include "fedrt/runtime/model.h"
#include "fedrt/transport/chunking.h"
#include "fedrt/transport/frame.h"
#include "fedrt/transport/messages.h"

namespace fedrt {
namespace {

using transport::FrameLimits;

double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Update {
  uint32_t sender_id = 0;
  std::vector<uint8_t> payload;            // as encoded (for decode-only timing)
  std::vector<std::vector<uint8_t>> wire;  // prefix + body of each frame
};

int Fail(const Status& status) {
  std::fprintf(stderr, "fedrt_aggregate_bench: %s\n", status.ToString().c_str());
  return 1;
}

int Main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 64;
  const std::string spec = argc > 2 ? argv[2] : "dqsg";
  const std::string model_spec = argc > 3 ? argv[3] : "mlp:784-300-100-10";
  const int passes = argc > 4 ? std::atoi(argv[4]) : 5;
  if (n < 1 || passes < 1) return Fail(InvalidArgument("updates and passes must be positive"));
  Result<Model> model = Model::Create(model_spec, 1);
  if (!model.ok()) return Fail(model.status());
  const std::size_t d = model->parameter_count();
  Result<std::unique_ptr<Codec>> made = MakeCodec(spec);
  if (!made.ok()) return Fail(made.status());
  Codec& codec = **made;
  if (codec.needs_side_info()) return Fail(InvalidArgument("nested codecs need anchors; bench a plain codec"));
  const std::string canonical = codec.spec();
  const uint64_t max_encoded = codec.MaxEncodedSize(d);
  FrameLimits limits;
  limits.max_payload_bytes = std::max<uint64_t>(uint64_t{1} << 20, uint64_t{d} * 8 + (1u << 16));

  CodecContext context;
  context.session_seed = 1;
  context.round = 0;
  std::vector<Update> updates(static_cast<std::size_t>(n));
  std::vector<float> delta(d);
  std::size_t frames = 0;
  double payload_bytes = 0;
  for (int i = 0; i < n; ++i) {
    std::mt19937 rng(1000 + i);
    std::exponential_distribution<float> magnitude(1000.0f);
    std::bernoulli_distribution sign(0.5);
    for (float& x : delta) x = sign(rng) ? magnitude(rng) : -magnitude(rng);
    Update& u = updates[static_cast<std::size_t>(i)];
    u.sender_id = DeviceSenderId("dev-" + std::to_string(i));
    context.sender_id = u.sender_id;
    u.payload.resize(static_cast<std::size_t>(max_encoded));  // a few MB: fits any size_t
    Result<std::size_t> size = codec.Encode(delta.data(), d, context, u.payload.data(), u.payload.size());
    if (!size.ok()) return Fail(size.status());
    u.payload.resize(*size);
    payload_bytes += static_cast<double>(*size);
    Result<transport::ChunkPlan> plan = transport::ChunkPlan::Make(*size, limits.MaxChunkBytes());
    if (!plan.ok()) return Fail(plan.status());
    for (uint32_t c = 0; c < plan->count(); ++c) {
      transport::UpdateMessage m;
      m.round_id = 0;
      m.num_samples = 7500;
      m.training_loss = 0.5f;
      m.codec_spec = canonical;
      m.stats.encoded_bytes = *size;
      m.stats.raw_bytes = d * sizeof(float);
      m.payload = plan->Chunk(c, u.payload.data());
      Result<transport::OutFrame> frame = transport::Encode(m, limits);
      if (!frame.ok()) return Fail(frame.status());
      std::vector<uint8_t> wire(frame->prefix(), frame->prefix() + transport::kFramePrefixBytes);
      wire.insert(wire.end(), frame->body(), frame->body() + frame->body_size());
      u.wire.push_back(std::move(wire));
      ++frames;
    }
  }
  std::printf("model %s (%zu parameters), codec %s, %d updates of %.1f KB, %.1f frames each\n", model_spec.c_str(), d,
              canonical.c_str(), n, payload_bytes / n / 1e3, static_cast<double>(frames) / n);

  UpdateAccumulator sum(d);
  // One round: every update from its frames into the sum.
  const auto intake = [&]() -> Status {
    sum.Reset();
    for (const Update& u : updates) {
      std::unique_ptr<transport::Reassembler> reassembler;
      float weight = 0;
      for (const std::vector<uint8_t>& wire : u.wire) {
        Result<transport::Frame> frame = transport::ParseFrame(wire.data(), wire.size(), limits);
        if (!frame.ok()) return frame.status();
        Result<transport::UpdateMessage> m = transport::DecodeUpdate(*frame, limits);
        if (!m.ok()) return m.status();
        if (m->payload.index == 0) {
          if (m->codec_spec != canonical) return InvalidArgument("codec spec differs");
          if (m->payload.total_size > max_encoded) return InvalidArgument("update too large");
          reassembler = std::make_unique<transport::Reassembler>(max_encoded);
          weight = static_cast<float>(m->num_samples);
        }
        FEDRT_RETURN_IF_ERROR(reassembler->Add(m->payload));
      }
      if (!reassembler || !reassembler->complete()) return Corrupt("incomplete update");
      std::vector<uint8_t> payload(reassembler->data(), reassembler->data() + reassembler->size());
      CodecContext c = context;
      c.sender_id = u.sender_id;
      std::vector<float> decoded(d, 0.0f);
      FEDRT_RETURN_IF_ERROR(codec.Decode(payload.data(), payload.size(), c, decoded.data(), d));
      FEDRT_RETURN_IF_ERROR(CheckFinite(decoded.data(), d));
      FEDRT_RETURN_IF_ERROR(sum.AddDecoded(decoded.data(), weight));
    }
    const std::vector<float> mean = sum.Mean();
    return mean.size() == d ? Status() : Corrupt("mean has the wrong size");
  };
  std::vector<float> decoded(d);
  const auto decode_only = [&]() -> Status {
    for (const Update& u : updates) {
      CodecContext c = context;
      c.sender_id = u.sender_id;
      FEDRT_RETURN_IF_ERROR(codec.Decode(u.payload.data(), u.payload.size(), c, decoded.data(), d));
    }
    return Status();
  };

  Status warm = intake();
  if (!warm.ok()) return Fail(warm);
  double intake_wall = 0, intake_cpu = 0, decode_wall = 0, decode_cpu = 0;
  for (int p = 0; p < passes; ++p) {  // interleaved: both see the same load
    double cpu = CpuSeconds();
    Stopwatch watch;
    Status s = intake();
    intake_wall += watch.ElapsedSeconds();
    intake_cpu += CpuSeconds() - cpu;
    if (!s.ok()) return Fail(s);
    cpu = CpuSeconds();
    watch.Restart();
    s = decode_only();
    decode_wall += watch.ElapsedSeconds();
    decode_cpu += CpuSeconds() - cpu;
    if (!s.ok()) return Fail(s);
  }
  const double total = static_cast<double>(n) * passes;
  std::printf("intake (verify, reassemble, decode, sum): %8.0f updates/s wall  %.3f ms CPU per update\n",
              total / intake_wall, 1e3 * intake_cpu / total);
  std::printf("codec decode alone:                       %8.0f updates/s wall  %.3f ms CPU per update\n",
              total / decode_wall, 1e3 * decode_cpu / total);
  return 0;
}

}  // namespace
}  // namespace fedrt

int main(int argc, char** argv) { return fedrt::Main(argc, argv); }
