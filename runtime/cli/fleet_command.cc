// `fedrt bench fleet`: N lightweight devices in one event-driven process
// against one aggregator, to measure what one `fedrt serve` carries: joined
// devices, its resident memory per connected device, updates per second,
// decode+sum throughput and round times.
//
// The devices are real on the wire and in the protocol: each one is a TCP
// connection of the transport library (one EventLoop, this thread), joins
// through transport::JoinClient (HMAC with its key), receives each round's
// instructions in chunks (checked with ChunkSequence; the model bytes are
// dropped) and answers with an Update cut by EncodeChunked, its payload the
// instructed codec's (over the model's tensor table, MakeUpdateCodec) with
// the instructed seed, round and the device's sender id, as a DeviceClient
// sends it. What a device does not do is train: the updates are real
// LeNet-300-100 deltas computed once at start (a few SGD steps on shards of
// Fashion-MNIST, kDeltas of them) and re-encoded per round and sender.
// A device therefore costs the bench one connection and a few hundred bytes,
// so one process holds thousands.
//
// Without --server the bench starts `fedrt serve` itself (generated keys,
// 127.0.0.1, any free port, no evaluation, --metrics to a file it reads)
// and reads the server's /proc/PID/status (VmRSS) and /proc/PID/stat (CPU
// time). With --server it needs the key file, --server-pid (local servers,
// one pid per address) for the memory and CPU figures and --server-metrics
// (the file of rank 0's or the server's --metrics) for the server's own
// round times and counts. The devices spread over the listed addresses
// round-robin; an aggregator tier's rank that does not serve a device
// redirects it (a Leave naming the rank that does), and the device joins
// there, as `fedrt device --server A,B,...` does.
//
// Figures (--json prints them as one object):
//   rss_bytes_per_device: the server's VmRSS after N - 1 devices joined and
//     idle, less its VmRSS before the first connected, over N - 1 (the last
//     device joins after the reading: with --min-devices N it starts round 1);
//     with several servers (an aggregator tier's ranks) their sums.
//   updates_per_second: accepted updates over the rounds' total time.
//   decode_sum_bytes_per_second: fp32-equivalent bytes (d * 4 per accepted
//     update) over the CPU seconds the server spent from the first round's
//     instructions to the last round's close: everything it did in the rounds
//     (receiving, verifying, decoding, summing, sending the next model),
//     so a lower bound on the decode+sum throughput of one aggregator core;
//     with several servers, over the sum of their CPU seconds. Read at the
//     edges of the bench's 5 ms slices: the whole first slice that saw round
//     1's instructions, and up to the end of the one that saw the end.
//   kernel_socket_bytes_per_device: with the server the bench started, half
//     the growth of the kernel's slab caches and TCP buffer pages
//     (/proc/slabinfo, /proc/net/sockstat; machine-wide, so other work
//     shows) over the same readings as rss_bytes_per_device, per device:
//     the server's end of each connection (the device's end is a socket of
//     the same kinds on this host). Null without read access to slabinfo.
//   server_finish_cpu_seconds: the server's CPU from there until every
//     device was told to leave (a Leave to and the close of every
//     connection), not in the figure above.
//   round_seconds_p50 / p99: the server's own round times (its metrics
//     file, or --server-metrics) or, with --server alone, the time between
//     the first instructions of one round and of the next as the devices see
//     them.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/key_files.h"
#include "cli/sim_report.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/tensor_set.h"
#include "fedrt/runtime/aggregation.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/device_client.h"
#include "fedrt/runtime/model.h"
#include "fedrt/runtime/optimizer.h"
#include "fedrt/runtime/trainer.h"
#include "fedrt/transport/chunking.h"
#include "fedrt/transport/event_loop.h"
#include "fedrt/transport/join.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/tcp.h"

