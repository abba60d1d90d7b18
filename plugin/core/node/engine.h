// The node agent's engine, independent of gRPC and HTTP: a scan loop that
// publishes immutable NodeSnapshots, pod queries, reclaim, and events.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/os.h"
#include "base/status.h"
#include "decide/config.h"
#include "node/event_hub.h"
#include "node/node_events.h"
#include "node/node_scan.h"
#include "node/observer.h"
#include "node/reclaim.h"
#include "node/reconcile.h"
#include "node/reporter.h"
#include "node/selectors.h"

namespace shmkeeper {

struct PodFilter {
  std::string ns;
  std::string selector;
  bool only_with_leaks = false;
};

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
using AgentLog = std::function<void(LogLevel, const std::string&)>;

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
  Agent(const Config& config, ScanOptions scan, Os* os = Os::Default());
  ~Agent();

  // Where log lines go, the reporter's included. REQUIRES: called before
  // Start(). The default drops messages.
  void SetLog(AgentLog log);

  // REQUIRES: called before Start().
  void SetReconciler(Reconciler r) { reconciler_ = std::move(r); }
  // Where configuration problems found while scanning go (each distinct one
  // once), e.g. RuntimeRootWarnings. REQUIRES: called before Start().
  void SetWarningSink(std::function<void(const std::string&)> warn) { warn_ = std::move(warn); }

  // Starts the observer (fanotify; agent.observer), the scan loop (the first
  // scan, a walk of /proc, runs before Start returns), the event socket
  // receiver (agent.eventSocket) and the inotify watcher. Returns the first
  // error of the event socket (the scans run regardless). Without fanotify
  // the agent scans as before and says so once in the log.
  Status Start();
  // "fanotify" or "scan": how holders are learnt (valid after Start).
  const char* observer_mode() const { return observer_ ? "fanotify" : "scan"; }
  // The observer's counters (zero in scan mode).
  ObserverCounters observer_counters() const { return observer_ ? observer_->counters() : ObserverCounters{}; }
  // Asks for a scan soon (at most one per second beyond the periodic ones).
  void Poke();
  const CreatorBook& creators() const { return *creators_; }
  void Stop();
  // Runs one scan now and publishes it (tests and the CLI's --once).
  void ScanNow();

  std::shared_ptr<const NodeSnapshot> Snapshot() const;
  bool Ready() const { return Snapshot() != nullptr; }
  // Scans published since construction (the startup scan, the loop's,
  // ScanNow's and Reclaim's each count one), for tests that wait for "scan N
  // completed" instead of wall time. Thread-safe.
  uint64_t scans_completed() const;
  // Waits until scans_completed() > `after` or `timeout` passed; returns
  // whether it did. Blocks only on the publication lock. Thread-safe.
  bool WaitForScan(uint64_t after, std::chrono::milliseconds timeout) const;

  Result<std::vector<PodRecord>> ListPods(const PodFilter& filter) const;
  // `uid`, "namespace/name" (or a plain container's name), or a container id
  // (full or a unique prefix of at least 4 characters).
  Result<PodRecord> FindPod(const std::string& uid, const std::string& name, const std::string& container_id) const;
  std::vector<LeakRecord> ListLeaks(const std::string& ns, const std::string& pod) const;
  Result<ReclaimOutcome> Reclaim(bool dry_run, const std::string& ns, const std::string& pod,
                                 const std::vector<std::string>& paths);

  EventHub& events() { return events_; }
  // The running policy: a copy, as Reload may change it. Thread-safe.
  Config config() const;
  // Applies a policy loaded again (SIGHUP): shm.*, leaks.reclaim,
  // agent.scanInterval and log.level take effect at once (the next scan);
  // returns the keys (ConfigToJson paths) that changed but are read only at
  // start (sockets, addresses, roots, leaks.grace, ...): they wait for a
  // restart. Waits for a running scan to end. Thread-safe.
  std::vector<std::string> Reload(const Config& next);
  // The policy file's state as the last load or reload found it, for
  // `shmkeeper status` and shmkeeper_config_valid. Thread-safe.
  void SetConfigFileState(ConfigFileState state);
  ConfigFileState config_file_state() const;
  int64_t reclaimed_total() const { return reclaimed_total_; }
  int64_t reclaimed_bytes_total() const { return reclaimed_bytes_total_; }
  AgentCounters counters() const;
  // Counters of the errors survived (names in reporter.h), for /metrics.
  const Reporter& reporter() const { return *reporter_; }

 private:
  void Loop();
  std::vector<CriSandbox> Reconcile();
  void WarnOnce(const std::vector<std::string>& warnings);
  void OnDatagram(pid_t sender, uid_t uid, const std::string& payload);
  void RejectDatagram(ClaimRejection why, pid_t sender, const std::string& detail);
  // A scan, published, then auto-reclaim. REQUIRES: scan_mu_ held. `reason`
  // names a walk for the counters.
  void ScanLocked(ScanDepth depth, const char* reason);
  std::vector<std::string> WatchPaths(const NodeSnapshot& snap) const;
  void Publish(std::shared_ptr<const NodeSnapshot> next);
  void AutoReclaim(const NodeSnapshot& snap);
  void RecordReclaim(const ReclaimOutcome& out);

  Config config_;  // written by Reload with scan_mu_, loop_mu_ and cfg_mu_ held
  mutable std::mutex cfg_mu_;
  ConfigFileState file_state_;  // guarded by cfg_mu_
  Os* os_;
  std::shared_ptr<Reporter> reporter_;
  std::mutex scan_mu_;  // one scan at a time
  Scanner scanner_;
  std::vector<std::string> runtime_roots_;
  std::string agent_id_;  // in quarantine names
  bool read_only_;        // never reclaims (ScanOptions::read_only)
  std::shared_ptr<CreatorBook> creators_;
  Reconciler reconciler_;
  std::function<void(const std::string&)> warn_;
  std::set<std::string> reported_;  // reconcile errors and warnings already reported; guarded by scan_mu_
  mutable std::mutex mu_;
  std::shared_ptr<const NodeSnapshot> snapshot_;  // guarded by mu_
  uint64_t scans_completed_ = 0;                  // guarded by mu_
  mutable std::condition_variable scan_cv_;       // signalled after each Publish
  std::map<std::string, int64_t> peak_used_;      // pod uid -> most used bytes seen; guarded by scan_mu_
  EventHub events_;
  std::atomic<bool> stop_{false};
  std::mutex loop_mu_;
  std::condition_variable loop_cv_;
  bool poked_ = false;  // guarded by loop_mu_
  std::thread loop_;
  std::unique_ptr<EventReceiver> receiver_;
  std::unique_ptr<ChangeWatcher> watcher_;
  std::unique_ptr<Observer> observer_;  // null in scan mode
  std::atomic<int64_t> reclaimed_total_{0}, reclaimed_bytes_total_{0};
  AgentLog log_ = [](LogLevel, const std::string&) {};
  mutable std::mutex counters_mu_;
  AgentCounters counters_;  // guarded by counters_mu_
  // Rate limit of the log lines about refused datagrams: a window and what
  // was logged or dropped in it. Guarded by counters_mu_.
  std::chrono::steady_clock::time_point reject_window_{};
  int reject_logged_ = 0;
  int64_t reject_dropped_ = 0;
};

}  // namespace shmkeeper
