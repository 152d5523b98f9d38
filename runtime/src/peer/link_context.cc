// The collective context over transport connections: links, failure
// reports, frame slots and registered buffers (link_context.h).
#include "peer/link_context.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <utility>

#include "fedrt/transport/frame.h"
#include "peer/formation.h"

namespace fedrt {
namespace peer {
namespace internal {
namespace {

using transport::Connection;
using transport::Frame;
using transport::MessageKind;

// How long peers exchange failure reports after a step deadline, and how long
// a failed collective waits for its last sends.
uint32_t GraceMs(uint32_t step_timeout_ms) {
  return std::max<uint32_t>(200, std::min<uint32_t>(1000, step_timeout_ms / 4));
}

bool SameHead(const transport::PayloadHead& a, const transport::PayloadHead& b) {
  return a.kind == b.kind && a.tag == b.tag && a.stage == b.stage && a.source == b.source && a.step == b.step &&
         a.segment == b.segment && a.index == b.index && a.offset == b.offset && a.size == b.size;
}

}  // namespace

// ---- Link --------------------------------------------------------------------

void Link::OnOpen(const std::shared_ptr<Connection>& connection) {
  std::lock_guard<std::mutex> lock(signal_->mutex);
  connection_ = connection;
  signal_->changed.notify_all();
}

void Link::OnFrame(Connection&, Frame frame) {
  std::lock_guard<std::mutex> lock(signal_->mutex);
  placing_ = false;  // frames arrive one at a time: a placed payload is complete
  if (frame.kind() == MessageKind::kLeave) {
    left_ring_ = true;  // finished: its close that follows is no failure
    signal_->changed.notify_all();
    return;
  }
  frames_.push_back(std::move(frame));
  signal_->changed.notify_all();
}

void Link::OnSent(Connection&) {
  if (!signal_->waiting_for_sends.load()) return;
  std::lock_guard<std::mutex> lock(signal_->mutex);
  signal_->changed.notify_all();
}

void Link::OnClose(Connection&, const Status& reason) {
  std::lock_guard<std::mutex> lock(signal_->mutex);
  placing_ = false;
  closed_ = true;
  close_reason_ = reason.ok() ? Status(StatusCode::kUnavailable, "closed") : reason;
  connection_.reset();
  signal_->changed.notify_all();
}

bool Link::WantsPlacement(Connection&) { return wants_placement_.load(std::memory_order_acquire); }

uint8_t* Link::PlacePayload(Connection&, const transport::PayloadHead& head) {
  std::lock_guard<std::mutex> lock(signal_->mutex);
  const RegisteredBuffer* b = Match(head, /*reducing=*/false);
  return b ? b->data : nullptr;
}

bool Link::ConsumesPayload(Connection&, const transport::PayloadHead& head) {
  std::lock_guard<std::mutex> lock(signal_->mutex);
  const RegisteredBuffer* b = Match(head, /*reducing=*/true);
  if (b == nullptr) return false;
  reducing_ = *b;
  return true;
}

void Link::ConsumePayload(Connection&, const uint8_t* piece, std::size_t offset, std::size_t size) {
  reducing_.reduce(piece, size, reducing_.data + offset);
}

void Link::StartPlacement() {
  next_ = 0;
  wants_placement_.store(!buffers_.empty(), std::memory_order_release);
}

bool Link::StopPlacement() {
  wants_placement_.store(false, std::memory_order_release);
  buffers_.clear();
  next_ = 0;
  return !placing_ || closed_;
}

const RegisteredBuffer* Link::Match(const transport::PayloadHead& head, bool reducing) {
  for (std::size_t i = next_; i < buffers_.size(); ++i) {
    const RegisteredBuffer& b = buffers_[i];
    if ((b.reduce != nullptr) == reducing && SameHead(b.head, head)) {
      next_ = i + 1;
      placing_ = true;
      return &b;
    }
  }
  return nullptr;
}

bool Link::TakeError(Frame* out) {
  for (std::size_t i = 0; i < frames_.size(); ++i) {
    if (frames_.at(i).kind() == MessageKind::kError) {
      *out = frames_.Take(i);
      return true;
    }
  }
  return false;
}

bool Link::front_is_error() const { return !frames_.empty() && frames_.at(0).kind() == MessageKind::kError; }

Frame Link::TakeFrame() { return frames_.Take(0); }

Result<Frame> PopFrom(const Clock& clock, Signal& signal, Link& link, Deadline deadline) {
  std::unique_lock<std::mutex> lock(signal.mutex);
  WaitUntil(clock, signal.changed, lock, deadline, [&] { return link.has_frame() || link.closed(); });
  if (link.has_frame()) return link.TakeFrame();
  if (link.closed()) return link.close_reason();
  return Status(StatusCode::kDeadlineExceeded, "no answer within the join deadline");
}

// ---- LinkContext: formation ----------------------------------------------------

LinkContext::LinkContext(std::vector<std::string> ids, uint32_t rank, const ContextOptions& options,
                         const transport::FrameLimits& limits)
    : ids_(std::move(ids)), rank_(rank), options_(options), limits_(limits),
      clock_(options.clock != nullptr ? *options.clock : SystemClock()), signal_(std::make_shared<Signal>()) {}

LinkContext::~LinkContext() = default;

std::string LinkContext::Name(uint32_t rank) const {
  return std::string(kFailurePrefix) + std::to_string(rank) + " (" + (rank < ids_.size() ? ids_[rank] : "?") + ")";
}

void LinkContext::DropLinks(const char* why, bool graceful) {
  std::vector<std::shared_ptr<Connection>> connections;
  {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    for (const auto& link : links_) {
      if (link) connections.push_back(link->connection());
    }
    if (right_) connections.push_back(right_->connection());
    if (left_) connections.push_back(left_->connection());
  }
  // Re-forming closes gracefully: a failure report still queued on these
  // links reaches the neighbours before the end of stream, so they blame
  // the same rank instead of this peer's closing.
  for (const auto& c : connections) {
    if (!c) continue;
    if (graceful) {
      c->Close();
    } else {
      c->Abort(Status(StatusCode::kCancelled, why));
    }
  }
  right_.reset();
  left_.reset();
  links_.clear();
  neighbours_.clear();
  all_links_.clear();
}

Status LinkContext::Form(const std::vector<uint32_t>& members) {
  DropLinks("ring re-formed", /*graceful=*/true);
  std::vector<uint32_t> ring;
  const Result<std::size_t> position =
      FormationMembers(members, rank_, static_cast<uint32_t>(ids_.size()), &ring);
  if (!position.ok()) return position.status();
  // The generation is the same on every member: it counts formations, and
  // every member re-forms after the same failures.
  ++generation_;
  members_ = ring;
  position_ = *position;
  failed_rank_ = -1;
  reported_ = false;
  collective_ = 0;
  const std::size_t p = members_.size();
  if (p == 1) return Status::Ok();
  const Deadline deadline = DeadlineAfterMs(options_.join_timeout_ms);
  std::vector<std::shared_ptr<Link>> dialled, accepted;
  neighbours_ = FormationNeighbours(options_.graph, members_, position_);
  if (options_.graph == GossipGraph::kRing) {
    Status s = Connect({right()}, {left()}, generation_, deadline, &dialled, &accepted);
    if (!dialled.empty()) right_ = dialled[0];
    if (!accepted.empty()) left_ = accepted[0];
    ListLinks();
    return s;
  }
  // Graph links: one connection per edge, dialled by the lower rank, carrying
  // data both ways.
  std::vector<uint32_t> lower, higher;
  for (const Neighbour& n : neighbours_) (n.rank < rank_ ? lower : higher).push_back(n.rank);
  Status s = Connect(higher, lower, generation_, deadline, &dialled, &accepted);
  if (!s.ok()) return s;
  for (const Neighbour& n : neighbours_) {
    auto lo = std::find(lower.begin(), lower.end(), n.rank);
    links_.push_back(lo != lower.end()
                         ? accepted[static_cast<std::size_t>(lo - lower.begin())]
                         : dialled[static_cast<std::size_t>(std::find(higher.begin(), higher.end(), n.rank) -
                                                             higher.begin())]);
  }
  ListLinks();
  return Status::Ok();
}

Status LinkContext::Close() {
  std::vector<std::shared_ptr<Link>> all = links_;
  all.push_back(right_);
  all.push_back(left_);
  transport::LeaveMessage leave;
  leave.reason = "finished";
  auto frame = Encode(leave, limits_);
  if (frame.ok()) {
    for (const auto& link : all) Post(link.get(), *frame);
  }
  DropLinks("peer group closed", /*graceful=*/true);
  std::unique_lock<std::mutex> lock(signal_->mutex);
  const bool done = Wait(lock, DeadlineAfterMs(5000), [&] {
    return std::all_of(all.begin(), all.end(), [](const std::shared_ptr<Link>& k) { return !k || k->closed(); });
  });
  return done ? Status::Ok() : Status(StatusCode::kDeadlineExceeded, "neighbours did not close within 5 s");
}

// ---- LinkContext: sending ---------------------------------------------------------

void LinkContext::Post(Link* link, const transport::OutFrame& frame) {
  if (link == nullptr) return;
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    connection = link->connection();
  }
  if (connection) (void)connection->Send(frame);
}

Result<transport::OutFrame> LinkContext::ReportFrame(std::string text) const {
  transport::ErrorMessage report;
  report.code = StatusCode::kUnavailable;
  if (text.size() > transport::kMaxReasonBytes) text.resize(transport::kMaxReasonBytes);
  report.message = text;
  return Encode(report, limits_);
}

Link* LinkContext::LinkTo(uint32_t to) const {
  if (options_.graph != GossipGraph::kRing) {
    for (std::size_t i = 0; i < links_.size(); ++i) {
      if (neighbours_[i].rank == to) return links_[i].get();
    }
    return nullptr;
  }
  // With two members the one neighbour is sent to on the right link.
  if (members_.size() > 1 && to == right()) return right_.get();
  if (members_.size() > 1 && to == left()) return left_.get();
  return nullptr;
}

Link* LinkContext::LinkFrom(uint32_t from) const {
  if (options_.graph != GossipGraph::kRing) return LinkTo(from);
  // With two members the one neighbour is heard on the left link.
  if (members_.size() > 1 && from == left()) return left_.get();
  if (members_.size() > 1 && from == right()) return right_.get();
  return nullptr;
}

void LinkContext::ListLinks() {
  all_links_.clear();
  for (Link* link : {right_.get(), left_.get()}) {
    if (link != nullptr) all_links_.push_back(link);
  }
  for (const auto& link : links_) all_links_.push_back(link.get());
}

Status LinkContext::Send(uint32_t to, Result<transport::OutFrame> frame) {
  Link* link = LinkTo(to);
  if (link == nullptr) return Internal(Name(to) + " is not a neighbour of this formation");
  return SendOn(*link, to, std::move(frame));
}

Status LinkContext::SendOn(Link& link, uint32_t to, Result<transport::OutFrame> frame) {
  if (!frame.ok()) return frame.status();
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    connection = link.connection();
  }
  Status s = connection ? connection->Send(std::move(*frame))
                        : Status(StatusCode::kUnavailable, "link closed");
  if (s.ok()) return Status::Ok();
  return SendFailed(link, to, s);
}

Status LinkContext::SendFailed(Link& link, uint32_t to, const Status& s) {
  {
    // A neighbour that finished and left needs nothing more from this peer.
    std::lock_guard<std::mutex> lock(signal_->mutex);
    if (link.left_ring()) return Status::Ok();
  }
  // The neighbour may have closed after reporting another peer's failure:
  // the report, not the close, names the failed peer.
  Frame report;
  bool have_report = false;
  {
    std::lock_guard<std::mutex> lock(signal_->mutex);
    have_report = (left_ && left_->TakeError(&report)) || (right_ && right_->TakeError(&report));
    for (const auto& g : links_) have_report = have_report || g->TakeError(&report);
  }
  if (have_report) {
    auto e = transport::DecodeError(report);
    Report parsed;
    if (e.ok() && ParseReport(e->message, &parsed) && parsed.failed && parsed.a >= 0 &&
        parsed.a < static_cast<int>(ids_.size())) {
      return Fail(parsed.a, Status(e->code, std::string(e->message)));
    }
  }
  return Fail(static_cast<int>(to), Named(to, s));
}

Status LinkContext::Fail(int failed, const Status& status) {
  if (failed_rank_ < 0) failed_rank_ = failed;
  if (!reported_ && failed_rank_ >= 0) {
    reported_ = true;
    auto frame = ReportFrame(std::string(kFailurePrefix) + std::to_string(failed_rank_) + " failed: " +
                             status.message());
    if (frame.ok()) {
      for (Link* link : all_links_) Post(link, *frame);
    }
  }
  return status;
}

Result<transport::FrameSlot*> LinkContext::FreeSlot(uint32_t to, Deadline deadline, const char* what) {
  Link* link = LinkTo(to);
  if (link == nullptr) return Internal(Name(to) + " is not a neighbour of this formation");
  auto& slots = link->slots();
  Status failed;
  for (;;) {
    for (const auto& slot : slots) {
      if (!slot->busy()) return slot.get();
    }
    if (slots.size() < kMaxSlots) {
      slots.push_back(std::make_unique<transport::FrameSlot>());
      return slots.back().get();
    }
    std::unique_lock<std::mutex> lock(signal_->mutex);
    signal_->waiting_for_sends = true;
    const bool ready = Wait(lock, deadline, [&] {
      if (link->closed()) return true;
      for (const auto& slot : slots) {
        if (!slot->busy()) return true;
      }
      return false;
    });
    signal_->waiting_for_sends = false;
    if (link->closed()) {
      failed = Status(StatusCode::kUnavailable, "link closed");
      break;
    }
    if (!ready) {
      failed = Status(StatusCode::kDeadlineExceeded, "sends did not complete within the step deadline");
      break;
    }
  }
  if (failed.code() == StatusCode::kUnavailable) {
    Status s = SendFailed(*link, to, failed);  // the link closed
    if (s.ok()) return static_cast<transport::FrameSlot*>(nullptr);  // it left: nothing more to send
    return s;
  }
  return Fail(static_cast<int>(to),
              Named(to, Status(failed.code(), std::string("cannot send ") + what + ": " + failed.message())));
}

// ---- LinkContext: receiving -------------------------------------------------------

Result<Frame> LinkContext::Receive(uint32_t from, Deadline deadline, bool leaving_is_ok) {
  if (options_.graph != GossipGraph::kRing) {
    for (std::size_t i = 0; i < links_.size(); ++i) {
      if (neighbours_[i].rank == from) return NextFromNeighbour(i, deadline);
    }
  } else if (left_ && right_ && from == left()) {
    return NextFrom(false, deadline, leaving_is_ok);
  } else if (left_ && right_ && from == right()) {
    return NextFrom(true, deadline, leaving_is_ok);
  }
  return Internal(Name(from) + " is not a neighbour of this formation");
}

Result<Frame> LinkContext::NextFrom(bool want_right, Deadline deadline, bool leaving_is_ok) {
  // `from` is the neighbour whose data we wait for, `to` the other one.
  const uint32_t from = want_right ? right() : left();
  const uint32_t to = want_right ? left() : right();
  Link* want = want_right ? right_.get() : left_.get();
  Link* other = want_right ? left_.get() : right_.get();
  const int n = static_cast<int>(ids_.size());
  Deadline wait_until = deadline;
  bool grace = false;
  std::map<int, int> waits_on;  // waiting rank -> rank it waits on
  auto send_text = [&](Link* link, const std::string& text) {
    auto frame = ReportFrame(text);
    if (frame.ok()) Post(link, *frame);
  };
  for (;;) {
    Frame frame;
    bool from_other = false;
    Status closed;
    int closed_rank = -1;
    bool left = false;
    {
      std::unique_lock<std::mutex> lock(signal_->mutex);
      Wait(lock, wait_until, [&] {
        return want->has_frame() || want->closed() || other->front_is_error() ||
               (other->closed() && !other->left_ring());
      });
      // From the other side only reports are taken here; its data (gossip)
      // stays queued for the call that waits for it.
      if (other->front_is_error()) {
        frame = other->TakeFrame();
        from_other = true;
      } else if (want->has_frame()) {
        frame = want->TakeFrame();
      } else if (other->TakeError(&frame)) {
        from_other = true;  // a report that arrived behind data, before a close
      } else if (want->closed() && leaving_is_ok && want->left_ring()) {
        left = true;  // it finished: everything it sent has been taken
      } else if (want->closed()) {
        closed = want->close_reason();
        closed_rank = static_cast<int>(from);
      } else if (other->closed() && !other->left_ring()) {
        closed = other->close_reason();
        closed_rank = static_cast<int>(to);
      }
    }
    const bool from_right = from_other != want_right;
    const uint32_t sender = from_other ? to : from;
    if (frame.kind() == MessageKind::kError) {
      auto e = transport::DecodeError(frame);
      if (!e.ok()) return Fail(static_cast<int>(sender), Named(sender, e.status()));
      Report report;
      if (!ParseReport(e->message, &report) || report.a < 0 || report.a >= n || report.b >= n) {
        // A neighbour that gives up for its own reason.
        return Fail(static_cast<int>(sender), Named(sender, transport::ToStatus(*e)));
      }
      if (report.failed) return Fail(report.a, Status(e->code, std::string(e->message)));
      if (report.a != static_cast<int>(rank_) && waits_on.count(report.a) == 0) {
        waits_on[report.a] = report.b;
        // Pass it on, away from where it came from.
        send_text(from_right ? left_.get() : right_.get(), std::string(e->message));
      }
      continue;
    }
    if (frame.kind() != MessageKind::kNone) return frame;
    if (left) return Status(StatusCode::kCancelled, Name(from) + " has left");
    if (closed_rank >= 0) {
      return Fail(closed_rank, Named(static_cast<uint32_t>(closed_rank), closed));
    }
    if (!grace) {
      grace = true;
      waits_on[static_cast<int>(rank_)] = static_cast<int>(from);
      const std::string text = std::string(kFailurePrefix) + std::to_string(rank_) + " waits on " +
                               kFailurePrefix + std::to_string(from);
      send_text(right_.get(), text);
      send_text(left_.get(), text);
      wait_until = DeadlineAfterMs(GraceMs(options_.step_timeout_ms));
      continue;
    }
    // The rank someone waits on that waits on nobody is the stalled one.
    int culprit = static_cast<int>(from);
    for (const auto& w : waits_on) {
      if (waits_on.count(w.second) == 0) {
        culprit = w.second;
        break;
      }
    }
    const uint32_t c = static_cast<uint32_t>(culprit);
    return Fail(culprit, Named(c, Status(StatusCode::kDeadlineExceeded,
                                         "made no progress within the step deadline of " +
                                             std::to_string(options_.step_timeout_ms) + " ms")));
  }
}

Result<Frame> LinkContext::NextFromNeighbour(std::size_t i, Deadline deadline) {
  Link* want = links_[i].get();
  const int n = static_cast<int>(ids_.size());
  for (;;) {
    Frame frame;
    uint32_t sender = neighbours_[i].rank;
    Status closed;
    int closed_rank = -1;
    bool left = false;
    {
      std::unique_lock<std::mutex> lock(signal_->mutex);
      auto other_event = [&] {
        for (const auto& g : links_) {
          if (g.get() != want && (g->front_is_error() || (g->closed() && !g->left_ring()))) return true;
        }
        return false;
      };
      Wait(lock, deadline, [&] {
        return want->has_frame() || want->closed() || want->left_ring() || other_event();
      });
      // Failure reports first, from any neighbour (they may sit behind data).
      for (std::size_t k = 0; k < links_.size() && frame.kind() == MessageKind::kNone; ++k) {
        if (links_[k]->TakeError(&frame)) sender = neighbours_[k].rank;
      }
      if (frame.kind() == MessageKind::kNone) {
        if (want->has_frame()) {
          frame = want->TakeFrame();
        } else if (want->left_ring()) {
          left = true;
        } else {
          for (std::size_t k = 0; k < links_.size(); ++k) {
            const Link& g = *links_[k];
            if (g.closed() && !g.left_ring()) {
              closed = g.close_reason();
              closed_rank = static_cast<int>(neighbours_[k].rank);
              if (k == i) break;
            }
          }
        }
      }
    }
    if (frame.kind() == MessageKind::kError) {
      auto e = transport::DecodeError(frame);
      if (!e.ok()) return Fail(static_cast<int>(sender), Named(sender, e.status()));
      Report report;
      if (!ParseReport(e->message, &report) || report.a < 0 || report.a >= n) {
        return Fail(static_cast<int>(sender), Named(sender, transport::ToStatus(*e)));
      }
      if (report.failed) return Fail(report.a, Status(e->code, std::string(e->message)));
      continue;  // suspicions are a ring matter
    }
    if (frame.kind() != MessageKind::kNone) return frame;
    if (left) return Status(StatusCode::kCancelled, Name(neighbours_[i].rank) + " has left");
    if (closed_rank >= 0) return Fail(closed_rank, Named(static_cast<uint32_t>(closed_rank), closed));
    const uint32_t r = neighbours_[i].rank;
    return Fail(static_cast<int>(r), Named(r, Status(StatusCode::kDeadlineExceeded,
                                                     "sent nothing within the step deadline of " +
                                                         std::to_string(options_.step_timeout_ms) + " ms")));
  }
}

// ---- LinkContext: registered buffers ---------------------------------------------

void LinkContext::ExpectPayloads(uint32_t from, const RegisteredBuffer* buffers, std::size_t count) {
  Link* link = LinkFrom(from);
  if (link == nullptr) return;  // not formed: nothing will arrive
  std::lock_guard<std::mutex> lock(signal_->mutex);
  link->buffers().assign(buffers, buffers + count);  // keeps its capacity: no allocation in the steady state
  link->StartPlacement();
}

void LinkContext::ReleaseBuffers(Deadline deadline) {
  const std::vector<Link*>& links = all_links_;
  for (Link* link : links) ReleasePlaced(*link, deadline);
  // A link's slots are released once its queued frames are in the socket (or
  // dropped at its close); only then nothing reads the caller's memory.
  auto released = [](Link* link) {
    if (link->closed()) return true;
    for (const auto& slot : link->slots()) {
      if (slot->busy()) return false;
    }
    return true;
  };
  auto all_released = [&] { return std::all_of(links.begin(), links.end(), released); };
  std::unique_lock<std::mutex> lock(signal_->mutex);
  if (all_released()) return;
  // A healthy neighbour takes the last chunks at once; a stalled one gets a
  // short grace past the step deadline, then its link is closed (the group
  // has failed by then anyway).
  const Deadline until = std::max(deadline, DeadlineAfterMs(GraceMs(options_.step_timeout_ms)));
  signal_->waiting_for_sends = true;
  if (!Wait(lock, until, all_released)) {
    std::vector<std::shared_ptr<Connection>> stalled;
    for (Link* link : links) {
      if (!released(link) && link->connection()) stalled.push_back(link->connection());
    }
    lock.unlock();
    for (const auto& c : stalled) {
      c->Abort(Status(StatusCode::kDeadlineExceeded, "ring chunks not sent within the step deadline"));
    }
    lock.lock();
    // Once closed, the socket reads nothing more from the caller's memory.
    Wait(lock, DeadlineAfterMs(5000), all_released);
  }
  signal_->waiting_for_sends = false;
}

void LinkContext::ReleasePlaced(Link& link, Deadline deadline) {
  std::unique_lock<std::mutex> lock(signal_->mutex);
  if (link.StopPlacement()) return;
  // A chunk is arriving into a registered buffer (only after a failure: on
  // success every registered chunk has been taken). Let it finish, or close
  // the link.
  const Deadline until = std::max(deadline, DeadlineAfterMs(GraceMs(options_.step_timeout_ms)));
  if (!Wait(lock, until, [&] { return !link.placing(); })) {
    std::shared_ptr<Connection> c = link.connection();
    lock.unlock();
    if (c) c->Abort(Status(StatusCode::kDeadlineExceeded, "ring chunk not received within the step deadline"));
    lock.lock();
    // Once closed, the socket writes nothing more into the buffer.
    Wait(lock, DeadlineAfterMs(5000), [&] { return !link.placing(); });
  }
}

}  // namespace internal
}  // namespace peer
}  // namespace fedrt
