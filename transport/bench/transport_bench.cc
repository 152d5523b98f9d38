// Transport benchmark (a program, not a test).
//
// 1. Fan-in: 3 devices each send a 16 MiB fp32 update over 127.0.0.1 to one
//    aggregator loop, which verifies every frame (FlatBuffers Verifier + the
//    Update checks + the chunk sequence) and sums the floats in place as they
//    arrive. Timed from the first Send to the moment the sum is complete.
//    Two variants: frames built beforehand (the codec wrote its output in
//    place into the frame, the normal path), and frames built inside the
//    timed region (one copy of each update into its frames).
// 2. Round trip: a 4 KiB Update frame sent and echoed back, one at a time.
//
// 3. Idle connections: N devices connected to one aggregator loop, resident
//    memory per connection.
//
// 4. With --tls on, 1 and 2 run over TLS (a throwaway CA and certificate in
//    a temporary directory); with --tls both, plain and TLS runs alternate
//    (--alternations times each) so their ratio is measured under the same load.
//
// Usage: transport_bench [--runs N] [--frame-mib M] [--round-trips N] [--idle-connections N]
//                        [--tls off|on|both] [--alternations N]
// Expected output: one line per figure with the median and the spread, e.g.
//   fan-in 3 x 16 MiB (frames prebuilt): median 14.2 ms (min 12.9, max 17.5) over 9 runs
//   4 KiB round trip: median 31.0 us (p10 27.5, p90 40.1) over 2000 round trips
//   500 idle connections on one aggregator loop: ... KiB per device
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fedrt/codecs/reduce.h"
#include "fedrt/platform/clock.h"
#include "fedrt/transport/chunking.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/tcp.h"
#include "fedrt/transport/tls.h"

namespace fedrt {
namespace transport {
namespace {

constexpr int kDevices = 3;
constexpr std::size_t kFloats = (16u << 20) / sizeof(float);

// CPU time of the whole process (every thread), in ms: a figure that stays
// meaningful when other work shares the machine.
double ProcessCpuMs() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) * 1e-3; };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

// CPU time of the thread running `loop`, in ms (asked on that thread).
double LoopThreadCpuMs(EventLoop& loop) {
  std::promise<double> result;
  std::future<double> value = result.get_future();
  loop.Post([&result] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    result.set_value(static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6);
  });
  return value.get();
}

