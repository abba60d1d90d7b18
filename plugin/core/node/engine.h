// The node agent's engine, independent of gRPC and HTTP: the facade the
// server, the metrics and shmkeeperd's main use, assembled from one object
// per concern (each header states its contract):
//   ScanLoop        (scan_loop.h)       when to scan and how deep;
//   Scanner         (node_scan.h)       a scan: pods, segments, verdicts;
//   SnapshotStore   (snapshot_store.h)  the published snapshot, its events
//                                       (DiffSnapshots, event_hub.h), the scan count;
//   Reclaimer       (reclaimer.h)       auto-reclaim and requests, their log and counters;
//   DatagramIntake  (datagram_intake.h) the event socket's datagrams;
//   queries         (pod_query.h)       pods and leaks of a snapshot.
// The Agent itself runs one scan at a time (scan_mu_): reconcile, the scan,
// labels and peaks, publication, auto-reclaim; and applies reloads.
//
// Locks, in the order they may be taken: scan_mu_, then cfg_mu_; each part's
// own mutex is a leaf (held for no call out of the part). The clang build
// checks the annotations (base/mutex.h).
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/os.h"
#include "base/status.h"
#include "decide/config.h"
#include "node/datagram_intake.h"
#include "node/event_hub.h"
#include "node/node_events.h"
#include "node/node_scan.h"
#include "node/nri_stats.h"
#include "node/observer.h"
#include "node/pod_query.h"
#include "node/reclaim.h"
#include "node/reclaimer.h"
#include "node/reconcile.h"
#include "node/reporter.h"
#include "node/scan_loop.h"
#include "node/selectors.h"
#include "node/snapshot_store.h"

namespace shmkeeper {

// How the agent lists pod sandboxes over the CRI (the client lives with the
// gRPC code) and where it reports what it did. Every scan lists them once:
// their labels go on the pods; in agent-only mode (agent.reconcile, `resize`)
// their /dev/shm is sized first.
struct Reconciler {
  std::function<Result<std::vector<CriSandbox>>()> list_sandboxes;
  // Called for each resize, each sandbox whose size cannot be applied (once
  // per sandbox) and a failing CRI listing (once per distinct error).
  std::function<void(const ReconcileResult&)> report;
  bool resize = true;
};

// Where the engine reports what an operator must be able to find later
// (removals, refused datagrams). Called from any of the agent's threads.
using AgentLog = Reporter::Log;

// Counters beside the snapshots, for /metrics.
struct AgentCounters {
  std::map<std::string, int64_t> datagrams_rejected;  // by ClaimRejection name
  std::map<SkipReason, int64_t> reclaim_kept;         // by SkippedLeak::reason
  int64_t reclaim_errors = 0;
  int64_t reclaim_raced = 0;
  int64_t reclaim_pinned = 0;
  int64_t restored_from_quarantine = 0;
  // Scans that walked /proc, by why: startup, overflow, audit, scan (the
  // scan mode's every scan), request (ScanNow).
  std::map<std::string, int64_t> walks;
};

// What the agent knows of its policy file.
struct ConfigFileState {
  std::string path;                                // the file read ("" = built-in defaults)
  bool valid = true;                               // false: the last (re)load failed and the previous policy runs on
  std::string error;                               // the loader's line ("<path>:<line>:<col>: ...") when !valid
  std::chrono::system_clock::time_point loaded{};  // when the running policy was read
  int64_t reloads = 0;                             // successful reloads since start
  int64_t reload_failures = 0;                     // reloads refused for an invalid file
  std::string loaded_text;                         // the file's text when the running policy was read (to tell an edit)
};

class Agent {
 public:
  // `scan.reporter` (a fresh one when null) receives the errors the engine,
  // its scans, its event socket and its watcher survive; `os` (never null,
  // outlives the agent) is what reconcile sizes /dev/shm through.
  // `scan.clock` (RealClock() when null; outlives the agent) is the one
  // clock of every part: the scan loop's intervals, the scans' grace, the
  // reclaim's settle and deadlines, the intake's and a fresh reporter's log
  // windows, the observer's times (unless its options name another).
  Agent(const Config& config, ScanOptions scan, Os* os = Os::Default());
  ~Agent();

  // Where log lines go, the reporter's included. REQUIRES: called before
  // Start(). The default drops messages.
  void SetLog(AgentLog log);

  // REQUIRES: called before Start().
  void SetReconciler(Reconciler r) SHMK_EXCLUDES(scan_mu_) {
    MutexLock l(&scan_mu_);
    reconciler_ = std::move(r);
  }
  // Where configuration problems found while scanning go (each distinct one
  // once), e.g. RuntimeRootWarnings. REQUIRES: called before Start().
  void SetWarningSink(std::function<void(const std::string&)> warn) SHMK_EXCLUDES(scan_mu_) {
    MutexLock l(&scan_mu_);
    warn_ = std::move(warn);
  }

