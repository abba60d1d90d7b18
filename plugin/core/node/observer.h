// The observer: who uses the node's shm files, learnt from the kernel as it
// happens instead of by walking /proc (docs/agent.md#how-it-observes).
//
// Model. Each watched tmpfs has a fanotify filesystem mark (fanotify.h). Every
// open and every close of any file on it, by any process in any namespace,
// is an event naming the inode and the process. Per inode the observer keeps
// the time of the last open or close it saw, the pids seen, and the verdict
// of its last lease probe (lease_probe.h). An event makes the inode dirty; a
// dirty (or never probed) inode is probed again when a scan asks (Check), and
// nothing else is ever probed. So:
//  - "held" is the kernel's word at the moment of the probe, and stays true
//    until a close is reported (a release of any open file description,
//    including the last munmap of a closed fd, is a FAN_CLOSE event);
//  - "unheld since" is the time of the last open or close reported for the
//    inode (or of the first probe that found it unheld, when it has had no
//    event since the agent started): use between two scans is never missed.
// Lost events (FAN_Q_OVERFLOW) make every inode dirty and move every
// "unheld since" to the overflow (counted; the agent then walks /proc). An
// event whose inode cannot be decoded makes its whole filesystem dirty the
// same way. The agent's own opens (probes, reclaim) are not events of use.
//
// Nor are another shmkeeperd's (a --read-only agent beside the node's agent):
// the processes registered in the agent's ProberRegistry (probers.h; a kernel
// lock, never a name) at the time a batch of events is applied, asked after
// the batch was read. Their creates, removals and renames still change the
// layout (another read-write agent's reclaim removes files). Their closes are
// not use, but one may end a probe that overlapped ours (ours then said
// "held"): a registered prober's close of a file whose cached verdict is
// "held", or that is being probed, makes it dirty again, once per real event
// (so two agents never re-probe each other's probes forever). A second
// overlap keeps the cached "held" until the next real event or the slow
// audit (the safe direction), which re-probes it and does not count it as a
// missed event.
//
// The probe's blind spot is an O_PATH-only holder: it can neither read nor
// map the file, and the walks that remain (reclaim's final check, the slow
// audit, start-up) see it.
//
// Thread-safety: every public method may be called from any thread; the
// callbacks run on the observer's thread and must not call back into it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/fileutil.h"
#include "base/mutex.h"
#include "base/status.h"
#include "node/fanotify.h"
#include "node/probers.h"
#include "node/reporter.h"
#include "scan/proc_table.h"

namespace shmkeeper {

inline constexpr char kObserverMarkErrors[] = "observer_mark_errors";
inline constexpr char kObserverProbeErrors[] = "observer_probe_errors";
inline constexpr char kObserverProberErrors[] = "observer_prober_errors";
inline constexpr char kAuditMissedEvent[] = "observer_audit.missed_event";
inline constexpr char kAuditWalkOnly[] = "observer_audit.walk_only";

struct ObserverCounters {
  int64_t events = 0;         // events read (merged by the kernel)
  int64_t overflows = 0;      // FAN_Q_OVERFLOW seen
  int64_t probes = 0;         // lease probes run
  int64_t other_agents = 0;   // other shmkeeperd processes registered as probers, at the last look
  int64_t prober_events = 0;  // their opens and closes, not taken for use
};

class Observer {
 public:
  using Clock = std::chrono::steady_clock;
  // `on_change`: a file was created, removed, renamed or closed after writing
  // (usage may have changed; a light refresh is due). `on_overflow`: events
  // were lost (a walk of /proc is due). `reporter` (may be null; outlives the
  // observer) gets marks that fail, probes that fail and audit disagreements.
  // `drain` is how long events may queue between reads (merging them).
  Observer(std::function<void()> on_change, std::function<void()> on_overflow, Reporter* reporter,
           std::chrono::milliseconds drain = std::chrono::milliseconds(100));
  ~Observer();

  // The registry of the node's other agents (probers.h; shared, may be null:
  // every other process's opens are use). `log` (may be null) gets one line
  // each time the set of other agents recognised changes. REQUIRES: before
  // Start.
  void SetProbers(std::shared_ptr<ProberRegistry> probers, std::function<void(const std::string&)> log);

  // Creates the fanotify group and starts the reader thread. An error means
  // fanotify is unusable here: the caller falls back to scanning.
  Status Start();