namespace fedrt::cli {
namespace {

using transport::Connection;
using transport::Frame;
using transport::MessageKind;
using transport::OutFrame;

constexpr std::size_t kDeltas = 8;  // distinct real deltas; device i sends delta i % kDeltas
// A tier redirects a device once (to its shard); more is a loop.
constexpr int kMaxRedirects = 2;

struct FleetFlags {
  int devices = 100;
  uint32_t rounds = 3;
  std::string codec = "fp32";
  std::string server;  // HOST:PORT,...; empty: start fedrt serve
  std::string key_file;
  std::vector<int> server_pids;  // with --server: one per address, in order
  std::string server_metrics;    // with --server: the server's (rank 0's) --metrics file
  std::string model = "mlp:784-300-100-10";
  std::string data = "/usr/share/datasets/fashion-mnist";
  double fraction = 1.0;
  std::string downlink_codec;  // the started server's --downlink-codec
  int join_concurrency = 48;
  uint32_t timeout_s = 600;
  std::string prefix = "dev-";
  bool json = false;
};

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A /proc file's first `size` - 1 bytes as text ("" when unreadable).
std::string ReadProcFile(const std::string& path, std::size_t size = 4096) {
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return "";
  std::string text(size, '\0');
  const std::size_t n = std::fread(text.data(), 1, size - 1, file);
  std::fclose(file);
  text.resize(n);
  return text;
}

// "VmRSS:" of /proc/PID/status in bytes; 0 when unreadable.
uint64_t ReadRssBytes(int pid) {
  const std::string text = ReadProcFile("/proc/" + std::to_string(pid) + "/status");
  const std::size_t at = text.find("VmRSS:");
  return at == std::string::npos ? 0 : std::strtoull(text.c_str() + at + 6, nullptr, 10) * 1024;
}

// utime + stime of /proc/PID/stat in seconds; -1 when unreadable.
double ReadCpuSeconds(int pid) {
  const std::string text = ReadProcFile("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return -1;
  // Fields after the name, from field 3 (state); utime and stime are 14 and 15.
  const char* p = text.c_str() + close + 1;
  unsigned long long utime = 0, stime = 0;
  for (int field = 3; field <= 15 && *p != '\0'; ++field) {
    while (*p == ' ') ++p;
    const unsigned long long value = std::strtoull(p, nullptr, 10);
    if (field == 14) utime = value;
    if (field == 15) stime = value;
    while (*p != ' ' && *p != '\0') ++p;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The kernel's memory that sockets take, machine-wide: every slab cache's
// active objects times their size (/proc/slabinfo: the socket, its inode,
// file, dentry, epoll item, ...) plus the TCP buffer pages of
// /proc/net/sockstat ("TCP: ... mem N"). -1 when unreadable (slabinfo is
// root's).
double ReadKernelSocketBytes() {
  std::ifstream slabs("/proc/slabinfo");
  if (!slabs) return -1;
  std::string line;
  double bytes = 0;
  bool any = false;
  while (std::getline(slabs, line)) {
    if (line.empty() || line[0] == '#' || line.compare(0, 8, "slabinfo") == 0) continue;
    std::istringstream fields(line);
    std::string name;
    double active = 0, total = 0, size = 0;
    if (fields >> name >> active >> total >> size) {
      bytes += active * size;
      any = true;
    }
  }
  const std::string sockstat = ReadProcFile("/proc/net/sockstat");
  const std::size_t tcp = sockstat.find("TCP:");
  const std::size_t mem = tcp == std::string::npos ? std::string::npos : sockstat.find(" mem ", tcp);
  if (!any || mem == std::string::npos) return -1;
  return bytes + static_cast<double>(std::strtoull(sockstat.c_str() + mem + 5, nullptr, 10)) *
                     static_cast<double>(::sysconf(_SC_PAGESIZE));
}

// Real LeNet-300-100 deltas: kDeltas shards of the training set, a few SGD
// steps from the same initial model each.
Result<std::vector<std::vector<float>>> MakeDeltas(const FleetFlags& flags, std::vector<std::size_t>* tensors) {
  Result<TrainTestData> data = LoadDataSet(flags.data);
  if (!data.ok()) return data.status();
  NormalizeWithTrainingSet(*data);
  Result<Model> model = Model::Create(flags.model, 1);
  if (!model.ok()) return model.status();
  FEDRT_RETURN_IF_ERROR(CheckClassCount(*model, data->train.num_classes, "the data set"));
  *tensors = ModelTensorSizes(*model);
  const std::size_t d = model->parameter_count();
  const std::vector<float> initial(model->parameters(), model->parameters() + d);
  SgdOptions sgd_options;
  sgd_options.schedule.base_lr = 0.05;
  const std::size_t shard = std::max<std::size_t>(1, data->train.count / kDeltas);
  std::vector<std::vector<float>> deltas;
  for (std::size_t k = 0; k < kDeltas; ++k) {
    std::copy(initial.begin(), initial.end(), model->parameters());
    Result<Sgd> sgd = Sgd::Create(sgd_options, d);
    if (!sgd.ok()) return sgd.status();
    std::vector<uint32_t> subset;
    for (std::size_t i = k * shard; i < std::min(data->train.count, (k + 1) * shard); ++i) {
      subset.push_back(static_cast<uint32_t>(i));
    }
    TrainOptions options;
    options.batch = 32;
    options.seed = k + 1;
    options.subset = &subset;
    options.max_steps = 20;
    Result<EpochStats> trained = TrainEpoch(*model, *sgd, data->train, 0, options);
    if (!trained.ok()) return trained.status();
    std::vector<float> delta(d);
    for (std::size_t i = 0; i < d; ++i) delta[i] = model->parameters()[i] - initial[i];
    deltas.push_back(std::move(delta));
  }
  return deltas;
}

// What all the devices share: the deltas, the codecs by spec, one payload
// buffer (one thread encodes at a time) and the counters.
struct Fleet {
  std::vector<std::vector<float>> deltas;
  std::vector<std::size_t> tensors;
  std::map<std::string, std::unique_ptr<TensorSetCodec>, std::less<>> codecs;
  std::vector<uint8_t> payload;
  transport::Crypto* crypto = nullptr;
  uint64_t samples_per_device = 1;

  std::size_t connecting = 0;  // connects and joins in flight
  std::size_t joined = 0;
  std::size_t failed = 0;      // connections that failed or were closed with an error
  std::size_t finished = 0;    // devices that were told to leave
  std::size_t redirected = 0;  // joins an aggregator tier sent to another rank
  std::size_t deferred = 0;    // updates the aggregator asked for again (no room yet)
  std::vector<std::pair<std::size_t, std::string>> redirects;  // (device, HOST:PORT) to dial
  uint64_t updates_sent = 0;
  std::map<uint64_t, uint64_t> updates_by_round;
  uint64_t update_bytes = 0;
  double encode_seconds = 0;
  std::string first_error;
  std::map<uint64_t, double> round_first_seen;  // round -> first instructions at any device
  double end_seen = 0;                          // first Leave

  Result<TensorSetCodec*> CodecFor(std::string_view spec) {
    auto it = codecs.find(spec);
    if (it != codecs.end()) return it->second.get();
    Result<std::unique_ptr<Codec>> codec = MakeCodec(std::string(spec));
    if (!codec.ok()) return codec.status();
    Result<std::unique_ptr<TensorSetCodec>> update = MakeUpdateCodec(std::move(*codec), tensors);
    if (!update.ok()) return update.status();
    TensorSetCodec* raw = update->get();
    codecs.emplace(std::string(spec), std::move(*update));
    return raw;
  }
  void Fail(const Status& status) {
    ++failed;
    if (first_error.empty()) first_error = status.ToString();
  }
};

// One device: its join, then per round the instructions' chunks and the update.
class FleetDevice final : public transport::ConnectionHandler {
 public:
  FleetDevice(Fleet& fleet, std::size_t index, std::string id, transport::Key key)
      : fleet_(fleet), index_(index), id_(std::move(id)), key_(std::move(key)),
        sender_id_(DeviceSenderId(id_)), model_chunks_(0) {}

  Status Start(Connection& link) {
    join_ = std::make_unique<transport::JoinClient>(id_, key_, *fleet_.crypto, limits_);
    transport::JoinRequest request;
    request.codecs = {"fp32", "dqsg", "ndqsg", "qsgd", "fp16", "bf16", "topk", "randk", "terngrad", "sign"};
    request.isa = "fleet";
    Result<OutFrame> frame = join_->Start(request);
    if (!frame.ok()) return frame.status();
    return link.Send(std::move(*frame));
  }

  void OnFrame(Connection& link, Frame frame) override {
    if (finished_) return;  // told to leave, or closed by the bench
    const Status handled = Handle(link, frame);
    if (!handled.ok() && !link.closed()) {
      fleet_.Fail(handled);
      link.Abort(handled, /*notify_peer=*/true);
    }
  }
  void OnClose(Connection& link, const Status& reason) override {
    if (link_ && &link != link_.get()) return;  // the link a redirect left
    if (redirecting_) {
      link_.reset();
      return;
    }
    if (!joined_) --fleet_.connecting;
    if (!finished_ && !failed_) {
      failed_ = true;
      fleet_.Fail(reason.ok() ? Status(StatusCode::kUnavailable, "closed by the aggregator") : reason);
    }
    link_.reset();
  }
  // The device's connection (a new one after a redirect: the old one's close
  // is no longer the device's).
  void set_link(std::shared_ptr<Connection> link) {
    link_ = std::move(link);
    redirecting_ = false;
  }
  void Abandon(const Status& reason) {
    failed_ = true;
    --fleet_.connecting;
    fleet_.Fail(reason);
  }
  // The bench is done with the device (its closing is no failure).
  void Close() {
    finished_ = true;
    if (link_ && !link_->closed()) link_->Close();
  }

 private:
  Status Handle(Connection& link, const Frame& frame) {
    if (!joined_) {
      Result<OutFrame> reply = join_->OnFrame(frame);
      if (!reply.ok()) return reply.status();
      if (!reply->empty()) return link.Send(std::move(*reply));
      joined_ = true;
      limits_.max_frame_bytes = join_->result().max_frame_bytes;
      join_.reset();  // a device that joined keeps none of the join's state
      --fleet_.connecting;
      ++fleet_.joined;
      return Status::Ok();
    }
    switch (frame.kind()) {
      case MessageKind::kRoundInstructions:
        return OnInstructions(link, frame);
      case MessageKind::kLeave: {
        Result<transport::LeaveMessage> leave = transport::DecodeLeave(frame);
        const std::string_view reason = leave.ok() ? leave->reason : std::string_view();
        const std::string_view prefix(transport::kRedirectPrefix);
        if (reason.substr(0, prefix.size()) == prefix) {
          // An aggregator tier's rank that does not serve this device: the
          // bench dials the one it names.
          const std::string to(reason.substr(prefix.size()));
          if (++redirects_ > kMaxRedirects) {
            return Status(StatusCode::kFailedPrecondition,
                          id_ + " redirected " + std::to_string(redirects_) + " times (the last to " + to + ")");
          }
          redirecting_ = true;
          joined_ = false;
          --fleet_.joined;
          ++fleet_.redirected;
          fleet_.redirects.emplace_back(index_, to);
          link.Close();
          return Status::Ok();
        }
        finished_ = true;
        ++fleet_.finished;
        if (fleet_.end_seen == 0) fleet_.end_seen = NowSeconds();
        link.Close();
        return Status::Ok();
      }
      case MessageKind::kError: {
        Result<transport::ErrorMessage> error = transport::DecodeError(frame);
        if (!error.ok()) return error.status();
        const Status reported = transport::ToStatus(*error);
        // An update the aggregator had no room for yet (max waiting
        // updates): it sends the instructions again when it has, and the
        // device answers them again, as a DeviceClient does.
        if (reported.code() == StatusCode::kUnavailable) {
          ++fleet_.deferred;
          return Status::Ok();
        }
        return reported;
      }
      default:
        return Status::Ok();
    }
  }

  Status OnInstructions(Connection& link, const Frame& frame) {
    Result<transport::RoundInstructionsMessage> m = transport::DecodeRoundInstructions(frame, limits_);
    if (!m.ok()) return m.status();
    if (m->payload.index == 0) {
      fleet_.round_first_seen.emplace(m->round_id, NowSeconds());
      if (m->model_parameters != fleet_.deltas[0].size()) {
        return Status(StatusCode::kFailedPrecondition,
                      "the aggregator's model has " + std::to_string(m->model_parameters) + " parameters, the fleet's " +
                          std::to_string(fleet_.deltas[0].size()) + " (--model)");
      }
      if (m->level_table_size > 0) {
        return Status(StatusCode::kUnsupported, "level-table codecs (alq, amq) are not simulated by the fleet");
      }
      model_chunks_ = transport::ChunkSequence(limits_.max_frame_bytes * uint64_t{1024});
      round_ = m->round_id;
      seed_ = m->session_seed;
      spec_.assign(m->codec_spec.data(), m->codec_spec.size());
    } else if (!model_chunks_.started() || m->round_id != round_) {
      return Status(StatusCode::kCorrupt, "a model chunk without its first chunk");
    }
    FEDRT_RETURN_IF_ERROR(model_chunks_.Accept(m->payload));
    if (!model_chunks_.complete()) return Status::Ok();
    model_chunks_.Reset();
    transport::AckMessage ack;
    ack.round_id = round_;
    ack.acked = MessageKind::kRoundInstructions;
    Result<OutFrame> ack_frame = transport::Encode(ack, limits_);
    if (!ack_frame.ok()) return ack_frame.status();
    FEDRT_RETURN_IF_ERROR(link.Send(std::move(*ack_frame)));
    return SendUpdate(link);
  }

  // The device's delta in the instructed codec, with the context a
  // DeviceClient encodes with, cut into frames by the library's chunking.
  Status SendUpdate(Connection& link) {
    Result<TensorSetCodec*> codec = fleet_.CodecFor(spec_);
    if (!codec.ok()) return codec.status();
    const std::vector<float>& delta = fleet_.deltas[index_ % fleet_.deltas.size()];
    const std::size_t d = delta.size();
    const std::size_t capacity = (*codec)->MaxEncodedSize(d);
    if (fleet_.payload.size() < capacity) fleet_.payload.resize(capacity);
    CodecContext context;
    context.session_seed = seed_;
    context.round = static_cast<uint32_t>(round_);
    context.sender_id = sender_id_;
    const double start = NowSeconds();
    Result<std::size_t> size = (*codec)->Encode(delta.data(), d, context, fleet_.payload.data(), capacity);
    fleet_.encode_seconds += NowSeconds() - start;
    if (!size.ok()) return size.status();
    transport::UpdateMessage update;
    update.round_id = round_;
    update.num_samples = fleet_.samples_per_device;
    update.training_loss = 0.5f;
    update.codec_spec = spec_;
    update.stats.encoded_bytes = *size;
    update.stats.raw_bytes = d * sizeof(float);
    Result<std::vector<OutFrame>> frames = transport::EncodeChunked(update, fleet_.payload.data(), *size, limits_);
    if (!frames.ok()) return frames.status();
    for (OutFrame& frame : *frames) FEDRT_RETURN_IF_ERROR(link.Send(std::move(frame)));
    ++fleet_.updates_sent;
    ++fleet_.updates_by_round[round_];
    fleet_.update_bytes += *size;
    return Status::Ok();
  }

  Fleet& fleet_;
  const std::size_t index_;
  const std::string id_;
  const transport::Key key_;
  const uint32_t sender_id_;
  transport::FrameLimits limits_;
  std::unique_ptr<transport::JoinClient> join_;
  std::shared_ptr<Connection> link_;
  transport::ChunkSequence model_chunks_;
  bool joined_ = false;
  bool finished_ = false;
  bool failed_ = false;
  bool redirecting_ = false;  // told to join another rank; this link is closing
  int redirects_ = 0;
  uint64_t round_ = 0;
  uint64_t seed_ = 0;
  std::string spec_;
};

// The `fedrt serve` the bench starts: its pid, port and files.
struct OwnServer {
  pid_t pid = -1;
  uint16_t port = 0;
  std::string dir, keys, metrics, log;
};

Result<OwnServer> StartServer(const FleetFlags& flags) {
  OwnServer server;
  char dir_template[] = "/tmp/fedrt-fleet-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) return Status(StatusCode::kInternal, "cannot make a temporary directory");
  server.dir = dir_template;
  std::vector<std::string> ids;
  for (int i = 0; i < flags.devices; ++i) ids.push_back(flags.prefix + std::to_string(i));
  FEDRT_RETURN_IF_ERROR(WriteDeviceKeys(server.dir, ids, /*overwrite=*/true));
  server.keys = server.dir + "/keys.txt";
  server.metrics = server.dir + "/rounds.jsonl";
  server.log = server.dir + "/serve.log";
  char fraction[32];
  std::snprintf(fraction, sizeof fraction, "%.17g", flags.fraction);
  std::vector<std::string> args = {"fedrt", "serve", "--key-file", server.keys, "--host", "127.0.0.1", "--port", "0",
                                   "--codec", flags.codec, "--model", flags.model, "--rounds",
                                   std::to_string(flags.rounds), "--min-devices", std::to_string(flags.devices),
                                   "--fraction", fraction, "--data", "", "--metrics", server.metrics,
                                   "--deadline-ms", std::to_string(flags.timeout_s * 1000), "--log-level", "warn"};
  if (!flags.downlink_codec.empty()) {
    args.insert(args.end(), {"--downlink-codec", flags.downlink_codec});
  }
  server.pid = SpawnLogged(args, server.log);
  if (server.pid < 0) return Status(StatusCode::kInternal, "cannot start fedrt serve");
  const double deadline = NowSeconds() + 30;
  while (NowSeconds() < deadline) {
    const std::string log = ReadProcFile(server.log, 1 << 16);
    const std::size_t at = log.find("listening on port ");
    if (at != std::string::npos && log.find('\n', at) != std::string::npos) {
      server.port = static_cast<uint16_t>(std::atoi(log.c_str() + at + 18));
      return server;
    }
    int status = 0;
    if (::waitpid(server.pid, &status, WNOHANG) == server.pid) {
      server.pid = -1;
      return Status(StatusCode::kInternal, "fedrt serve " + DescribeExit(status) + " (log: " + server.log + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(server.pid, SIGKILL);
  ::waitpid(server.pid, nullptr, 0);
  return Status(StatusCode::kDeadlineExceeded, "fedrt serve did not listen within 30 s (log: " + server.log + ")");
}

bool ParseServerList(const std::string& text, std::vector<std::pair<std::string, uint16_t>>* servers) {
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    const std::size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0) return false;
    const int port = std::atoi(item.c_str() + colon + 1);
    if (port < 1 || port > 65535) return false;
    servers->emplace_back(item.substr(0, colon), static_cast<uint16_t>(port));
  }
  return !servers->empty();
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p * static_cast<double>(values.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(values.size() - 1, lo + 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

// Raises the soft open-file limit to the hard one; returns the limit now in force.
uint64_t RaiseOpenFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &limit);
    (void)::getrlimit(RLIMIT_NOFILE, &limit);
  }
  return limit.rlim_cur;
}

int RunFleet(const FleetFlags& flags, const CLI::App& app) {
  const auto fail = [](const std::string& what) {
    std::fprintf(stderr, "fedrt bench fleet: %s\n", what.c_str());
    return 1;
  };
  const bool own = flags.server.empty();
  if (own && (app.count("--key-file") > 0 || app.count("--server-pid") > 0 || app.count("--server-metrics") > 0)) {
    std::fprintf(stderr, "fedrt bench fleet: --key-file, --server-pid and --server-metrics apply to --server only\n");
    return 2;
  }
  if (!own && flags.key_file.empty()) {
    std::fprintf(stderr, "fedrt bench fleet: --server needs --key-file (the aggregator's key file, with %s0..%s%d)\n",
                 flags.prefix.c_str(), flags.prefix.c_str(), flags.devices - 1);
    return 2;
  }
  for (const char* option : {"--fraction", "--downlink-codec"}) {
    if (!own && app.count(option) > 0) {
      std::fprintf(stderr, "fedrt bench fleet: %s configures the server the bench starts; give it to your "
                           "fedrt serve\n", option);
      return 2;
    }
  }
  std::vector<std::pair<std::string, uint16_t>> servers;
  if (!own && !ParseServerList(flags.server, &servers)) {
    std::fprintf(stderr, "fedrt bench fleet: --server must be HOST:PORT[,HOST:PORT...], not '%s'\n",
                 flags.server.c_str());
    return 2;
  }
  if (!flags.server_pids.empty() && flags.server_pids.size() != servers.size()) {
    std::fprintf(stderr, "fedrt bench fleet: --server-pid needs one pid per --server address (%zu), not %zu\n",
                 servers.size(), flags.server_pids.size());
    return 2;
  }
  {
    Result<std::unique_ptr<Codec>> codec = MakeCodec(flags.codec);
    if (!codec.ok()) return fail("--codec " + flags.codec + ": " + codec.status().ToString());
    const std::string name = flags.codec.substr(0, flags.codec.find(':'));
    if (name == "alq" || name == "amq") return fail("--codec " + name + ": level-table codecs are not simulated");
  }
  const uint64_t open_files = RaiseOpenFileLimit();
  // Each device is one descriptor here and one in the server, plus a few.
  if (open_files < static_cast<uint64_t>(flags.devices) + 64) {
    return fail("the open-file limit is " + std::to_string(open_files) + ", too few for " +
                std::to_string(flags.devices) + " devices (raise the hard limit: ulimit -Hn)");
  }

  Fleet fleet;
  fleet.crypto = &transport::SystemCrypto();
  const double setup_start = NowSeconds();
  Result<std::vector<std::vector<float>>> deltas = MakeDeltas(flags, &fleet.tensors);
  if (!deltas.ok()) return fail("the deltas: " + deltas.status().ToString());
  fleet.deltas = std::move(*deltas);
  const std::size_t d = fleet.deltas[0].size();
  fleet.samples_per_device = std::max<uint64_t>(1, 60000 / static_cast<uint64_t>(flags.devices));

  OwnServer own_server;
  std::string key_file = flags.key_file;
  std::vector<int> server_pids = flags.server_pids;
  if (own) {
    Result<OwnServer> started = StartServer(flags);
    if (!started.ok()) return fail(started.status().ToString());
    own_server = *started;
    servers = {{"127.0.0.1", own_server.port}};
    key_file = own_server.keys;
    server_pids = {own_server.pid};
  }
  // Per server (an aggregator tier's ranks): memory before the devices and
  // with N - 1 joined, CPU seconds over the rounds.
  struct ServerFigures {
    uint64_t rss_before = 0, rss_joined = 0;
    double cpu_slice = -1;  // at the start of the current slice, until the first round is seen
    double cpu_start = -1, cpu_end = -1, cpu_left = -1;
  };
  std::vector<ServerFigures> figures(server_pids.size());
  // The server's metrics file and its length before the run (it appends).
  const std::string metrics_file = own ? own_server.metrics : flags.server_metrics;
  std::error_code no_size;
  const uintmax_t length = metrics_file.empty() ? 0 : std::filesystem::file_size(metrics_file, no_size);
  const uintmax_t metrics_offset = no_size ? 0 : length;
  const auto total = [&](auto field) {
    double sum = 0;
    for (const ServerFigures& f : figures) sum += static_cast<double>(f.*field);
    return sum;
  };
  const auto stop_server = [&] {
    if (own_server.pid > 0) {
      ::kill(own_server.pid, SIGTERM);
      ::waitpid(own_server.pid, nullptr, 0);
      own_server.pid = -1;
    }
  };
  Result<transport::KeyStore> keys = transport::KeyStore::LoadFile(key_file);
  if (!keys.ok()) {
    stop_server();
    return fail(keys.status().ToString());
  }
  std::vector<std::shared_ptr<FleetDevice>> devices;
  for (int i = 0; i < flags.devices; ++i) {
    const std::string id = flags.prefix + std::to_string(i);
    const transport::Key* key = keys->Find(id);
    if (key == nullptr) {
      stop_server();
      return fail(key_file + " has no key for " + id);
    }
    devices.push_back(std::make_shared<FleetDevice>(fleet, static_cast<std::size_t>(i), id, *key));
  }
  const double setup_seconds = NowSeconds() - setup_start;

  transport::EventLoop loop;
  transport::ConnectionOptions options;
  options.idle_timeout_ms = 0;               // the aggregator's heartbeats are enough
  options.heartbeat_interval_ms = 10000;     // an idle device phones in every 10 s
  options.io_timeout_ms = 60000;
  options.log_errors = false;                // failures are counted and the first one reported
  for (std::size_t k = 0; k < figures.size(); ++k) figures[k].rss_before = ReadRssBytes(server_pids[k]);
  // The kernel side, when both ends are here (the server the bench started).
  const double kernel_before = own ? ReadKernelSocketBytes() : -1;
  double kernel_joined = -1;
  std::size_t rss_devices = 0;  // joined when the memory was read
  bool rss_read = false;
  std::size_t next = 0;
  const double join_start = NowSeconds();
  double join_seconds = 0;
  const double deadline = join_start + flags.timeout_s;
  // The last device waits until the others' memory has been read.
  const std::size_t first_batch = flags.devices > 1 ? static_cast<std::size_t>(flags.devices) - 1 : 1;
  // The rounds' CPU window: from the start of the slice in which a device
  // first saw the first round's instructions (so all of that round's start,
  // its model sends included) to the end of the slice in which one first saw
  // the end (a Leave, or with --server round R + 1's instructions). The
  // finish after it (a Leave to, and the close of, every connection: work
  // that grows with the connected devices, not the updates) is reported
  // apart, and reading at the slices' edges counts at most a slice too much.
  bool cpu_read = false, end_read = false;
  bool timed_out = false;
  const auto dial = [&](const std::shared_ptr<FleetDevice>& device, const std::string& host, uint16_t port) {
    ++fleet.connecting;
    transport::TcpConnect(loop, host, port, options, device, 10000,
                          [device](Result<std::shared_ptr<Connection>> connection) {
                            if (!connection.ok()) {
                              device->Abandon(connection.status());
                              return;
                            }
                            device->set_link(*connection);
                            const Status started = device->Start(**connection);
                            if (!started.ok()) (*connection)->Abort(started);
                          });
  };
  // Redirected devices first (they joined once already), then new ones.
  const auto connect_next = [&](std::size_t limit) {
    while (!fleet.redirects.empty() && fleet.connecting < static_cast<std::size_t>(flags.join_concurrency)) {
      const auto [index, to] = fleet.redirects.back();
      fleet.redirects.pop_back();
      std::vector<std::pair<std::string, uint16_t>> address;
      if (!ParseServerList(to, &address) || address.size() != 1) {
        ++fleet.connecting;  // Abandon ends a connect in flight
        devices[index]->Abandon(Status(StatusCode::kCorrupt, "redirected to '" + to + "', not HOST:PORT"));
        continue;
      }
      dial(devices[index], address[0].first, address[0].second);
    }
    while (next < limit && fleet.connecting < static_cast<std::size_t>(flags.join_concurrency)) {
      const auto& [host, port] = servers[next % servers.size()];
      dial(devices[next], host, port);
      ++next;
    }
  };
  // Joins, the memory reading, then rounds until every device left or failed.
  while (true) {
    const std::size_t limit = rss_read ? devices.size() : first_batch;
    if (!cpu_read) {
      for (std::size_t k = 0; k < figures.size(); ++k) figures[k].cpu_slice = ReadCpuSeconds(server_pids[k]);
    }
    connect_next(limit);
    loop.RunFor(5);
    const std::size_t settled = fleet.joined + fleet.failed;
    const bool quiet = fleet.connecting == 0 && fleet.redirects.empty();  // no join in flight
    if (!rss_read && next == first_batch && quiet && settled >= first_batch) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the server's allocations settle
      loop.RunFor(5);
      for (std::size_t k = 0; k < figures.size(); ++k) figures[k].rss_joined = ReadRssBytes(server_pids[k]);
      if (kernel_before >= 0) kernel_joined = ReadKernelSocketBytes();
      rss_devices = fleet.joined;
      rss_read = true;
    }
    if (join_seconds == 0 && next == devices.size() && quiet) join_seconds = NowSeconds() - join_start;
    if (!cpu_read && !fleet.round_first_seen.empty()) {
      for (ServerFigures& f : figures) f.cpu_start = f.cpu_slice;
      cpu_read = true;
    }
    if (cpu_read && !end_read && (fleet.end_seen > 0 || fleet.round_first_seen.size() > flags.rounds)) {
      for (std::size_t k = 0; k < figures.size(); ++k) figures[k].cpu_end = ReadCpuSeconds(server_pids[k]);
      end_read = true;
    }
    if (next == devices.size() && quiet && fleet.finished + fleet.failed >= devices.size()) break;
    // A server of the user's: R rounds are done once round R + 1 starts.
    if (!own && fleet.round_first_seen.size() > flags.rounds) {
      fleet.end_seen = std::prev(fleet.round_first_seen.end())->second;
      fleet.round_first_seen.erase(std::prev(fleet.round_first_seen.end()));
      break;
    }
    if (NowSeconds() > deadline) {
      timed_out = true;
      break;
    }
  }
  for (std::size_t k = 0; k < figures.size(); ++k) {
    figures[k].cpu_left = ReadCpuSeconds(server_pids[k]);
    if (!end_read) figures[k].cpu_end = figures[k].cpu_left;
  }
  for (auto& device : devices) device->Close();
  loop.RunFor(200);

  std::vector<double> round_seconds;
  uint64_t accepted = 0, rejected = 0, rounds_applied = 0;
  bool server_ok = true;
  std::string server_exit;
  if (own) {
    int status = 0;
    const double wait_until = NowSeconds() + 30;
    pid_t waited = 0;
    while ((waited = ::waitpid(own_server.pid, &status, WNOHANG)) == 0 && NowSeconds() < wait_until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (waited != own_server.pid) {
      ::kill(own_server.pid, SIGKILL);
      ::waitpid(own_server.pid, &status, 0);
    }
    own_server.pid = -1;
    server_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    server_exit = DescribeExit(status);
  }
  if (!metrics_file.empty()) {
    // The server's account of the rounds (the lines it appended during the run).
    std::ifstream metrics(metrics_file);
    metrics.seekg(static_cast<std::streamoff>(metrics_offset));
    std::string line;
    while (rounds_applied < flags.rounds && std::getline(metrics, line)) {
      nlohmann::json round = nlohmann::json::parse(line, nullptr, false);
      if (round.is_discarded()) continue;
      accepted += round.value("updates", uint64_t{0});
      rejected += round.value("rejected", uint64_t{0});
      if (round.value("applied", false)) ++rounds_applied;
      round_seconds.push_back(round.value("seconds", 0.0));
    }
  } else {
    // Device-side: from one round's first instructions to the next's (or the Leave).
    double previous = -1;
    for (const auto& [round, seen] : fleet.round_first_seen) {
      if (previous >= 0) round_seconds.push_back(seen - previous);
      previous = seen;
    }
    if (previous >= 0 && fleet.end_seen > previous) round_seconds.push_back(fleet.end_seen - previous);
    // Without the server's account: an update counts as accepted unless its
    // connection was closed with an error.
    if (fleet.failed == 0) {
      for (const auto& [round, seen] : fleet.round_first_seen) accepted += fleet.updates_by_round[round];
    }
    rounds_applied = round_seconds.size();
  }
  double total_round_seconds = 0;
  for (double s : round_seconds) total_round_seconds += s;
  const double fp32_bytes = static_cast<double>(accepted) * static_cast<double>(d) * 4.0;
  double server_cpu = figures.empty() ? -1 : 0;
  double finish_cpu = figures.empty() || fleet.end_seen == 0 ? -1 : 0;
  nlohmann::json per_server = nlohmann::json::array();
  for (std::size_t k = 0; k < figures.size(); ++k) {
    const ServerFigures& f = figures[k];
    const double cpu = f.cpu_start >= 0 && f.cpu_end >= f.cpu_start ? f.cpu_end - f.cpu_start : -1;
    server_cpu = cpu >= 0 && server_cpu >= 0 ? server_cpu + cpu : -1;
    const double finish = f.cpu_end >= 0 && f.cpu_left >= f.cpu_end ? f.cpu_left - f.cpu_end : -1;
    finish_cpu = finish >= 0 && finish_cpu >= 0 ? finish_cpu + finish : -1;
    per_server.push_back({{"pid", server_pids[k]},
                          {"rss_bytes_before", f.rss_before},
                          {"rss_bytes_joined", f.rss_joined},
                          {"cpu_seconds", cpu >= 0 ? nlohmann::json(cpu) : nlohmann::json()}});
  }

  nlohmann::json report = {
      {"devices", flags.devices},
      {"rounds", flags.rounds},
      {"codec", flags.codec},
      {"model", flags.model},
      {"parameters", d},
      {"server", own ? "started by the bench" : flags.server},
      {"open_files_limit", open_files},
      {"joined", fleet.joined},
      {"failed", fleet.failed},
      {"redirected", fleet.redirected},
      {"join_seconds", join_seconds},
      {"setup_seconds", setup_seconds},
      {"rounds_applied", rounds_applied},
      {"updates_sent", fleet.updates_sent},
      {"updates_deferred", fleet.deferred},
      {"updates_accepted", accepted},
      {"updates_rejected", rejected},
      {"update_bytes_mean", fleet.updates_sent ? static_cast<double>(fleet.update_bytes) /
                                                     static_cast<double>(fleet.updates_sent)
                                               : 0.0},
      {"updates_per_second", total_round_seconds > 0 ? static_cast<double>(accepted) / total_round_seconds : 0.0},
      {"round_seconds_p50", Percentile(round_seconds, 0.5)},
      {"round_seconds_p99", Percentile(round_seconds, 0.99)},
      {"round_seconds", round_seconds},
      {"fleet_encode_seconds", fleet.encode_seconds},
  };
  report["server_cpu_seconds"] = server_cpu >= 0 ? nlohmann::json(server_cpu) : nlohmann::json();
  report["server_finish_cpu_seconds"] = finish_cpu >= 0 ? nlohmann::json(finish_cpu) : nlohmann::json();
  report["decode_sum_bytes_per_second"] =
      server_cpu > 0 ? nlohmann::json(fp32_bytes / server_cpu) : nlohmann::json();
  const double rss_before = total(&ServerFigures::rss_before), rss_joined = total(&ServerFigures::rss_joined);
  if (!figures.empty() && rss_devices > 0) {
    report["server_rss_bytes_before"] = rss_before;
    report["server_rss_bytes_joined"] = rss_joined;
    report["rss_devices"] = rss_devices;
    report["rss_bytes_per_device"] = rss_joined > rss_before ? (rss_joined - rss_before) /
                                                                   static_cast<double>(rss_devices)
                                                             : 0.0;
  } else {
    report["rss_bytes_per_device"] = nullptr;
  }
  // A connection is two sockets of the same kinds on this host, the
  // server's and the device's: the server's end is taken as half the growth.
  report["kernel_socket_bytes_per_device"] =
      kernel_before >= 0 && kernel_joined >= 0 && rss_devices > 0
          ? nlohmann::json((kernel_joined - kernel_before) / 2 / static_cast<double>(rss_devices))
          : nlohmann::json();
  if (!fleet.first_error.empty()) report["first_error"] = fleet.first_error;
  if (!figures.empty()) report["servers"] = per_server;
  if (own) report["server_exit"] = server_exit;
  if (timed_out) report["timed_out"] = true;

  if (flags.json) {
    std::printf("%s\n", report.dump().c_str());
  } else {
    std::printf("fleet: %d devices, %u rounds, codec %s, model %s (%zu parameters), open-file limit %llu\n",
                flags.devices, flags.rounds, flags.codec.c_str(), flags.model.c_str(), d,
                static_cast<unsigned long long>(open_files));
    std::printf("joined %zu (failed %zu) in %.1f s\n", fleet.joined, fleet.failed,
                join_seconds);
    if (!report["rss_bytes_per_device"].is_null()) {
      std::printf("server memory: %.0f bytes per joined device (VmRSS %.1f MB -> %.1f MB for %zu devices)\n",
                  static_cast<double>(report["rss_bytes_per_device"]), rss_before / 1e6, rss_joined / 1e6,
                  rss_devices);
    }
    if (!report["kernel_socket_bytes_per_device"].is_null()) {
      std::printf("kernel memory (slabs and TCP buffers): %.0f bytes per joined device, the server's end\n",
                  static_cast<double>(report["kernel_socket_bytes_per_device"]));
    }
    if (figures.size() > 1) {
      for (std::size_t k = 0; k < figures.size(); ++k) {
        std::printf("server %zu (pid %d): VmRSS %.1f MB -> %.1f MB, %.2f CPU s in the rounds\n", k, server_pids[k],
                    static_cast<double>(figures[k].rss_before) / 1e6, static_cast<double>(figures[k].rss_joined) / 1e6,
                    figures[k].cpu_end - figures[k].cpu_start);
      }
    }
    if (fleet.redirected > 0) std::printf("redirected joins: %zu\n", fleet.redirected);
    std::printf("updates: %llu accepted, %llu rejected, %.1f per second; round time p50 %.3f s, p99 %.3f s\n",
                static_cast<unsigned long long>(accepted), static_cast<unsigned long long>(rejected),
                static_cast<double>(report["updates_per_second"]), static_cast<double>(report["round_seconds_p50"]),
                static_cast<double>(report["round_seconds_p99"]));
    if (server_cpu > 0) {
      std::printf("decode+sum: %.3f GB/s fp32-equivalent per server CPU second (%.2f CPU s in the rounds)\n",
                  fp32_bytes / server_cpu / 1e9, server_cpu);
    }
    if (finish_cpu >= 0) {
      std::printf("finish: %.2f server CPU s for the Leave to and the close of every connection\n", finish_cpu);
    }
    if (!fleet.first_error.empty()) std::printf("first error: %s\n", fleet.first_error.c_str());
  }
  if (own) std::filesystem::remove_all(own_server.dir);
  return server_ok && !timed_out && fleet.failed == 0 && fleet.joined == devices.size() ? 0 : 1;
}

}  // namespace

void RegisterFleetBench(CLI::App& app, CommandList& commands) {
  CLI::App* bench = app.get_subcommand("bench");
  auto flags = std::make_shared<FleetFlags>();
  CLI::App* fleet = bench->add_subcommand(
      "fleet", "N lightweight devices in one process against one aggregator: joins, memory per device, updates/s, "
               "decode+sum throughput, round times");
  fleet->add_option("--devices", flags->devices, "Devices")->capture_default_str()->check(CLI::Range(1, 1000000));
  fleet->add_option("--rounds", flags->rounds, "Rounds to run (with --server: to measure, then the devices leave)")->capture_default_str()
      ->check(CLI::Range(1u, 1000000u));
  fleet->add_option("--codec", flags->codec, "Codec spec the devices send with")->capture_default_str();
  fleet->add_option("--server", flags->server,
                    "HOST:PORT[,HOST:PORT...] of running aggregators (devices spread round-robin); "
                    "default: start fedrt serve with generated keys on 127.0.0.1");
  fleet->add_option("--key-file", flags->key_file, "With --server: the aggregator's key file (ids <prefix>0..N-1)");
  fleet->add_option("--server-pid", flags->server_pids,
                    "With --server on this host: the servers' pids (one per address, comma-separated), for the "
                    "memory and CPU figures")
      ->delimiter(',');
  fleet->add_option("--server-metrics", flags->server_metrics,
                    "With --server: the server's --metrics file (an aggregator tier's: rank 0's), for its own round "
                    "times and counts");
  fleet->add_option("--prefix", flags->prefix, "Device ids are <prefix><n>")->capture_default_str();
  fleet->add_option("--model", flags->model, "Model spec (the server's)")->capture_default_str();
  fleet->add_option("--data", flags->data, "MNIST-style directory the deltas are trained on")->capture_default_str();
  fleet->add_option("--fraction", flags->fraction, "Fraction of the devices sampled per round (the started server)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  fleet->add_option("--downlink-codec", flags->downlink_codec,
                    "The started server sends the model's delta in this codec (default: the full fp32 model)");
  fleet->add_option("--join-concurrency", flags->join_concurrency, "Connects and joins in flight at once")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  fleet->add_option("--timeout", flags->timeout_s, "Give up after this many seconds")->capture_default_str();
  fleet->add_flag("--json", flags->json, "Print one JSON object");
  commands.push_back({fleet, [flags, fleet] { return RunFleet(*flags, *fleet); }});
}

}  // namespace fedrt::cli