[[noreturn]] void Die(const Status& status, const char* what) {
  std::fprintf(stderr, "transport_bench: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

// The aggregator side of the fan-in: sums every device's update in place.
class SumServer : public ConnectionHandler {
 public:
  explicit SumServer(const FrameLimits& limits) : limits_(limits), sum_(kFloats, 0.0f) {}

  void OnFrame(Connection& connection, Frame frame) override {
    Result<UpdateMessage> update = DecodeUpdate(frame, limits_);
    if (!update.ok()) return connection.Abort(update.status(), true);
    ChunkSequence& sequence = sequences_[connection.id() % kSlots];
    Status accepted = sequence.Accept(update->payload);
    if (!accepted.ok()) return connection.Abort(accepted, true);
    if (update->payload.total_size != kFloats * sizeof(float) || update->payload.offset % sizeof(float) != 0 ||
        update->payload.size % sizeof(float) != 0) {
      return connection.Abort(Corrupt("update does not match the model size"), true);
    }
    // Payloads start 16-byte aligned inside verified frames.
    const float* values = static_cast<const float*>(static_cast<const void*>(update->payload.data));
    float* out = sum_.data() + update->payload.offset / sizeof(float);
    AddFloats(values, update->payload.size / sizeof(float), out);  // SIMD, in place
    if (sequence.complete() && ++completed_ == kDevices) {
      done_ns_ = MonotonicNanos();
      done_.set_value();
    }
  }
  void OnClose(Connection&, const Status&) override {}

  // Prepares a run; returns the future completed when all sums are done.
  std::future<void> Arm() {
    std::fill(sum_.begin(), sum_.end(), 0.0f);
    for (ChunkSequence& s : sequences_) s.Reset();
    completed_ = 0;
    done_ = std::promise<void>();
    return done_.get_future();
  }
  uint64_t done_ns() const { return done_ns_; }
  const std::vector<float>& sum() const { return sum_; }

 private:
  static constexpr std::size_t kSlots = 64;
  FrameLimits limits_;
  std::vector<float> sum_;
  std::vector<ChunkSequence> sequences_ = std::vector<ChunkSequence>(kSlots, ChunkSequence(uint64_t{1} << 32));
  int completed_ = 0;
  std::promise<void> done_;
  uint64_t done_ns_ = 0;
};

std::vector<OutFrame> EncodeUpdate(const std::vector<float>& values, const FrameLimits& limits) {
  UpdateMessage m;
  m.round_id = 1;
  m.num_samples = 100;
  m.training_loss = 0.5f;
  m.codec_spec = "fp32";
  Result<std::vector<OutFrame>> frames = EncodeChunked(m, reinterpret_cast<const uint8_t*>(values.data()),
                                                       values.size() * sizeof(float), limits);
  if (!frames.ok()) Die(frames.status(), "encode");
  return std::move(*frames);
}

// TLS contexts for the runs that use TLS (null: plain TCP).
struct Tls {
  std::shared_ptr<const TlsContext> server, client;
  const char* label() const { return server ? "tls" : "plain"; }
};

Tls MakeTls() {
  char dir[] = "/tmp/fedrt-bench-tls-XXXXXX";
  if (::mkdtemp(dir) == nullptr) Die(IoError("mkdtemp failed"), "tls");
  Result<TlsTestFiles> files = WriteTlsTestFiles(dir, {"127.0.0.1"});
  if (!files.ok()) Die(files.status(), "tls credentials");
  TlsConfig server_config;
  server_config.cert_file = files->server_cert;
  server_config.key_file = files->server_key;
  TlsConfig client_config;
  client_config.ca_file = files->ca_cert;
  Tls tls;
  Result<std::shared_ptr<const TlsContext>> server = TlsContext::Create(server_config);
  Result<std::shared_ptr<const TlsContext>> client = TlsContext::Create(client_config);
  if (!server.ok()) Die(server.status(), "tls server");
  if (!client.ok()) Die(client.status(), "tls client");
  tls.server = *server;
  tls.client = *client;
  for (const std::string& f : {files->ca_cert, files->server_cert, files->server_key, files->client_cert,
                               files->client_key}) {
    std::remove(f.c_str());
  }
  ::rmdir(dir);
  return tls;
}

ConnectionOptions QuietOptions(const FrameLimits& limits = FrameLimits(),
                               std::shared_ptr<const TlsContext> tls = nullptr) {
  ConnectionOptions options;
  options.limits = limits;
  options.heartbeat_interval_ms = 0;
  options.tls = std::move(tls);
  return options;
}

std::shared_ptr<TcpListener> ListenOrDie(EventLoop& loop, const ConnectionOptions& options,
                                         std::shared_ptr<ConnectionHandler> handler) {
  Result<std::shared_ptr<TcpListener>> listener = TcpListener::Listen(loop, "127.0.0.1", 0, options, std::move(handler));
  if (!listener.ok()) Die(listener.status(), "listen");
  return *listener;
}

std::shared_ptr<Connection> ConnectOrDie(EventLoop& loop, uint16_t port, const ConnectionOptions& options,
                                         std::shared_ptr<ConnectionHandler> handler) {
  Result<std::shared_ptr<Connection>> c = TcpConnectAndWait(loop, "127.0.0.1", port, options, std::move(handler), 5000);
  if (!c.ok()) Die(c.status(), "connect");
  return *c;
}

struct Spread {
  double median, low, high;
};

Spread Summarize(std::vector<double> v, double low_q, double high_q) {
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) { return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)]; };
  return {at(0.5), at(low_q), at(high_q)};
}