  // Marks the tmpfs behind the directory `dir_fd` (device `dev`), once per
  // device. False when it cannot be marked (reported once per device): files
  // there must be judged by walking /proc. `marked_now` (may be null) is set
  // when this call made the mark: files opened before it have no events, and
  // the caller seeds their holders (Seed).
  bool Watch(int dir_fd, dev_t dev, bool* marked_now = nullptr);
  // Records `pids` as processes using `key` (holders a walk found for a file
  // opened before its tmpfs was marked), as if their opens had been seen; no
  // activity time, no new probe.
  void Seed(const FileKey& key, const std::vector<pid_t>& pids);
  bool Watching(dev_t dev) const;
  // A number that changes whenever the set of files on the watched `dev`, or
  // a file's size through write(2), may have changed: a create, delete or
  // rename (FAN_CREATE, FAN_DELETE, FAN_MOVED_FROM/TO) or a close after
  // writing (FAN_CLOSE_WRITE), by any process, the agent included; lost
  // events change every device's. nullopt when `dev` is not watched. What
  // the events cannot tell (pages written or punched through a mapping) is
  // in statfs; the scan compares that too (node_scan.h: the listing cache).
  std::optional<uint64_t> Layout(dev_t dev) const;
  // Forgets devices not in `devs` and inodes not in `live`.
  void Retain(const std::set<dev_t>& devs, const std::set<FileKey>& live);

  struct Use {
    bool held = true;
    // The last open or close reported, or the last overflow (whichever is
    // later); none when nothing happened to it since the agent started.
    std::optional<Clock::time_point> last_activity;
    std::vector<pid_t> pids;  // processes seen opening or closing it (at most 8, newest last)
    bool probed_now = false;  // this answer is a fresh probe (else the cached verdict)
  };
  // The file's use now: the last probe's verdict when no event touched it
  // since, else a fresh probe of `name` below `dir_fd`. A probe that fails is
  // taken as held (reported).
  Use Check(int dir_fd, const std::string& name, const FileKey& key);
  // The slow audit of one file: its settled (event-derived) verdict against
  // a fresh probe, and the fresh probe against the /proc walk's `walk_held`.
  // Disagreements are counted (kAuditMissedEvent: the cached verdict was
  // wrong; kAuditWalkOnly: the walk saw a holder the probe cannot, e.g.
  // O_PATH) and logged. Returns the fresh use.
  Use Audit(int dir_fd, const std::string& name, const FileKey& key, bool walk_held);

  // Reads the events queued now, on the caller's thread (what a reclaim
  // does first, so that it acts on every use reported until then).
  void Drain();

  // True once per overflow (or more) since the last call.
  bool TakeOverflow() { return overflow_pending_.exchange(false); }
  ObserverCounters counters() const;

 private:
  struct Inode {
    Clock::time_point last_activity{};
    bool active = false;  // last_activity is set
    bool dirty = true;
    bool probed = false;
    bool held = true;
    Clock::time_point probed_at{};
    std::vector<pid_t> pids;
    int probing = 0;             // probes of it running now
    bool prober_closed = false;  // a registered prober closed it since our last probe began
    bool rechecked = false;      // re-probed for a prober's close since the last real event
  };
  void Run();
  void OnEvent(const FanEvent& e, Clock::time_point now, bool* changed) SHMK_REQUIRES(mu_);
  // An open or close by another registered agent (see the model above).
  void OnProberUse(const FanEvent& e) SHMK_REQUIRES(mu_);
  // Asks the registry who else probes, now. Called with drain_mu_ held.
  void RefreshProbers() SHMK_EXCLUDES(mu_);
  // The floor below which cached verdicts and activity times are stale for
  // files on `dev`. REQUIRES: mu_ held.
  std::optional<Clock::time_point> FloorLocked(dev_t dev) const SHMK_REQUIRES(mu_);
  Use UseLocked(const Inode& in, dev_t dev) const SHMK_REQUIRES(mu_);
  Result<bool> Probe(int dir_fd, const std::string& name, const FileKey& key);

  std::function<void()> on_change_, on_overflow_;
  Reporter* reporter_;
  std::chrono::milliseconds drain_;
  std::unique_ptr<Fanotify> fan_;
  UniqueFd stop_;
  std::thread thread_;
  pid_t self_ = 0;
  Mutex drain_mu_ SHMK_ACQUIRED_BEFORE(mu_);  // serialises Drain
  mutable Mutex mu_;
  std::map<FileKey, Inode> inodes_ SHMK_GUARDED_BY(mu_);
  std::set<dev_t> watched_ SHMK_GUARDED_BY(mu_), failed_ SHMK_GUARDED_BY(mu_);
  std::map<dev_t, Clock::time_point> dev_floor_ SHMK_GUARDED_BY(mu_);  // undecodable events per device
  std::map<dev_t, uint64_t> layout_ SHMK_GUARDED_BY(mu_);              // see Layout
  std::optional<Clock::time_point> floor_ SHMK_GUARDED_BY(mu_);        // the last overflow
  ObserverCounters counters_ SHMK_GUARDED_BY(mu_);
  std::shared_ptr<ProberRegistry> probers_;              // set before Start
  std::function<void(const std::string&)> probers_log_;  // set before Start
  std::set<pid_t> others_ SHMK_GUARDED_BY(mu_);          // the other agents, at the last RefreshProbers
  std::atomic<bool> overflow_pending_{false};
};

}  // namespace shmkeeper
