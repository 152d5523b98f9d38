// The user-space link shaper (contract in shaper.h): one thread runs a
// timeline of held frames; LinkDirection (link_profile.h) says when each
// one is due.
#include "fedrt/transport/shaper.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace fedrt {
namespace transport {

struct LinkShaper::Core {
  Core(const LinkProfile& profile, uint64_t seed, LinkShaper::FarEnd far_end)
      : up(profile.up_bits_per_second, profile.delay_ms, profile.loss, seed),
        down(profile.down_bits_per_second, profile.delay_ms, profile.loss, seed ^ 0x5bd1e995u),
        paced(far_end == LinkShaper::FarEnd::kShaped) {}

  static uint64_t NowUs() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }

  // Runs `fn` on the shaper's thread at `due_us`; events due at the same
  // time run in the order they were scheduled. Dropped after Stop.
  void Schedule(uint64_t due_us, std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping) return;
    events.emplace(std::make_pair(due_us, next_seq++), std::move(fn));
    changed.notify_all();
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      if (events.empty()) {
        changed.wait(lock);
        continue;
      }
      const uint64_t due = events.begin()->first.first;
      const uint64_t now = NowUs();
      if (due > now) {
        changed.wait_for(lock, std::chrono::microseconds(due - now));
        continue;
      }
      std::function<void()> fn = std::move(events.begin()->second);
      events.erase(events.begin());
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  void Stop() {
    std::map<std::pair<uint64_t, uint64_t>, std::function<void()>> dropped;
    std::map<uint64_t, std::shared_ptr<Connection>> forgotten;
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
      dropped.swap(events);  // what they hold is released outside the lock
      forgotten.swap(shaped);
      changed.notify_all();
    }
    if (thread.joinable()) thread.join();
  }

  std::mutex mutex;  // guards everything below, the directions included
  std::condition_variable changed;
  std::map<std::pair<uint64_t, uint64_t>, std::function<void()>> events;
  uint64_t next_seq = 0;
  bool stopping = false;
  LinkDirection up, down;
  const bool paced;  // frames arrive paced by the far end's shaper: down.Forward
  std::thread thread;
  // Shaped connections by the id of the connection they wrap.
  // Held until the wrapped connection closes (or the shaper stops).
  std::map<uint64_t, std::shared_ptr<Connection>> shaped;
};

namespace {

using Core = LinkShaper::Core;

class ShapedConnection final : public Connection, public std::enable_shared_from_this<ShapedConnection> {
 public:
  ShapedConnection(std::shared_ptr<Core> core, std::shared_ptr<Connection> inner)
      : core_(std::move(core)), inner_(std::move(inner)) {}

  Status Send(OutFrame frame) override {
    if (frame.empty()) return InvalidArgument("empty frame");
    std::lock_guard<std::mutex> lock(mutex_);
    if (closing_ || inner_->closed()) {
      return Status(StatusCode::kUnavailable, "connection " + inner_->peer() + " is closed");
    }
    uint64_t due = 0;
    {
      std::lock_guard<std::mutex> core_lock(core_->mutex);
      due = core_->up.Transmit(Core::NowUs(), frame.wire_size());
    }
    last_due_us_ = due;
    ++held_;
    // The frame moves on into the real connection (Release): once that has
    // written it no copy is left here, so a FrameSlot is free again when the
    // real connection's OnSent says so.
    core_->Schedule(due, [self = shared_from_this(), frame = std::move(frame)]() mutable {
      self->Release(std::move(frame));
    });
    return Status::Ok();
  }

  Status Flush(uint32_t timeout_ms) override {
    const auto start = std::chrono::steady_clock::now();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto done = [&] { return held_ == 0; };
      if (timeout_ms == 0) {
        released_.wait(lock, done);
      } else if (!released_.wait_for(lock, std::chrono::milliseconds(timeout_ms), done)) {
        return Status(StatusCode::kDeadlineExceeded,
                      "connection " + inner_->peer() + ": frames still held by the link shaper after " +
                          std::to_string(timeout_ms) + " ms");
      }
      if (!lost_.ok()) return lost_;
    }
    uint32_t left = 0;
    if (timeout_ms != 0) {
      const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      left = static_cast<uint32_t>(std::max<int64_t>(1, int64_t{timeout_ms} - spent.count()));
    }
    return inner_->Flush(left);
  }

