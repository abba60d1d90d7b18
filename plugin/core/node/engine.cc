#include "node/engine.h"

#include <malloc.h>

#include <algorithm>
#include <map>
#include <set>

namespace shmkeeper {

Agent::Defaulted Agent::WithDefaults(ScanOptions scan) {
  if (!scan.creators) scan.creators = std::make_shared<CreatorBook>();
  if (!scan.clock) scan.clock = RealClock();
  if (!scan.reporter) scan.reporter = std::make_shared<Reporter>(scan.clock);
  return Defaulted{std::move(scan)};
}

Agent::Agent(const Config& config, ScanOptions scan, Os* os) : Agent(config, WithDefaults(std::move(scan)), os) {}

Agent::Agent(const Config& config, Defaulted d, Os* os)
    : os_(os),
      clock_(d.scan.clock),        // one Clock for all
      reporter_(d.scan.reporter),  // one Reporter for all
      creators_(d.scan.creators),  // one CreatorBook, shared with the intake
      runtime_roots_(d.scan.runtime_roots),
      read_only_(d.scan.read_only),
      config_(config),
      scanner_(d.scan) {
  // The parts, in this order: each takes only what is built before it. They
  // log through log_ as SetLog leaves it (before Start).
  Reporter::Log log = [this](LogLevel level, const std::string& line) { log_(level, line); };
  snapshots_ = std::make_unique<SnapshotStore>(&events_);
  reclaimer_ = std::make_unique<Reclaimer>(d.scan.agent_id, read_only_, &events_, log, clock_);
  loop_ = std::make_unique<ScanLoop>(
      config.agent.scan_interval, config.agent.audit_interval,
      [this](ScanDepth depth, const char* reason) {
        MutexLock scan_lock(&scan_mu_);
        ScanLocked(depth, reason);
      },
      clock_);
  intake_ = std::make_unique<DatagramIntake>(
      creators_, [this] { Poke(); }, log, clock_);
}

void Agent::SetLog(AgentLog log) {
  reporter_->SetLog(log);
  log_ = std::move(log);
}

Agent::~Agent() {
  Stop();
  observer_.reset();  // its thread pokes the loop: gone before the loop is
}

Status Agent::Start() {
  Config config = this->config();
  Status events = Status::Ok();
  if (!config.agent.event_socket.empty()) {
    receiver_ = std::make_unique<EventReceiver>(
        config.agent.event_socket,
        [this](pid_t pid, uid_t uid, const std::string& p) { intake_->OnDatagram(pid, uid, p); }, reporter_.get(),
        clock_);
    events = receiver_->Start().WithContext("event socket");
    if (!events.ok()) receiver_.reset();
  }
  if (config.agent.observe) {
    if (observer_opts_.clock == RealClock()) observer_opts_.clock = clock_;  // the agent's, unless a test named another
    observer_ =
        std::make_unique<Observer>([this] { loop_->PokeUsage(); }, [this] { Poke(); }, reporter_.get(), observer_opts_);
    observer_->SetProbers(probers_, [this](const std::string& line) { log_(LogLevel::kInfo, line); });
    if (Status observing = observer_->Start(); !observing.ok()) {
      log_(LogLevel::kWarn, "fanotify is unavailable (" + observing.message() +
                                "): falling back to scanning /proc for holders on every scan (see "
                                "docs/agent.md#kernel-requirements)");
      observer_.reset();
    } else {
      MutexLock scan_lock(&scan_mu_);
      scanner_.SetObserver(observer_.get());
    }
  } else {
    log_(LogLevel::kInfo, "agent.observer is scan: holders are found by scanning /proc on every scan");
  }
  watcher_ = std::make_unique<ChangeWatcher>([this] { Poke(); }, reporter_.get());
  if (Status watching = watcher_->Start(); !watching.ok()) {
    reporter_->Report(kWatcherErrors, "inotify watcher not started, event-driven scans are off (scans run every " +
                                          std::to_string(config.agent.scan_interval.count()) +
                                          "ms): " + watching.message());
    watcher_.reset();
  }
  {
    MutexLock scan_lock(&scan_mu_);
    ScanLocked(ScanDepth::kWalk, "startup");
  }
  ScanLoop::TakeOverflowFn take_overflow;
  if (observer_) take_overflow = [obs = observer_.get()] { return obs->TakeOverflow(); };
  loop_->Start(std::move(take_overflow));
  return events;
}

AgentCounters Agent::counters() const {
  AgentCounters c;
  c.datagrams_rejected = intake_->rejected();
  ReclaimCounters r = reclaimer_->counters();
  c.reclaim_kept = std::move(r.kept);
  c.reclaim_errors = r.errors;
  c.reclaim_raced = r.raced;
  c.reclaim_pinned = r.pinned;
  MutexLock l(&counters_mu_);
  c.restored_from_quarantine = restored_from_quarantine_;
  c.walks = walks_;
  return c;
}

// The pods' shm directories, whose changes are worth an early scan (the
// runtime roots are watched too, with their container directories).
std::vector<std::string> Agent::WatchPaths(const NodeSnapshot& snap) const {
  std::vector<std::string> paths;
  if (observer_) return paths;  // fanotify reports creates and removals there
  for (const PodRecord& p : snap.pods) {
    if (!p.host_dir.empty()) {
      paths.push_back(p.host_dir);
    } else if (p.access_pid > 0 && !p.shares_host_shm) {
      paths.push_back("/proc/" + std::to_string(p.access_pid) + "/root/dev/shm");
    }
  }
  return paths;
}

void Agent::Stop() {
  loop_->Stop();
  receiver_.reset();
  watcher_.reset();
}

std::vector<CriSandbox> Agent::Reconcile(const Config& config) {
  Result<std::vector<CriSandbox>> sandboxes = reconciler_.list_sandboxes();
  std::vector<ReconcileResult> results;
  if (!sandboxes.ok()) {
    ReconcileResult failed;
    failed.status = sandboxes.status().WithContext("list pod sandboxes");
    results.push_back(std::move(failed));
  } else if (reconciler_.resize) {
    results = ReconcileSandboxes(*sandboxes, reconcile_discovery_.Discover(runtime_roots_), config, *os_);
  }
  for (const ReconcileResult& r : results) {
    bool resized = r.status.ok() && r.plan.action == ShmAction::kResize;
    bool new_error = !r.status.ok() && reported_.insert(r.sandbox_id + "\n" + r.status.message()).second;
    if ((resized || new_error) && reconciler_.report) reconciler_.report(r);
    if (!r.record.ok()) WarnOnce({"sandbox " + r.sandbox_id + ": " + r.record.WithContext("sizing record").message()});
  }
  return sandboxes.ok() ? std::move(*sandboxes) : std::vector<CriSandbox>();
}

void Agent::WarnOnce(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) {
    if (warn_ && reported_.insert("warn\n" + w).second) warn_(w);
  }
}