void FanIn(int runs, const FrameLimits& limits, const Tls& tls) {
  const ConnectionOptions options = QuietOptions(limits, tls.server);
  const ConnectionOptions device_options = QuietOptions(limits, tls.client);
  EventLoopThread server_loop;
  EventLoopThread client_loop;
  auto server = std::make_shared<SumServer>(limits);
  std::shared_ptr<TcpListener> listener = ListenOrDie(server_loop.loop(), options, server);
  std::vector<std::shared_ptr<Connection>> devices;
  std::vector<std::vector<float>> updates(kDevices, std::vector<float>(kFloats));
  for (int d = 0; d < kDevices; ++d) {
    for (std::size_t i = 0; i < kFloats; ++i) updates[d][i] = static_cast<float>((i % 1000) * (d + 1)) * 0.001f;
    devices.push_back(
        ConnectOrDie(client_loop.loop(), listener->port(), device_options, std::make_shared<FrameQueue>()));
  }
  for (int prebuilt = 1; prebuilt >= 0; --prebuilt) {
    std::vector<double> ms;
    std::vector<double> cpu_ms;
    std::vector<double> server_cpu_ms;
    std::vector<double> client_cpu_ms;
    for (int run = 0; run < runs + 1; ++run) {  // run 0 warms up
      std::vector<std::vector<OutFrame>> frames(kDevices);
      if (prebuilt) {
        for (int d = 0; d < kDevices; ++d) frames[d] = EncodeUpdate(updates[d], limits);
      }
      std::future<void> done = server->Arm();
      const double server_cpu_start = LoopThreadCpuMs(server_loop.loop());
      const double client_cpu_start = LoopThreadCpuMs(client_loop.loop());
      const double cpu_start = ProcessCpuMs();
      const uint64_t start = MonotonicNanos();
      if (!prebuilt) {
        for (int d = 0; d < kDevices; ++d) frames[d] = EncodeUpdate(updates[d], limits);
      }
      // Interleave the devices' chunks, as concurrent devices would arrive.
      for (std::size_t i = 0; i < frames[0].size(); ++i) {
        for (int d = 0; d < kDevices; ++d) {
          Status sent = devices[d]->Send(frames[d][i]);
          if (!sent.ok()) Die(sent, "send");
        }
      }
      if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
        Die(Status(StatusCode::kDeadlineExceeded, "sum not complete after 10 s"), "fan-in");
      }
      if (run > 0) {
        ms.push_back(static_cast<double>(server->done_ns() - start) * 1e-6);
        cpu_ms.push_back(ProcessCpuMs() - cpu_start);
        server_cpu_ms.push_back(LoopThreadCpuMs(server_loop.loop()) - server_cpu_start);
        client_cpu_ms.push_back(LoopThreadCpuMs(client_loop.loop()) - client_cpu_start);
      }
    }
    // The sum is exact to float rounding: every element is the same 3-term sum.
    const std::vector<float>& sum = server->sum();
    for (std::size_t i = 0; i < kFloats; i += 4099) {
      const float expected = updates[0][i] + updates[1][i] + updates[2][i];
      if (std::abs(sum[i] - expected) > 1e-5f * (1.0f + std::abs(expected))) {
        Die(Internal("sum mismatch at " + std::to_string(i)), "fan-in");
      }
    }
    const Spread s = Summarize(ms, 0.0, 1.0);
    const Spread cpu = Summarize(cpu_ms, 0.0, 1.0);
    const Spread server_cpu = Summarize(server_cpu_ms, 0.0, 1.0);
    const Spread client_cpu = Summarize(client_cpu_ms, 0.0, 1.0);
    std::printf("[%s] fan-in 3 x 16 MiB (%s): median %.1f ms (min %.1f, max %.1f) over %d runs; "
                "CPU time medians: process %.1f ms, aggregator thread %.1f ms, device sockets thread %.1f ms\n",
                tls.label(), prebuilt ? "frames prebuilt" : "frames built in the timed region", s.median, s.low,
                s.high, runs, cpu.median, server_cpu.median, client_cpu.median);
    std::fflush(stdout);
  }
  for (auto& d : devices) d->Close();
  listener->Close();
}

// Client side of the ping-pong: sends the next frame from the loop thread as
// soon as the echo arrives.
class PingClient : public ConnectionHandler {
 public:
  PingClient(OutFrame ping, int count) : ping_(std::move(ping)), count_(count) { rtt_us_.reserve(count); }
  void OnOpen(const std::shared_ptr<Connection>& connection) override { connection_ = connection; }
  void OnFrame(Connection& connection, Frame) override {
    rtt_us_.push_back(static_cast<double>(MonotonicNanos() - sent_ns_) * 1e-3);
    if (static_cast<int>(rtt_us_.size()) == count_) return done_.set_value();
    sent_ns_ = MonotonicNanos();
    (void)connection.Send(ping_);
  }
  void OnClose(Connection&, const Status&) override { connection_.reset(); }
  void Start() {
    sent_ns_ = MonotonicNanos();
    (void)connection_->Send(ping_);
  }
  std::future<void> done() { return done_.get_future(); }
  const std::vector<double>& rtt_us() const { return rtt_us_; }

 private:
  OutFrame ping_;
  int count_;
  std::shared_ptr<Connection> connection_;
  uint64_t sent_ns_ = 0;
  std::vector<double> rtt_us_;
  std::promise<void> done_;
};

class EchoServer : public ConnectionHandler {
 public:
  void OnFrame(Connection& connection, Frame frame) override {
    Result<UpdateMessage> update = DecodeUpdate(frame, FrameLimits());
    if (!update.ok()) return connection.Abort(update.status(), true);
    Result<OutFrame> echo = Encode(*update, FrameLimits());
    if (echo.ok()) (void)connection.Send(*echo);
  }
  void OnClose(Connection&, const Status&) override {}
};

