#include "node/observer.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>

#include "node/observer_internal.h"
#include "scan/lease_probe.h"

namespace shmkeeper {
namespace {

using observer_internal::Remember;

constexpr size_t kBatch = 4096;     // events applied at once (after one look at who else probes)
constexpr size_t kMaxCreators = 8;  // recent creators remembered per tmpfs
constexpr uint64_t kUse = FAN_OPEN | FAN_CLOSE_WRITE | FAN_CLOSE_NOWRITE;
// FAN_ATTRIB: a marked file's link count (its unlink), mode, owner or times.
constexpr uint64_t kChange = FAN_CREATE | FAN_DELETE | FAN_MOVED_FROM | FAN_MOVED_TO | FAN_CLOSE_WRITE | FAN_ATTRIB;

FileUse::Verdict ModelVerdict(ProbeVerdict v) {
  switch (v) {
    case ProbeVerdict::kHeld:
      return FileUse::Verdict::kHeld;
    case ProbeVerdict::kUnheld:
      return FileUse::Verdict::kUnheld;
    case ProbeVerdict::kGone:
      return FileUse::Verdict::kGone;
  }
  return FileUse::Verdict::kFailed;
}

std::string Key(const FileKey& k) { return std::to_string(k.dev) + ":" + std::to_string(k.ino); }

std::string PidList(const std::set<pid_t>& pids) {
  std::string out;
  for (pid_t p : pids) out += (out.empty() ? "" : ", ") + std::to_string(p);
  return out;
}

// Half of fs.fanotify.max_user_marks (shared by root's fanotify groups on the
// node, two agents included) less room for filesystem marks: the inode marks
// of two agents never take the marks a new pod's tmpfs needs (a quarter of
// the limit, at most 1,024 tmpfs); -1 (unlimited: the kernel's ENOSPC still
// stops us) when unreadable.
int64_t DefaultMarkBudget() {
  std::ifstream in("/proc/sys/fs/fanotify/max_user_marks");
  int64_t n = 0;
  if (!(in >> n) || n <= 0) return -1;
  constexpr int64_t kFilesystemMarks = 1024;
  return std::max<int64_t>(0, n / 2 - std::min(kFilesystemMarks, n / 4));
}

}  // namespace

Observer::Observer(std::function<void()> on_change, std::function<void()> on_overflow, Reporter* reporter,
                   ObserverOptions opts)
    : on_change_(std::move(on_change)),
      on_overflow_(std::move(on_overflow)),
      reporter_(reporter),
      opts_(std::move(opts)) {}

Observer::~Observer() {
  if (stop_.valid()) {
    uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
}

void Observer::SetProbers(std::shared_ptr<ProberRegistry> probers, std::function<void(const std::string&)> log) {
  probers_ = std::move(probers);
  probers_log_ = std::move(log);
}

Status Observer::Start() {
  SHMK_ASSIGN_OR_RETURN(fan_, Fanotify::Open());
  max_marks_ = opts_.max_inode_marks ? *opts_.max_inode_marks : DefaultMarkBudget();
  stop_.reset(::eventfd(0, EFD_CLOEXEC));
  if (!stop_.valid()) return Status::FromErrno(errno, "eventfd");
  self_ = ::getpid();
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

std::optional<Observer::TimePoint> Observer::FloorLocked(dev_t dev) const {
  std::optional<TimePoint> floor = floor_;
  auto it = fs_.find(dev);
  if (it != fs_.end() && it->second.floor && (!floor || *it->second.floor > *floor)) floor = it->second.floor;
  return floor;
}

Observer::Use Observer::UseLocked(const Inode& in, dev_t dev) const {
  Use u;
  u.held = in.use.held();
  u.pids = in.use.pids();
  u.holders_pending = in.use.holders() == FileUse::Holders::kPending && in.use.held();
  u.last_activity = in.use.LastActivity(FloorLocked(dev));
  return u;
}

Result<ProbeVerdict> Observer::Probe(int dir_fd, const std::string& name, const FileKey& key) {
  {
    MutexLock l(&mu_);
    counters_.probes++;
  }
  return ProbeLease(dir_fd, name, key, nullptr, [this, &key](int fd) { return MarkForUse(fd, key); });
}

Status Observer::MarkForUse(int fd, const FileKey& key) {
  bool over_budget = false;
  {
    MutexLock l(&mu_);
    if (auto f = fs_.find(key.dev); f != fs_.end() && f->second.all_uses) {
      return Status::Ok();  // every open there is an event already
    }
    auto it = inodes_.find(key);
    bool marked = it != inodes_.end() && it->second.marked;
    over_budget = !marked && max_marks_ >= 0 && counters_.inode_marks >= max_marks_;
  }
  Status s = over_budget ? Status::Precondition("the observer's budget of " + std::to_string(max_marks_) +
                                                " inode marks (half of fs.fanotify.max_user_marks) is spent")
                         : fan_->MarkInode(fd);
  if (s.ok()) {
    MutexLock l(&mu_);
    Inode& in = inodes_[key];
    if (!in.marked) counters_.inode_marks++;
    in.marked = true;
    return Status::Ok();
  }
  // Never a probe-only mode: every open and close on this tmpfs is an event
  // from here on (before the lease is tried, so nothing falls between).
  Status wide = fan_->AllUses(fd);
  if (!wide.ok()) return wide.WithContext("after " + s.message());
  {
    MutexLock l(&mu_);
    FsState& fs = fs_[key.dev];
    if (fs.all_uses) return Status::Ok();
    fs.all_uses = true;
    counters_.mark_fallbacks++;
  }
  if (reporter_) {
    reporter_->Report(kObserverMarkFallbacks, "cannot mark inodes on the tmpfs of device " + std::to_string(key.dev) +
                                                  " (" + s.message() +
                                                  "): watching every open and close there instead (more events)");
  }
  return Status::Ok();
}

Observer::Use Observer::CheckOne(int dir_fd, const std::string& name, const FileKey& key, bool walk) {
  bool walked_empty = false;
  {
    MutexLock l(&mu_);
    Inode& in = inodes_[key];
    if (!in.use.NeedsProbe(FloorLocked(key.dev))) return UseLocked(in, key.dev);
    in.use.ProbeBegan(Now());  // an event from here on makes its verdict stale
    walked_empty = in.use.holders() == FileUse::Holders::kWalkedEmpty;
  }
  Result<ProbeVerdict> v = Probe(dir_fd, name, key);
  if (!v.ok() && reporter_) {
    reporter_->Report(kObserverProbeErrors,
                      "lease probe of " + name + " failed (kept as held): " + v.status().message());
  }
  // Held: by whom (a holder from before the inode's mark has no event).
  std::vector<pid_t> holders;
  if (v.ok() && *v == ProbeVerdict::kHeld) holders = Holders(key);
  bool pending = false;
  if (walk && !walked_empty && v.ok() && *v == ProbeVerdict::kHeld && holders.empty()) {
    // No process it knows of holds it: walk /proc for it, unless it has let
    // go meanwhile (a file created, used and removed at once, found by a
    // listing in passing: its creator closed and removed it before
    // ProcessHolds looked). The newer verdict stands.
    Result<ProbeVerdict> again = Probe(dir_fd, name, key);
    if (again.ok() && *again != ProbeVerdict::kHeld) {
      v = again;
    } else if (std::optional<std::vector<pid_t>> walked = WalkHolders(key)) {
      holders = std::move(*walked);
    } else {
      pending = true;  // the next walk names them (holder_walk_every)
    }
  }
  MutexLock l(&mu_);
  Inode& in = inodes_[key];  // made afresh (stale) if its device was forgotten meanwhile
  in.use.ProbeEnded(!v.ok() ? FileUse::Verdict::kFailed : ModelVerdict(*v), holders, pending);
  // kGone: the name is gone since the directory was read (nobody holds this
  // name); the listing that showed it is stale, and this inode, unmarked,
  // would report no removal: list again.
  if (v.ok() && *v == ProbeVerdict::kGone) fs_[key.dev].layout++;
  Use u = UseLocked(in, key.dev);
  u.probed_now = true;
  u.gone = v.ok() && *v == ProbeVerdict::kGone;
  return u;
}

Observer::Use Observer::Audit(int dir_fd, const std::string& name, const FileKey& key, bool walk_held) {
  std::optional<bool> settled;
  bool prober_closed = false;
  {
    MutexLock l(&mu_);
    FileUse& use = inodes_[key].use;
    settled = use.Settled(FloorLocked(key.dev));
    if (settled) prober_closed = use.prober_closed();
    use.MarkStale();  // Check below probes afresh
  }
  Use fresh = CheckOne(dir_fd, name, key, /*walk=*/false);
  // "Held" by a probe that another agent's overlapping probe answered (its
  // close was not taken for use): a known residue, not a missed event.
  bool overlap = settled && *settled && !fresh.held && prober_closed;
  if (reporter_ && settled && *settled != fresh.held && !overlap) {
    // A real change between the last event and now would have made it
    // dirty (once its event is read): the event-derived verdict was wrong.
    Drain();
    bool again_dirty = false;
    {
      MutexLock l(&mu_);
      again_dirty = inodes_[key].use.stale();
    }
    if (!again_dirty) {
      reporter_->Report(kAuditMissedEvent,
                        "audit: " + name + " (" + Key(key) + ") was " + (*settled ? "held" : "unheld") +
                            " by the observer's events but a fresh probe says " + (fresh.held ? "held" : "unheld"));
    }
  }
  if (reporter_ && walk_held && !fresh.held) {
    reporter_->Report(kAuditWalkOnly, "audit: " + name + " (" + Key(key) +
                                          ") has a holder in /proc that the lease probe does not see (O_PATH, or "
                                          "closed between the two)");
  }
  return fresh;
}

ObserverCounters Observer::counters() const {
  MutexLock l(&mu_);
  ObserverCounters c = counters_;
  c.unmarked =
      std::count_if(fs_.begin(), fs_.end(), [](const auto& kv) { return kv.second.mark == FsState::Mark::kUnmarked; });
  return c;
}

void Observer::OnEvent(const FanEvent& e, TimePoint now, bool* changed) {
  if (e.overflow) {
    floor_ = now;
    counters_.overflows++;
    overflow_pending_ = true;
    for (auto& [_, fs] : fs_) fs.layout++;
    return;
  }
  FsState* fs = e.dev == 0 ? nullptr : MarkedLocked(e.dev);
  if (!fs) return;
  // The agent's own renames and removals (reclaim, quarantine) change what a
  // listing holds too; they are not use.
  if (e.mask & kChange) fs->layout++;
  if (e.pid == self_) return;  // the agent's own probes and reclaim
  if (e.mask & kChange) *changed = true;
  if ((e.mask & FAN_CREATE) && opts_.disarm_creates && fs->creates == FsState::Creates::kArmed) fs->disarm_due = true;
  if ((e.mask & (FAN_CREATE | FAN_MOVED_TO)) && !(e.mask & FAN_ONDIR) && e.pid > 0 && !others_.count(e.pid)) {
    Remember(&fs->creators, e.pid, kMaxCreators);  // the likely holders of files first probed held
  }
  if (!(e.mask & kUse) || (e.mask & FAN_ONDIR)) return;
  if (e.pid > 0 && others_.count(e.pid)) {  // another agent's probe or reclaim
    OnProberUse(e);
    return;
  }
  if (e.ino == 0) {  // cannot tell which file: all of that filesystem
    fs->floor = now;
    return;
  }
  inodes_[FileKey{e.dev, e.ino}].use.OnUse(now, e.pid);
}

void Observer::OnProberUse(const FanEvent& e) {
  counters_.prober_events++;
  if (!(e.mask & (FAN_CLOSE_WRITE | FAN_CLOSE_NOWRITE)) || e.ino == 0) return;
  auto it = inodes_.find(FileKey{e.dev, e.ino});
  if (it == inodes_.end()) return;
  // Its probe may have overlapped ours, which then said "held": once per
  // real event, probe again (no activity, no pid: it is not use).
  it->second.use.OnProberClose();
}

void Observer::RefreshProbers(ProberNews* news) {
  if (!probers_) return;
  Result<std::set<pid_t>> others = probers_->Others();
  if (!others.ok()) {
    news->errors.push_back("cannot tell the node's other agents (their lease probes count as use): " +
                           others.status().message());
  }
  std::set<pid_t> now = others.ok() ? std::move(*others) : std::set<pid_t>{};
  bool moved = false;
  {
    MutexLock l(&mu_);
    moved = now != others_;
    if (moved) {
      others_ = now;
      counters_.other_agents = static_cast<int64_t>(now.size());
    }
  }
  if (moved) {
    news->changes.push_back(now.empty() ? "no other shmkeeperd is registered in " + probers_->path() +
                                              " any more: every other process's opens are use"
                                        : "other shmkeeperd processes registered in " + probers_->path() + ": pid " +
                                              PidList(now) + " (their lease probes are not use)");
  }
}

void Observer::Drain() {
  if (!fan_) return;
  bool changed = false, overflow = false;
  ProberNews news;  // told after drain_mu_ is released (the callbacks may call back)
  {
    // One drain at a time: a caller's drain returns only after every event
    // read so far (by either thread) has been applied.
    MutexLock one(&drain_mu_);
    auto now = Now();
    // Events are applied in batches, each after it was read: who else probes
    // is asked after the events it judges happened. An agent that has exited
    // holds no lock, so a reused pid's events are use (the safe direction).
    std::vector<FanEvent> batch;
    auto apply = [&] {
      if (std::any_of(batch.begin(), batch.end(),
                      [&](const FanEvent& e) { return !e.overflow && e.pid > 0 && e.pid != self_; })) {
        RefreshProbers(&news);
      }
      MutexLock l(&mu_);
      for (const FanEvent& e : batch) {
        counters_.events++;
        OnEvent(e, now, &changed);
        overflow = overflow || e.overflow;
      }
      batch.clear();
    };
    bool ok = fan_->Read([&](const FanEvent& e) {
      batch.push_back(e);
      if (batch.size() >= kBatch) apply();
    });
    apply();
    if (!ok) {
      MutexLock l(&mu_);
      floor_ = now;  // treat a broken read as lost events
      for (auto& [_, fs] : fs_) fs.layout++;
      overflow = true;
      overflow_pending_ = true;
    }
    std::set<dev_t> disarm;
    {
      MutexLock l(&mu_);
      for (auto& [dev, fs] : fs_) {
        if (fs.disarm_due) disarm.insert(dev);
        fs.disarm_due = false;
      }
    }
    for (dev_t dev : disarm) Disarm(dev);
  }
  for (const std::string& e : news.errors) {
    if (reporter_) reporter_->Report(kObserverProberErrors, e);
  }
  for (const std::string& c : news.changes) {
    if (probers_log_) probers_log_(c);
  }
  if (overflow && on_overflow_) on_overflow_();
  if (changed && on_change_) on_change_();
}

void Observer::Run() {
  ::pthread_setname_np(::pthread_self(), "shmk-observer");  // top -H, the benchmarks' per-thread CPU
  for (;;) {
    pollfd fds[2] = {{fan_->fd(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents & POLLIN) return;
    Drain();
    // Let events queue (and merge) for a while: the cost follows activity,
    // not the number of opens.
    pollfd stop = {stop_.get(), POLLIN, 0};
    if (::poll(&stop, 1, static_cast<int>(opts_.drain.count())) > 0) return;
  }
}

}  // namespace shmkeeper