  // This process's registration among the node's agents (probers.h): the
  // observer does not take the opens of the other processes registered there
  // for use. Null (the default): every other process's opens are use.
  // REQUIRES: called before Start().
  void SetProbers(std::shared_ptr<ProberRegistry> probers) { probers_ = std::move(probers); }
  // The observer's options (tests: its seams). REQUIRES: called before Start().
  void SetObserverOptions(ObserverOptions opts) { observer_opts_ = std::move(opts); }

  // Starts the observer (fanotify; agent.observer), the scan loop (the first
  // scan, a walk of /proc, runs before Start returns), the event socket
  // receiver (agent.eventSocket) and the inotify watcher. Returns the first
  // error of the event socket (the scans run regardless). Without fanotify
  // the agent scans as before and says so once in the log.
  Status Start() SHMK_EXCLUDES(scan_mu_, cfg_mu_);
  // "fanotify" or "scan": how holders are learnt (valid after Start).
  const char* observer_mode() const { return observer_ ? "fanotify" : "scan"; }
  // The observer's counters (zero in scan mode).
  ObserverCounters observer_counters() const { return observer_ ? observer_->counters() : ObserverCounters{}; }
  // Asks for a scan soon (at most one per second beyond the periodic ones).
  void Poke() { loop_->Poke(); }
  const CreatorBook& creators() const { return *creators_; }
  void Stop();
  // Runs one scan now and publishes it (tests and the CLI's --once).
  void ScanNow() SHMK_EXCLUDES(scan_mu_);

  std::shared_ptr<const NodeSnapshot> Snapshot() const { return snapshots_->Current(); }
  bool Ready() const { return Snapshot() != nullptr; }
  // Scans published since construction (the startup scan, the loop's,
  // ScanNow's and Reclaim's each count one), for tests that wait for "scan N
  // completed" instead of wall time. Thread-safe.
  uint64_t scans_completed() const { return snapshots_->scans_completed(); }
  // Waits until scans_completed() > `after` or `timeout` passed; returns
  // whether it did. Blocks only on the publication lock. Thread-safe.
  bool WaitForScan(uint64_t after, std::chrono::milliseconds timeout) const {
    return snapshots_->WaitForScan(after, timeout);
  }

  Result<std::vector<PodRecord>> ListPods(const PodFilter& filter) const;
  // `uid`, "namespace/name" (or a plain container's name), or a container id
  // (full or a unique prefix of at least 4 characters).
  Result<PodRecord> FindPod(const std::string& uid, const std::string& name, const std::string& container_id) const;
  std::vector<LeakRecord> ListLeaks(const std::string& ns, const std::string& pod) const;
  // Reclaims the leaks of `pod` ("" = all) in `ns` ("" = all) whose paths are
  // in `paths` (empty = all) after a fresh scan (published, with reconcile and
  // auto-reclaim as every scan). A dry run reads only: it answers from the
  // snapshot published last (claim and holder checks run now) and publishes,
  // reconciles, resizes and removes nothing. Nothing is removed once
  // `deadline` (the client's) has passed: the files not yet removed are kept
  // with reason "deadline" (kFailedPrecondition when it passed before the
  // reclaim began). Waits for a running scan to end.
  Result<ReclaimOutcome> Reclaim(bool dry_run, const std::string& ns, const std::string& pod,
                                 const std::vector<std::string>& paths, Deadline deadline = Deadline::max())
      SHMK_EXCLUDES(scan_mu_);

  EventHub& events() { return events_; }
  // The running policy: a copy, as Reload may change it. Thread-safe.
  Config config() const SHMK_EXCLUDES(cfg_mu_);
  // Applies a policy loaded again (SIGHUP): shm.*, leaks.reclaim,
  // agent.scanInterval and log.level take effect at once (the next scan);
  // returns the keys (ConfigToJson paths) that changed but are read only at
  // start (sockets, addresses, roots, leaks.grace, ...): they wait for a
  // restart. Waits for a running scan to end. Thread-safe.
  std::vector<std::string> Reload(const Config& next) SHMK_EXCLUDES(scan_mu_, cfg_mu_);
  // The policy file's state as the last load or reload found it, for
  // `shmkeeper status` and shmkeeper_config_valid. Thread-safe.
  void SetConfigFileState(ConfigFileState state) SHMK_EXCLUDES(cfg_mu_);
  ConfigFileState config_file_state() const SHMK_EXCLUDES(cfg_mu_);
  int64_t reclaimed_total() const { return reclaimer_->reclaimed_total(); }
  int64_t reclaimed_bytes_total() const { return reclaimer_->reclaimed_bytes_total(); }
  AgentCounters counters() const SHMK_EXCLUDES(counters_mu_);
  // Counters of the errors survived (names in reporter.h), for /metrics.
  const Reporter& reporter() const { return *reporter_; }
  // The NRI plugin's connection and counters (agent.nri.socket), for
  // /metrics and `shmkeeper status`; the plugin itself is the caller's.
  NriStats& nri_stats() const { return *nri_; }
  // The agent's clock (ScanOptions::clock): what a request's deadline is a
  // time of. Thread-safe.
  Clock* clock() const { return clock_; }