  void Close() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closing_) return;
    closing_ = true;
    // After the frames it holds, as a real link's FIN.
    core_->Schedule(std::max(Core::NowUs(), last_due_us_), [inner = inner_] { inner->Close(); });
  }

  void Abort(Status reason, bool notify_peer) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
      aborted_ = true;
    }
    inner_->Abort(std::move(reason), notify_peer);
  }

  void LiftInitialFrameLimit() override { inner_->LiftInitialFrameLimit(); }
  uint64_t id() const override { return inner_->id(); }
  const std::string& peer() const override { return inner_->peer(); }
  bool closed() const override { return inner_->closed(); }
  ConnectionStats stats() const override { return inner_->stats(); }

 private:
  void Release(OutFrame frame) {
    bool skip = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      skip = aborted_;
    }
    const Status sent = skip ? Status(StatusCode::kUnavailable, "connection " + inner_->peer() + " was aborted")
                             : inner_->Send(std::move(frame));
    std::lock_guard<std::mutex> lock(mutex_);
    if (!sent.ok() && lost_.ok()) {
      lost_ = Status(StatusCode::kUnavailable, "connection " + inner_->peer() +
                                                   " lost a frame the link shaper held: " + sent.ToString());
    }
    --held_;
    released_.notify_all();
  }

  const std::shared_ptr<Core> core_;
  const std::shared_ptr<Connection> inner_;
  std::mutex mutex_;
  std::condition_variable released_;
  std::size_t held_ = 0;      // frames Sent and not yet handed to inner_
  uint64_t last_due_us_ = 0;  // when the last of them is due
  bool closing_ = false;
  bool aborted_ = false;
  Status lost_;               // the first frame inner_ refused
};

class ShapingHandler final : public ConnectionHandler {
 public:
  ShapingHandler(std::shared_ptr<Core> core, std::shared_ptr<ConnectionHandler> handler)
      : core_(std::move(core)), handler_(std::move(handler)) {}

  void OnOpen(const std::shared_ptr<Connection>& connection) override {
    auto shaped = std::make_shared<ShapedConnection>(core_, connection);
    {
      std::lock_guard<std::mutex> lock(core_->mutex);
      if (!core_->stopping) core_->shaped[connection->id()] = shaped;
    }
    handler_->OnOpen(shaped);
  }

  void OnFrame(Connection& connection, Frame frame) override {
    std::shared_ptr<Connection> shaped = Find(connection);
    if (!shaped) return;
    uint64_t due = 0;
    {
      std::lock_guard<std::mutex> lock(core_->mutex);
      const uint64_t now = Core::NowUs();
      const std::size_t bytes = kFramePrefixBytes + frame.size();
      due = core_->paced ? core_->down.Forward(now, bytes) : core_->down.Transmit(now, bytes);
      last_due_us_ = due;
    }
    auto held = std::make_shared<Frame>(std::move(frame));
    core_->Schedule(due, [handler = handler_, shaped, held] { handler->OnFrame(*shaped, std::move(*held)); });
  }

  void OnClose(Connection& connection, const Status& reason) override {
    std::shared_ptr<Connection> shaped = Find(connection);
    uint64_t due = 0;
    {
      std::lock_guard<std::mutex> lock(core_->mutex);
      core_->shaped.erase(connection.id());
      due = std::max(Core::NowUs(), last_due_us_);
    }
    if (!shaped) return;
    core_->Schedule(due, [handler = handler_, shaped, reason] { handler->OnClose(*shaped, reason); });
  }

  void OnSent(Connection& connection) override {
    if (std::shared_ptr<Connection> shaped = Find(connection)) handler_->OnSent(*shaped);
  }

 private:
  std::shared_ptr<Connection> Find(const Connection& inner) {
    std::lock_guard<std::mutex> lock(core_->mutex);
    auto it = core_->shaped.find(inner.id());
    return it == core_->shaped.end() ? nullptr : it->second;
  }

  const std::shared_ptr<Core> core_;
  const std::shared_ptr<ConnectionHandler> handler_;
  uint64_t last_due_us_ = 0;  // under core_->mutex: the last frame received is due
};

}  // namespace

LinkShaper::LinkShaper(const LinkProfile& profile, uint64_t seed, FarEnd far_end)
    : core_(std::make_shared<Core>(profile, seed, far_end)) {
  core_->thread = std::thread([core = core_.get()] { core->Run(); });
}

LinkShaper::~LinkShaper() { core_->Stop(); }

std::shared_ptr<ConnectionHandler> LinkShaper::Wrap(std::shared_ptr<ConnectionHandler> handler) {
  return std::make_shared<ShapingHandler>(core_, std::move(handler));
}

std::shared_ptr<Connection> LinkShaper::Shaped(const Connection& inner) const {
  std::lock_guard<std::mutex> lock(core_->mutex);
  auto it = core_->shaped.find(inner.id());
  return it == core_->shaped.end() ? nullptr : it->second;
}

}  // namespace transport
}  // namespace fedrt