void Agent::ScanNow() {
  MutexLock scan_lock(&scan_mu_);
  ScanLocked(ScanDepth::kWalk, "request");
}

void Agent::ScanLocked(ScanDepth depth, const char* reason, bool for_reclaim) {
  Config config = this->config();  // Reload changes it only with scan_mu_ held: it holds for this scan
  std::vector<CriSandbox> sandboxes;
  if (reconciler_.list_sandboxes) sandboxes = Reconcile(config);
  WarnOnce(RuntimeRootWarnings(runtime_roots_));
  // A walk audits the observer's state: events queued until now first.
  if (observer_ && depth == ScanDepth::kWalk) observer_->Drain();
  bool removes = for_reclaim || (config.leaks.reclaim == LeakReclaim::kAuto && !read_only_);
  NodeSnapshot snap = scanner_.Scan(depth, removes ? VerdictUse::kRemove : VerdictUse::kReport);
  {
    MutexLock l(&counters_mu_);
    if (snap.walked) walks_[reason]++;
    if (snap.evidence_walks) walks_["evidence"] += snap.evidence_walks;
  }
  LabelPodsFromCri(sandboxes, &snap.pods);
  std::map<std::string, int64_t> peaks;  // pods that are gone drop out
  for (PodRecord& p : snap.pods) {
    int64_t& peak = peaks[p.key.uid];
    peak = std::max({peak, p.used_bytes, peak_used_[p.key.uid]});
    p.peak_used_bytes = peak;
  }
  peak_used_ = std::move(peaks);
  if (snap.restored_from_quarantine) {
    log_(LogLevel::kWarn, "renamed " + std::to_string(snap.restored_from_quarantine) +
                              " file(s) back from reclaim quarantine (an interrupted reclaim)");
    MutexLock l(&counters_mu_);
    restored_from_quarantine_ += snap.restored_from_quarantine;
  }
  auto next = std::make_shared<const NodeSnapshot>(std::move(snap));
  if (watcher_) watcher_->SetPaths(WatchPaths(*next), runtime_roots_);
  snapshots_->Publish(next);
  NoteLeaseRefusals(reclaimer_->Auto(*next, config.leaks.reclaim));
  ::malloc_trim(0);  // give the previous snapshot's and the scan's memory back
}