 private:
  // Every member is initialised from the constructor's arguments alone (the
  // options made whole by WithDefaults first), never from another member, and
  // the parts that call back into the agent are built in the constructor's
  // body in the order written there: no behaviour depends on the order of
  // these declarations (clang's -Wuninitialized and -Wreorder, on in the
  // build, refuse a member initialised from one not yet built). Destruction
  // order is explicit too: ~Agent stops the threads (Stop), then the observer.
  struct Defaulted {
    ScanOptions scan;
  };
  static Defaulted WithDefaults(ScanOptions scan);
  Agent(const Config& config, Defaulted scan, Os* os);

  // A scan, published, then auto-reclaim. `reason` names a walk for the
  // counters. `for_reclaim`: a reclaim request acts on its leaked verdicts
  // (as auto-reclaim does): they are judged on node facts read by this scan.
  void ScanLocked(ScanDepth depth, const char* reason, bool for_reclaim = false) SHMK_REQUIRES(scan_mu_)
      SHMK_EXCLUDES(cfg_mu_);
  // Lists the sandboxes; in agent-only mode sizes them before they are measured.
  std::vector<CriSandbox> Reconcile(const Config& config) SHMK_REQUIRES(scan_mu_);
  void WarnOnce(const std::vector<std::string>& warnings) SHMK_REQUIRES(scan_mu_);
  std::vector<std::string> WatchPaths(const NodeSnapshot& snap) const;
  // What only the scan side keeps of a (real) reclaim: files whose lease the
  // kernel refused stay held until a probe succeeds (Scanner::NoteLeaseRefused).
  void NoteLeaseRefusals(const ReclaimOutcome& out) SHMK_REQUIRES(scan_mu_);

  Os* const os_;
  Clock* const clock_;
  const std::shared_ptr<Reporter> reporter_;
  const std::shared_ptr<NriStats> nri_ = std::make_shared<NriStats>();
  const std::shared_ptr<CreatorBook> creators_;  // one book, shared by the scanner and the intake
  const std::vector<std::string> runtime_roots_;
  // The containers reconcile sizes, parsed again only when their state
  // changed (agent.reconcile runs at every scan: not a JSON parse per
  // container each time).
  ContainerDiscovery reconcile_discovery_ SHMK_GUARDED_BY(scan_mu_);
  const bool read_only_;                                // never reclaims (ScanOptions::read_only)
  AgentLog log_ = [](LogLevel, const std::string&) {};  // set before Start

  mutable Mutex cfg_mu_;                    // after scan_mu_
  Config config_ SHMK_GUARDED_BY(cfg_mu_);  // written by Reload with scan_mu_ held too
  ConfigFileState file_state_ SHMK_GUARDED_BY(cfg_mu_);

  Mutex scan_mu_;  // one scan (or reclaim, or reload) at a time
  Scanner scanner_ SHMK_GUARDED_BY(scan_mu_);
  Reconciler reconciler_ SHMK_GUARDED_BY(scan_mu_);
  std::function<void(const std::string&)> warn_ SHMK_GUARDED_BY(scan_mu_);
  std::set<std::string> reported_ SHMK_GUARDED_BY(scan_mu_);  // reconcile errors and warnings already reported
  std::map<std::string, int64_t> peak_used_ SHMK_GUARDED_BY(scan_mu_);  // pod uid -> most used bytes seen

  // Counters of the scan side (the parts count their own).
  mutable Mutex counters_mu_;
  std::map<std::string, int64_t> walks_ SHMK_GUARDED_BY(counters_mu_);
  int64_t restored_from_quarantine_ SHMK_GUARDED_BY(counters_mu_) = 0;

  // The parts, built in the constructor's body.
  EventHub events_;
  std::unique_ptr<SnapshotStore> snapshots_;
  std::unique_ptr<Reclaimer> reclaimer_;
  std::unique_ptr<DatagramIntake> intake_;
  std::unique_ptr<ScanLoop> loop_;
  // Built by Start.
  std::unique_ptr<EventReceiver> receiver_;
  std::unique_ptr<ChangeWatcher> watcher_;
  std::shared_ptr<ProberRegistry> probers_;  // SetProbers
  std::unique_ptr<Observer> observer_;       // null in scan mode
  ObserverOptions observer_opts_;            // set before Start
};

}  // namespace shmkeeper
