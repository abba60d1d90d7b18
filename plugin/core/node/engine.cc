#include "node/engine.h"

#include <malloc.h>

#include <algorithm>
#include <map>
#include <set>

#include "base/bytes.h"

namespace shmkeeper {
namespace {

std::string PodName(const PodKey& k) { return k.ns.empty() ? k.name : k.ns + "/" + k.name; }

AgentEvent MakeEvent(EventKind kind, const PodKey& pod, std::string msg) {
  AgentEvent e;
  e.time = std::chrono::system_clock::now();
  e.kind = kind;
  e.pod = pod;
  e.message = std::move(msg);
  return e;
}

// Events from the difference between two snapshots.
std::vector<AgentEvent> Diff(const NodeSnapshot* prev, const NodeSnapshot& next) {
  std::vector<AgentEvent> out;
  std::map<std::string, const PodRecord*> before;
  if (prev) {
    for (const PodRecord& p : prev->pods) before[p.key.uid] = &p;
  }
  std::set<std::string> seen;
  for (const PodRecord& p : next.pods) {
    seen.insert(p.key.uid);
    auto it = before.find(p.key.uid);
    const PodRecord* old = it == before.end() ? nullptr : it->second;
    if (!old && prev) out.push_back(MakeEvent(EventKind::kPodStarted, p.key, PodName(p.key) + " started"));
    if (old && old->size_bytes && p.size_bytes && old->size_bytes != p.size_bytes) {
      AgentEvent e =
          MakeEvent(EventKind::kResizeApplied, p.key,
                    "/dev/shm resized from " + FormatSize(old->size_bytes) + " to " + FormatSize(p.size_bytes));
      e.bytes = p.size_bytes;
      out.push_back(e);
    }
    for (int pct : {80, 95}) {
      auto over = [pct](const PodRecord& r) { return r.size_bytes > 0 && r.used_bytes * 100 >= r.size_bytes * pct; };
      if (over(p) && !(old && over(*old))) {  // crossing it, or over it at first sight
        AgentEvent e = MakeEvent(EventKind::kUsageHigh, p.key,
                                 "/dev/shm " + std::to_string(pct) + "% full (" + FormatSize(p.used_bytes) + " of " +
                                     FormatSize(p.size_bytes) + ")");
        e.bytes = p.used_bytes;
        e.threshold_percent = pct;
        out.push_back(e);
      }
    }
  }
  for (const auto& [uid, p] : before) {
    if (!seen.count(uid)) out.push_back(MakeEvent(EventKind::kPodStopped, p->key, PodName(p->key) + " stopped"));
  }
  std::set<std::pair<std::string, int32_t>> known;
  if (prev) {
    for (const LeakRecord& l : prev->leaks) {
      if (l.state == LeakState::kLeaked) known.insert({l.pod.uid + l.path, l.sysv_id});
    }
  }
  for (const LeakRecord& l : next.leaks) {
    // Only a leaked verdict is news: unheld segments (scratch files, a
    // creator still running) are listed by ListLeaks, not announced.
    if (l.state != LeakState::kLeaked || known.count({l.pod.uid + l.path, l.sysv_id})) continue;
    AgentEvent e = MakeEvent(EventKind::kLeakFound, l.pod,
                             std::string(LeakStateName(l.state)) + " segment " +
                                 (l.sysv_id >= 0 ? "sysv:" + std::to_string(l.sysv_id) : l.path) + " (" +
                                 FormatSize(l.bytes) + ")");
    e.bytes = l.bytes;
    e.path = l.path;
    out.push_back(e);
  }
  return out;
}

bool PodMatches(const PodKey& k, const std::string& ns, const std::string& pod) {
  if (!ns.empty() && k.ns != ns) return false;
  return pod.empty() || k.name == pod || k.uid == pod;
}

}  // namespace

// ---- Agent -----------------------------------------------------------------

namespace {
ScanOptions WithCreators(ScanOptions scan) {
  if (!scan.creators) scan.creators = std::make_shared<CreatorBook>();
  if (!scan.reporter) scan.reporter = std::make_shared<Reporter>();
  return scan;
}
}  // namespace

Agent::Agent(const Config& config, ScanOptions scan, Os* os)
    : config_(config),
      os_(os),
      reporter_((scan = WithCreators(std::move(scan))).reporter),
      scanner_(scan),  // one CreatorBook, shared with the receiver; one Reporter for all
      runtime_roots_(scan.runtime_roots),
      agent_id_(scan.agent_id),
      read_only_(scan.read_only),
      creators_(scan.creators) {}

void Agent::SetLog(AgentLog log) {
  reporter_->SetLog(log);
  log_ = std::move(log);
}

Agent::~Agent() { Stop(); }

Status Agent::Start() {
  Status events = Status::Ok();
  if (!config_.agent.event_socket.empty()) {
    receiver_ = std::make_unique<EventReceiver>(
        config_.agent.event_socket, [this](pid_t pid, uid_t uid, const std::string& p) { OnDatagram(pid, uid, p); },
        reporter_.get());
    events = receiver_->Start().WithContext("event socket");
    if (!events.ok()) receiver_.reset();
  }
  if (config_.agent.observe) {
    observer_ = std::make_unique<Observer>([this] { Poke(); }, [this] { Poke(); }, reporter_.get());
    if (Status observing = observer_->Start(); !observing.ok()) {
      log_(LogLevel::kWarn, "fanotify is unavailable (" + observing.message() +
                                "): falling back to scanning /proc for holders on every scan (see "
                                "docs/agent.md#kernel-requirements)");
      observer_.reset();
    } else {
      scanner_.SetObserver(observer_.get());
    }
  } else {
    log_(LogLevel::kInfo, "agent.observer is scan: holders are found by scanning /proc on every scan");
  }
  watcher_ = std::make_unique<ChangeWatcher>([this] { Poke(); }, reporter_.get());
  if (Status watching = watcher_->Start(); !watching.ok()) {
    reporter_->Report(kWatcherErrors, "inotify watcher not started, event-driven scans are off (scans run every " +
                                          std::to_string(config_.agent.scan_interval.count()) +
                                          "ms): " + watching.message());
    watcher_.reset();
  }
  {
    std::lock_guard<std::mutex> scan_lock(scan_mu_);
    ScanLocked(ScanDepth::kWalk, "startup");
  }
  loop_ = std::thread([this] { Loop(); });
  return events;
}

void Agent::Poke() {
  {
    std::lock_guard<std::mutex> l(loop_mu_);
    poked_ = true;
  }
  loop_cv_.notify_all();
}

void Agent::OnDatagram(pid_t sender, uid_t uid, const std::string& payload) {
  Json doc = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
  std::string type = StringField(doc, "type");
  if (type == "create") {
    ClaimRejection why = ClaimRejection::kMalformed;
    Result<VerifiedClaim> claim = VerifyCreatorClaim(doc, SenderCreds{sender, uid}, &why);
    if (!claim.ok()) return RejectDatagram(why, sender, claim.status().message());
    Status recorded = creators_->Record(claim->key, std::move(claim->record));
    if (!recorded.ok()) RejectDatagram(ClaimRejection::kLiveCreator, sender, recorded.message());
    return;
  }
  if (type == "stopped" || type == "unlink" || type == "memfd") {
    Poke();  // the node changed
    return;
  }
  RejectDatagram(ClaimRejection::kMalformed, sender, "unknown datagram");
}

void Agent::RejectDatagram(ClaimRejection why, pid_t sender, const std::string& detail) {
  constexpr auto kWindow = std::chrono::minutes(1);
  constexpr int kLinesPerWindow = 10;
  std::string line;
  {
    std::lock_guard<std::mutex> l(counters_mu_);
    counters_.datagrams_rejected[ClaimRejectionName(why)]++;
    auto now = std::chrono::steady_clock::now();
    if (now - reject_window_ >= kWindow) {
      if (reject_dropped_) line = std::to_string(reject_dropped_) + " more refused datagrams were not logged; ";
      reject_window_ = now;
      reject_logged_ = 0;
      reject_dropped_ = 0;
    }
    if (reject_logged_ >= kLinesPerWindow) {
      reject_dropped_++;
      return;
    }
    reject_logged_++;
  }
  log_(LogLevel::kWarn, line + "refused a datagram from pid " + std::to_string(sender) + " (" +
                            ClaimRejectionName(why) + "): " + detail);
}

AgentCounters Agent::counters() const {
  std::lock_guard<std::mutex> l(counters_mu_);
  return counters_;
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
  {
    std::lock_guard<std::mutex> l(loop_mu_);
    stop_ = true;
  }
  loop_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  receiver_.reset();
  watcher_.reset();
}

void Agent::Loop() {
  constexpr auto kMinGap = std::chrono::seconds(1);  // event-driven scans: at most one a second
  using Steady = std::chrono::steady_clock;
  std::unique_lock<std::mutex> l(loop_mu_);
  auto last = Steady::now();
  auto next_audit = last + config_.agent.audit_interval;
  constexpr auto kOverflowWalkGap = std::chrono::seconds(10);
  auto last_overflow_walk = Steady::time_point{};
  while (!stop_) {
    auto wait = std::chrono::duration_cast<Steady::duration>(config_.agent.scan_interval);
    if (observer_) wait = std::max(Steady::duration::zero(), std::min(wait, next_audit - Steady::now()));
    loop_cv_.wait_for(l, wait, [this] { return stop_.load() || poked_; });
    if (stop_) break;
    if (poked_) loop_cv_.wait_until(l, last + kMinGap, [this] { return stop_.load(); });
    if (stop_) break;
    poked_ = false;
    // With the observer, /proc is walked only after lost events and for the
    // slow audit; every other scan asks the observer.
    ScanDepth depth = ScanDepth::kWalk;
    const char* reason = "scan";
    if (observer_) {
      depth = ScanDepth::kObserve;
      // Lost events make every cached verdict stale, so scans re-probe every
      // file until then; the walk (pids, O_PATH holders) runs at most once
      // per kOverflowWalkGap, so that a flood of opens cannot buy a walk a second.
      if (Steady::now() - last_overflow_walk >= kOverflowWalkGap && observer_->TakeOverflow()) {
        last_overflow_walk = Steady::now();
        depth = ScanDepth::kWalk;
        reason = "overflow";
      } else if (Steady::now() >= next_audit) {
        depth = ScanDepth::kWalk;
        reason = "audit";
      }
      if (depth == ScanDepth::kWalk) next_audit = Steady::now() + config_.agent.audit_interval;
    }
    l.unlock();
    {
      std::lock_guard<std::mutex> scan_lock(scan_mu_);
      ScanLocked(depth, reason);
    }
    last = Steady::now();
    l.lock();
  }
}

// Lists the sandboxes; in agent-only mode sizes them before they are measured.
std::vector<CriSandbox> Agent::Reconcile() {
  Result<std::vector<CriSandbox>> sandboxes = reconciler_.list_sandboxes();
  std::vector<ReconcileResult> results;
  if (!sandboxes.ok()) {
    ReconcileResult failed;
    failed.status = sandboxes.status().WithContext("list pod sandboxes");
    results.push_back(std::move(failed));
  } else if (reconciler_.resize) {
    results = ReconcileSandboxes(*sandboxes, DiscoverContainers(runtime_roots_), config_, *os_);
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
  std::lock_guard<std::mutex> scan_lock(scan_mu_);
  ScanLocked(ScanDepth::kWalk, "request");
}

void Agent::ScanLocked(ScanDepth depth, const char* reason) {
  std::vector<CriSandbox> sandboxes;
  if (reconciler_.list_sandboxes) sandboxes = Reconcile();
  WarnOnce(RuntimeRootWarnings(runtime_roots_));
  // A walk audits the observer's state: events queued until now first.
  if (observer_ && depth == ScanDepth::kWalk) observer_->Drain();
  NodeSnapshot snap = scanner_.Scan(depth);
  if (snap.walked) {
    std::lock_guard<std::mutex> l(counters_mu_);
    counters_.walks[reason]++;
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
    std::lock_guard<std::mutex> l(counters_mu_);
    counters_.restored_from_quarantine += snap.restored_from_quarantine;
  }
  auto next = std::make_shared<const NodeSnapshot>(std::move(snap));
  if (watcher_) watcher_->SetPaths(WatchPaths(*next), runtime_roots_);
  Publish(next);
  AutoReclaim(*next);
  ::malloc_trim(0);  // give the previous snapshot's and the scan's memory back
}

void Agent::Publish(std::shared_ptr<const NodeSnapshot> next) {
  std::shared_ptr<const NodeSnapshot> prev;
  {
    std::lock_guard<std::mutex> l(mu_);
    prev = snapshot_;
    snapshot_ = next;
  }
  events_.Publish(Diff(prev.get(), *next));
  {
    std::lock_guard<std::mutex> l(mu_);
    scans_completed_++;
  }
  scan_cv_.notify_all();
}

uint64_t Agent::scans_completed() const {
  std::lock_guard<std::mutex> l(mu_);
  return scans_completed_;
}

bool Agent::WaitForScan(uint64_t after, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> l(mu_);
  return scan_cv_.wait_for(l, timeout, [&] { return scans_completed_ > after; });
}

std::shared_ptr<const NodeSnapshot> Agent::Snapshot() const {
  std::lock_guard<std::mutex> l(mu_);
  return snapshot_;
}

void Agent::AutoReclaim(const NodeSnapshot& snap) {
  std::vector<LeakRecord> due;
  for (const LeakRecord& l : snap.leaks) {
    bool on = config_.leaks.reclaim == LeakReclaim::kAuto || l.reclaim_auto;
    if (on && l.reclaimable) due.push_back(l);
  }
  if (!due.empty() && !read_only_) RecordReclaim(ReclaimLeaks(due, /*dry_run=*/false, "/proc", agent_id_));
}

namespace {

std::string Where(const LeakRecord& l) { return l.sysv_id >= 0 ? "sysv:" + std::to_string(l.sysv_id) : l.path; }

// One line per removal: what, where, and on which evidence.
std::string RemovalLine(const LeakRecord& l) {
  std::string pod = l.pod.ns.empty() ? l.pod.name : l.pod.ns + "/" + l.pod.name;
  return "reclaimed " + Where(l) + " of " + pod + ": inode " + std::to_string(l.key.dev) + ":" +
         std::to_string(l.key.ino) + ", " + std::to_string(l.bytes) + " bytes, creator pid " +
         std::to_string(l.creator_pid) + (l.creator_command.empty() ? "" : " (" + l.creator_command + ")") +
         " dead, evidence " + l.creator_source + ", unheld for " +
         std::to_string(static_cast<int64_t>(l.unheld_for_sec)) + "s";
}

}  // namespace

void Agent::RecordReclaim(const ReclaimOutcome& out) {
  std::vector<AgentEvent> events;
  for (const LeakRecord& l : out.reclaimed) {
    log_(LogLevel::kInfo, RemovalLine(l));
    AgentEvent e =
        MakeEvent(EventKind::kLeakReclaimed, l.pod, "reclaimed " + Where(l) + " (" + FormatSize(l.bytes) + ")");
    e.bytes = l.bytes;
    e.path = l.path;
    events.push_back(e);
  }
  {
    std::lock_guard<std::mutex> lock(counters_mu_);
    for (const SkippedLeak& k : out.skipped) {
      if (k.reason == SkipReason::kVerdict) continue;  // not a candidate: nothing was refused
      if (k.reason == SkipReason::kPinned) {           // removed, but not freed
        counters_.reclaim_pinned++;
        continue;
      }
      counters_.reclaim_kept[k.reason]++;
      if (k.reason == SkipReason::kError) counters_.reclaim_errors++;
    }
    counters_.reclaim_raced += out.raced;
  }
  for (const SkippedLeak& k : out.skipped) {
    if (k.reason == SkipReason::kError || k.reason == SkipReason::kPinned) {
      log_(LogLevel::kError,
           "reclaim of " + Where(k.leak) + (k.reason == SkipReason::kError ? " failed: " : ": ") + k.message);
    }
    if (k.lease_refused && k.leak.sysv_id < 0) scanner_.NoteLeaseRefused(k.leak.key);
  }
  if (out.raced) {
    log_(LogLevel::kError, std::to_string(out.raced) +
                               " removed file(s) were opened by a process whose lookup preceded the quarantine "
                               "rename (see docs/reclaim-safety.md)");
  }
  reclaimed_total_ += static_cast<int64_t>(out.reclaimed.size());
  reclaimed_bytes_total_ += out.freed_bytes;
  events_.Publish(events);
}

Result<std::vector<PodRecord>> Agent::ListPods(const PodFilter& f) const {
  SHMK_ASSIGN_OR_RETURN(std::vector<SelectorTerm> terms, ParseSelector(f.selector));
  std::shared_ptr<const NodeSnapshot> snap = Snapshot();
  std::vector<PodRecord> out;
  if (!snap) return Status::Precondition("the first scan has not finished");
  for (const PodRecord& p : snap->pods) {
    if (!f.ns.empty() && p.key.ns != f.ns) continue;
    if (f.only_with_leaks && p.leaked_bytes == 0) continue;
    if (!MatchesSelector(p, terms)) continue;
    out.push_back(p);
  }
  return out;
}

Result<PodRecord> Agent::FindPod(const std::string& uid, const std::string& name,
                                 const std::string& container_id) const {
  std::shared_ptr<const NodeSnapshot> snap = Snapshot();
  if (!snap) return Status::Precondition("the first scan has not finished");
  if (uid.empty() && name.empty() && container_id.empty()) {
    return Status::Invalid("give a pod uid, a namespace/name, or a container id");
  }
  if (!container_id.empty() && container_id.size() < 4) {
    return Status::Invalid("container id prefix \"" + container_id + "\" is shorter than 4 characters");
  }
  std::vector<const PodRecord*> hits;
  for (const PodRecord& p : snap->pods) {
    bool hit = (!uid.empty() && p.key.uid == uid) || (!name.empty() && PodName(p.key) == name);
    for (const ContainerRecord& c : p.containers) {
      if (!container_id.empty() && c.id.starts_with(container_id)) hit = true;
    }
    if (hit) hits.push_back(&p);
  }
  std::string what = !uid.empty() ? "uid " + uid : !name.empty() ? "name " + name : "container " + container_id;
  if (hits.empty()) return Status::NotFound("no pod with " + what);
  if (hits.size() > 1) return Status::Invalid(what + " matches " + std::to_string(hits.size()) + " pods");
  return *hits.front();
}

std::vector<LeakRecord> Agent::ListLeaks(const std::string& ns, const std::string& pod) const {
  std::vector<LeakRecord> out;
  std::shared_ptr<const NodeSnapshot> snap = Snapshot();
  if (!snap) return out;
  for (const LeakRecord& l : snap->leaks) {
    if (PodMatches(l.pod, ns, pod)) out.push_back(l);
  }
  return out;
}

Result<ReclaimOutcome> Agent::Reclaim(bool dry_run, const std::string& ns, const std::string& pod,
                                      const std::vector<std::string>& paths) {
  if (read_only_ && !dry_run) {
    return Status::Precondition("this agent is read-only (--read-only): another agent owns reclaim on this node");
  }
  // A fresh scan first: reclaim acts on what is true now, not on the last
  // tick; and no scan runs while files are in quarantine. With the observer
  // it does not walk /proc: the candidates' final check does (reclaim.h).
  std::lock_guard<std::mutex> scan_lock(scan_mu_);
  if (observer_) observer_->Drain();  // every use reported until now counts
  ScanLocked(ScanDepth::kObserve, "scan");
  std::vector<LeakRecord> candidates;
  for (const LeakRecord& l : ListLeaks(ns, pod)) {
    // Paths as ListLeaks shows them (names that are not UTF-8 escaped).
    bool listed = std::find(paths.begin(), paths.end(), l.path) != paths.end() ||
                  std::find(paths.begin(), paths.end(), EscapeInvalidUtf8(l.path)) != paths.end();
    if (paths.empty() || listed) candidates.push_back(l);
  }
  ReclaimOutcome out = ReclaimLeaks(candidates, dry_run, "/proc", agent_id_);
  if (!dry_run) RecordReclaim(out);
  return out;
}

}  // namespace shmkeeper