void RoundTrip(int count, const Tls& tls) {
  const ConnectionOptions options = QuietOptions(FrameLimits(), tls.server);
  const ConnectionOptions client_options = QuietOptions(FrameLimits(), tls.client);
  EventLoopThread server_loop;
  EventLoopThread client_loop;
  std::shared_ptr<TcpListener> listener = ListenOrDie(server_loop.loop(), options, std::make_shared<EchoServer>());
  std::vector<uint8_t> payload(4096, 7);
  UpdateMessage m;
  m.codec_spec = "fp32";
  m.payload = {0, 1, payload.size(), 0, payload.data(), payload.size()};
  Result<OutFrame> ping = Encode(m, FrameLimits());
  if (!ping.ok()) Die(ping.status(), "encode");
  auto client = std::make_shared<PingClient>(*ping, count + 200);
  std::shared_ptr<Connection> c = ConnectOrDie(client_loop.loop(), listener->port(), client_options, client);
  std::future<void> done = client->done();
  client_loop.loop().Post([client] { client->Start(); });
  if (done.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    Die(Status(StatusCode::kDeadlineExceeded, "round trips not complete after 30 s"), "round trip");
  }
  std::vector<double> rtt(client->rtt_us().begin() + 200, client->rtt_us().end());  // skip warm-up
  const Spread s = Summarize(rtt, 0.1, 0.9);
  std::printf("[%s] 4 KiB round trip (frame of %u bytes each way): median %.1f us (p10 %.1f, p90 %.1f) over %d "
              "round trips\n",
              tls.label(), ping->body_size(), s.median, s.low, s.high, count);
  std::fflush(stdout);
  c->Close();
  listener->Close();
}

// Resident memory of the process in KiB (Linux /proc).
long ResidentKib() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long pages_total = 0, pages_resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  return n == 2 ? pages_resident * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

// Many idle devices on one aggregator loop: memory per connection (both ends
// live in this process, so the figure covers a device socket and an
// aggregator socket with their buffers, timers and handlers).
void IdleConnections(int count) {
  const ConnectionOptions options = QuietOptions();
  EventLoopThread server_loop;
  EventLoopThread client_loop;
  std::shared_ptr<TcpListener> listener = ListenOrDie(server_loop.loop(), options, std::make_shared<EchoServer>());
  const long before = ResidentKib();
  std::vector<std::shared_ptr<Connection>> devices;
  for (int i = 0; i < count; ++i) {
    devices.push_back(ConnectOrDie(client_loop.loop(), listener->port(), options, std::make_shared<FrameQueue>()));
  }
  for (int waited = 0; listener->stats().accepted < static_cast<uint64_t>(count) && waited < 5000; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const long after = ResidentKib();
  std::printf("%d idle connections on one aggregator loop: %llu accepted, resident memory +%ld KiB "
              "(%.1f KiB per device, both ends counted)\n",
              count, static_cast<unsigned long long>(listener->stats().accepted), after - before,
              static_cast<double>(after - before) / count);
  for (auto& d : devices) d->Close();
  listener->Close();
}

}  // namespace
}  // namespace transport
}  // namespace fedrt

int main(int argc, char** argv) {
  int runs = 9;
  int round_trips = 2000;
  int idle = 500;
  uint32_t frame_mib = 4;
  std::string tls_mode = "off";
  int alternations = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--tls" && (std::string(argv[i + 1]) == "off" || std::string(argv[i + 1]) == "on" ||
                            std::string(argv[i + 1]) == "both")) {
      tls_mode = argv[i + 1];
    } else if (flag == "--alternations") alternations = std::max(1, value);
    else if (flag == "--runs") runs = std::max(1, value);
    else if (flag == "--round-trips") round_trips = std::max(10, value);
    else if (flag == "--idle-connections") idle = std::max(0, value);
    else if (flag == "--frame-mib") frame_mib = static_cast<uint32_t>(std::clamp(value, 1, 1024));
    else {
      std::fprintf(stderr,
                   "usage: transport_bench [--runs N] [--frame-mib M] [--round-trips N] [--idle-connections N] "
                   "[--tls off|on|both] [--alternations N]\n");
      return 2;
    }
  }
  fedrt::transport::FrameLimits limits;
  limits.max_frame_bytes = frame_mib << 20;
  std::printf("frame limit %u MiB (chunks of %u bytes)\n", frame_mib, limits.MaxChunkBytes());
  std::vector<fedrt::transport::Tls> modes;
  if (tls_mode != "on") modes.push_back(fedrt::transport::Tls());
  if (tls_mode != "off") modes.push_back(fedrt::transport::MakeTls());
  for (int a = 0; a < alternations; ++a) {
    for (const fedrt::transport::Tls& tls : modes) fedrt::transport::FanIn(runs, limits, tls);
    for (const fedrt::transport::Tls& tls : modes) fedrt::transport::RoundTrip(round_trips, tls);
  }
  if (idle > 0) fedrt::transport::IdleConnections(idle);
  return 0;
}