void Agent::NoteLeaseRefusals(const ReclaimOutcome& out) {
  for (const SkippedLeak& k : out.skipped) {
    if (k.lease_refused && k.leak.sysv_id < 0) scanner_.NoteLeaseRefused(k.leak.key);
  }
}

Result<std::vector<PodRecord>> Agent::ListPods(const PodFilter& f) const { return QueryPods(Snapshot().get(), f); }

Result<PodRecord> Agent::FindPod(const std::string& uid, const std::string& name,
                                 const std::string& container_id) const {
  return QueryPod(Snapshot().get(), uid, name, container_id);
}

std::vector<LeakRecord> Agent::ListLeaks(const std::string& ns, const std::string& pod) const {
  return QueryLeaks(Snapshot().get(), ns, pod);
}

Result<ReclaimOutcome> Agent::Reclaim(bool dry_run, const std::string& ns, const std::string& pod,
                                      const std::vector<std::string>& paths, Deadline deadline) {
  if (read_only_ && !dry_run) {
    return Status::Precondition("this agent is read-only (--read-only): another agent owns reclaim on this node");
  }
  if (config().leaks.reclaim == LeakReclaim::kOff && !dry_run) {
    return Status::Precondition("leaks.reclaim is off on this node: no leak is removed, not even on request");
  }
  MutexLock scan_lock(&scan_mu_);  // no scan runs while files are in quarantine (reclaim.h)
  if (clock_->Now() >= deadline) return Status::Precondition("the caller's deadline passed");
  if (dry_run) {
    // Reads only: the leaks of the snapshot published last, their claim and
    // holder checks run now; nothing is published, reconciled, resized,
    // auto-reclaimed, renamed or removed.
    std::shared_ptr<const NodeSnapshot> snap = Snapshot();
    if (!snap) return Status::Precondition("the first scan has not finished");
    return reclaimer_->Request(*snap, /*dry_run=*/true, ns, pod, paths, deadline);
  }
  // A fresh scan first: reclaim acts on what is true now, not on the last
  // tick. With the observer it does not walk /proc: the candidates' final
  // check does (reclaim.h).
  if (observer_) observer_->Drain();  // every use reported until now counts
  ScanLocked(ScanDepth::kObserve, "scan", /*for_reclaim=*/true);
  ReclaimOutcome out = reclaimer_->Request(*Snapshot(), dry_run, ns, pod, paths, deadline);
  NoteLeaseRefusals(out);
  return out;
}

}  // namespace shmkeeper
