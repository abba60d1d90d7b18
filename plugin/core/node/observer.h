// The observer: who uses the node's shm files, learnt from the kernel as it
// happens instead of by walking /proc (docs/agent.md#how-it-observes).
//
// Model. Each watched tmpfs has a fanotify filesystem mark for its directory
// events (create, rename), and each file the agent has probed an inode mark
// for its opens, closes and attribute changes (its unlink: fanotify.h). The inode mark is placed
// inside the probe, on the probe's own descriptor, before the lease is tried
// (lease_probe.h): an open of that inode by any process in any namespace
// after the mark is an event naming the inode and the process; a holder from
// before the mark makes the lease fail. A file's first Check probes it, so
// from the first scan that lists a file on, none of its opens is missed; a
// file created, used and removed between two scans is never probed and its
// opens cost no event. Per inode the observer keeps the time of the last open
// or close it saw, the pids seen, and the verdict of its last lease probe
// (lease_probe.h). An event makes the inode dirty; a dirty (or never probed)
// inode is probed again when a scan asks (Check), and nothing else is ever
// probed. Those per-inode states and their transitions are one model,
// FileUse (file_use.h: its header is the state table); what is known per
// device number is one FsState record (below). So:
//  - "held" is the kernel's word at the moment of the probe, and stays true
//    until a close is reported (a release of any open file description,
//    including the last munmap of a closed fd, is a FAN_CLOSE event);
//  - "unheld since" is the time of the last open or close reported for the
//    inode (or of the first probe that found it unheld, when it has had no
//    event since its mark): use between two scans is never missed for a file
//    the agent has seen.
// Identity. A watched tmpfs is its superblock, not its device number: the
// kernel gives a new tmpfs the lowest free device number, so a new pod's
// /dev/shm often has the number (and its files the inode numbers) of one
// that just went. Watch learns the filesystem's fsid (scan/fs_identity.h) and
// keeps it with the mark; when the same number comes back with another fsid,
// everything known under that number (marks' events, verdicts, activity
// times, holders, creators, layout) is dropped and the new superblock is
// marked afresh (counted: superblock_changes): nothing is inherited.
//
// A filesystem mark that fails (fs.fanotify.max_user_marks is shared by every
// root fanotify group on the node, ENOSPC; any error) is never remembered as
// a mode: every later Watch tries again, and until one succeeds the tmpfs is
// unmarked (counted: unmarked, mark_failures) and the scan keeps its files
// (kept_by_reason "unobserved"), never judging them by sampling /proc. The
// inode-mark budget leaves room for filesystem marks (DefaultMarkBudget).
//
// When an inode mark cannot be added (fs.fanotify.max_user_marks, the
// agent's own budget of half of it, any error), that tmpfs falls back to a
// filesystem-wide mark for opens and closes too: every open there is an event
// again (reported once per filesystem, counted), never a probe-only mode.
// Lost events (FAN_Q_OVERFLOW) make every inode dirty and move every
// "unheld since" to the overflow (counted; the agent then walks /proc). An
// event whose inode cannot be decoded makes its whole filesystem dirty the
// same way. The agent's own opens (probes, reclaim) are not events of use.
// Creates are events only until the first one after a scan: it disarms
// FAN_CREATE on its tmpfs and the next scan re-arms it before listing (Watch).
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
// Holders' pids: a probe that finds a file held names the processes it can
// confirm holding it (ProcessHolds): the pids its events named, else the
// recent creators of files on that tmpfs (a FAN_CREATE names its process),
// else, when a second probe still says held, a walk of /proc (a holder that
// opened it before its mark and created nothing there). A walk names the
// holders of every file on the tmpfs it covers, reused for 2 s (the rest of
// that scan needs no walk), and walks are batched: at most one per
// holder_walk_every, for every file waiting for one (Use::holders_pending
// meanwhile: held, holders not yet named), so a workload that keeps making
// them costs one walk per interval, not per file.
//
// The probe's blind spot is an O_PATH-only holder: it can neither read nor
// map the file, and the walks that remain (reclaim's final check, the slow
// audit, start-up) see it.
//
// Thread-safety: every public method may be called from any thread; the
// callbacks run on the observer's thread and must not call back into it.
//
// Lock order (SHMK_ACQUIRED_BEFORE below; each object's locks are private):
//   Observer::drain_mu_  ->  Observer::arm_mu_  ->  Observer::mu_.
// The Reporter's mutex is taken with none of the observer's locks held
// (every report is made after they are released), and Fanotify's mutex is a
// leaf: the observer calls Fanotify::Mark, Creates and Forget with at most
// drain_mu_ or arm_mu_ held, never mu_, and Fanotify::Read decodes under
// its own lock and calls its callback after releasing it (the callback,
// Drain's batch, then takes mu_). The ProberRegistry is asked
// (RefreshProbers) with drain_mu_ held and mu_ not; it makes no callback.
// The per-file model (FileUse) and the per-filesystem records are plain
// data under mu_: they take no lock and call nothing.
// Callbacks and who holds what when they run:
//  - on_change / on_overflow (the agent's Poke): after Drain released every
//    lock; none held;
//  - the probers log (SetProbers) and the Reporter's log for a
//    prober-registry failure: what RefreshProbers learnt, told by Drain
//    after it released drain_mu_; none held;
//  - the Reporter's log: Reporter::Report calls it after releasing the
//    Reporter's mutex; the observer reports with none of its locks held;
//  - a Reopen (Watch): from Disarm (in Drain), with drain_mu_ held, before
//    arm_mu_ and mu_ are taken: it must not call into the observer (the
//    scan's open of a pod's /dev/shm does not).
// The Scanner calls the observer from its one thread and holds none of
// these while doing so; the agent's scan lock (engine.h) is taken before
// any of them.
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

#include "base/clock.h"
#include "base/fileutil.h"
#include "base/mutex.h"
#include "base/status.h"
#include "node/fanotify.h"
#include "node/file_use.h"
#include "node/probers.h"
#include "node/reporter.h"
#include "scan/lease_probe.h"
#include "scan/proc_table.h"

namespace shmkeeper {

inline constexpr char kObserverMarkErrors[] = "observer_mark_errors";
inline constexpr char kObserverProbeErrors[] = "observer_probe_errors";
inline constexpr char kObserverProberErrors[] = "observer_prober_errors";
inline constexpr char kAuditMissedEvent[] = "observer_audit.missed_event";
inline constexpr char kAuditWalkOnly[] = "observer_audit.walk_only";
inline constexpr char kObserverMarkFallbacks[] = "observer_mark_fallbacks";

struct ObserverCounters {
  int64_t events = 0;              // events read (merged by the kernel)
  int64_t overflows = 0;           // FAN_Q_OVERFLOW seen
  int64_t probes = 0;              // lease probes run
  int64_t other_agents = 0;        // other shmkeeperd processes registered as probers, at the last look
  int64_t prober_events = 0;       // their opens and closes, not taken for use
  int64_t inode_marks = 0;         // inode marks placed on files the observer still tracks
  int64_t mark_fallbacks = 0;      // filesystems watched for every open and close (an inode mark failed)
  int64_t holder_walks = 0;        // walks of /proc for held files no event or creator named (batched)
  int64_t disarms = 0;             // FAN_CREATE removed from a tmpfs's mark at its first create since a scan
  int64_t rearms = 0;              // FAN_CREATE added back by a scan
  int64_t superblock_changes = 0;  // a watched device number found on a new superblock (all its facts dropped)
  int64_t mark_failures = 0;       // filesystem marks that failed (each retried at the next Watch)
  int64_t mark_retries = 0;        // filesystem marks that succeeded after a failure
  int64_t unmarked = 0;            // tmpfs whose filesystem mark is missing now (their files are kept)
};

struct ObserverOptions {
  // How long events may queue between reads (merging them).
  std::chrono::milliseconds drain{100};
  std::string proc = "/proc";
  // At most this many inode marks (nullopt: half of
  // fs.fanotify.max_user_marks, read at Start, which root's other fanotify
  // users on the node share; unlimited when unreadable). Past it, a
  // filesystem falls back to its filesystem-wide use mask. Tests lower it.
  std::optional<int64_t> max_inode_marks;
  // At most one walk of /proc this often for files probed held whose holder
  // no event and no recent creator names (opened before the inode's mark by
  // a process that did not create it): the files met in between wait for
  // the next walk together (Use::holders_pending), so such files cost one
  // walk per interval, not one per file. Their verdict (held) never waits.
  std::chrono::milliseconds holder_walk_every{10000};
  // Disarm a tmpfs's creates at its first create, re-arm at the next scan
  // (Watch). False keeps them armed (tests' control: every create is an
  // event again).
  bool disarm_creates = true;
  // The time (leveldb's Env; base/clock.h, not owned, outlives the
  // observer): every timing rule (holder_walk_every, the walk's reuse,
  // activity times) reads it. Tests advance a FakeClock instead of waiting.
  Clock* clock = RealClock();
  // Test seam, called before each filesystem mark and each re-arm of its
  // creates: an error fails that call as the kernel would (fs.fanotify.max_user_marks is node-wide; tests do
  // not touch it). Null: none.
  std::function<Status(dev_t)> mark_fault;
};

class Observer {
 public:
  using TimePoint = Clock::TimePoint;
  // `on_change`: a file was created, removed, renamed or closed after writing
  // (usage may have changed; a light refresh is due). `on_overflow`: events
  // were lost (a walk of /proc is due). `reporter` (may be null; outlives the
  // observer) gets marks that fail, probes that fail and audit disagreements.
  Observer(std::function<void()> on_change, std::function<void()> on_overflow, Reporter* reporter,
           ObserverOptions opts = {});
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
  // superblock: when `dev` was watched on another superblock (another fsid),
  // everything known of it is dropped first (see Identity above). False
  // when it cannot be marked (each failure reported; the next Watch tries
  // again): the caller keeps that tmpfs's files until a Watch succeeds.
  // `marked_now` (may be null) is set when this call made the mark: files
  // opened before it have no events, and the caller seeds their holders
  // (Seed).
  // Creates: the first create (or FAN_CREATE of a directory) by another
  // process after a Watch disarms FAN_CREATE on that tmpfs (Fanotify::Creates;
  // it changes Layout and calls on_change, so an early scan comes), and the
  // next Watch of a disarmed tmpfs, which the scan calls before it lists the
  // directory, re-arms it (changing Layout again): a create after the re-arm
  // is an event, one before it is in the listing; a burst of creates costs
  // one event per scan. The disarm needs a descriptor of the tmpfs:
  // `reopen` (kept per device, called on the observer's thread; nothing is
  // kept open, so a dead pod's tmpfs is never pinned) opens its directory;
  // without it, or when what it opens is not on `dev`, creates stay armed.
  // A re-arm that fails is reported once and leaves the device without a
  // Layout (listed every scan) until a later Watch re-arms it.
  using Reopen = std::function<Result<UniqueFd>()>;
  bool Watch(int dir_fd, dev_t dev, bool* marked_now = nullptr, Reopen reopen = nullptr);
  // Records `pids` as processes using `key` (holders a walk found for a file
  // opened before its tmpfs was marked), as if their opens had been seen; no
  // activity time, no new probe.
  void Seed(const FileKey& key, const std::vector<pid_t>& pids);
  bool Watching(dev_t dev) const;
  // A number that changes whenever the set of files on the watched `dev`, or
  // a file's size through write(2), may have changed: a create or rename
  // (FAN_CREATE, FAN_MOVED_FROM/TO), or the unlink, an attribute change
  // (FAN_ATTRIB) or a close after writing (FAN_CLOSE_WRITE) of a file the
  // observer has probed (every file a listing showed: a newer one is a
  // create; in the fallback, FAN_DELETE of any), by any process, the agent
  // included; lost events change every device's. nullopt when `dev` is not
  // watched, or while its creates are disarmed and could not be re-armed.
  // What the events cannot tell (pages written or punched through a
  // mapping, a write through a descriptor still open) is in statfs; the scan
  // compares that too (node_scan.h: the listing cache).
  std::optional<uint64_t> Layout(dev_t dev) const;
  // Forgets devices not in `devs` and inodes not in `live`. Their marks are
  // not removed: an inode's go with the inode (a file no longer listed is a
  // removed one; a tmpfs no longer watched goes with its pod), a
  // filesystem's with the superblock; their events are ignored meanwhile.
  void Retain(const std::set<dev_t>& devs, const std::set<FileKey>& live);

  struct Use {
    bool held = true;
    // The last open or close reported, or the last overflow (whichever is
    // later); none when nothing happened to it since the agent started.
    std::optional<TimePoint> last_activity;
    std::vector<pid_t> pids;  // processes seen opening or closing it (at most 8, newest last)
    bool probed_now = false;  // this answer is a fresh probe (else the cached verdict)
    bool gone = false;        // the fresh probe found the name gone (or another inode): not a file any more
    // Held, and who holds it awaits the next holder walk (holder_walk_every):
    // no pid yet, which says nothing of a hidden reference.
    bool holders_pending = false;
  };
  // The file's use now: the last probe's verdict when no event touched it
  // since, else a fresh probe of `name` below `dir_fd`, which marks the
  // inode for its opens and closes first (see the model). A probe that fails
  // is taken as held (reported).
  // Runs the holder walk first when one is due (ObserverOptions).
  Use Check(int dir_fd, const std::string& name, const FileKey& key) {
    WalkIfDue();
    return CheckOne(dir_fd, name, key, true);
  }
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
  // A file's record: its use (the model, file_use.h) and whether the
  // observer placed an inode mark on it (counted in inode_marks).
  struct Inode {
    FileUse use;
    bool marked = false;
  };
  // What the observer knows of one device number, for one superblock at a
  // time (Identity above): one record per device, so that forgetting a
  // device is one reset (ForgetDeviceLocked) and Retain one erase.
  struct FsState {
    // Its filesystem mark: none (never tried, or forgotten), placed on the
    // superblock `fsid`, or the last try failed (`fsid` as read then; every
    // later Watch tries again, and its files are kept meanwhile).
    enum class Mark { kNone, kMarked, kUnmarked };
    // FAN_CREATE on that mark: armed; removed at a create (see Watch);
    // removed, and the re-arm failed (no Layout until one succeeds).
    enum class Creates { kArmed, kDisarmed, kRearmFailed };
    Mark mark = Mark::kNone;
    uint64_t fsid = 0;
    bool all_uses = false;  // watched for every open and close (an inode mark failed)
    Creates creates = Creates::kArmed;
    bool disarm_due = false;         // a create read by this drain (Drain disarms)
    Reopen reopen;                   // see Watch
    std::vector<pid_t> creators;     // recent FAN_CREATE/MOVED_TO pids, newest last
    std::optional<TimePoint> floor;  // the last of its events that named no inode
    uint64_t layout = 0;             // see Layout: kept across a forget, erased by Retain alone
  };
  // `dev`'s record when its filesystem mark is placed, else null.
  const FsState* MarkedLocked(dev_t dev) const SHMK_REQUIRES(mu_);
  FsState* MarkedLocked(dev_t dev) SHMK_REQUIRES(mu_);
  void Run();
  TimePoint Now() const { return opts_.clock->Now(); }
  void OnEvent(const FanEvent& e, TimePoint now, bool* changed) SHMK_REQUIRES(mu_);
  // An open or close by another registered agent (see the model above).
  void OnProberUse(const FanEvent& e) SHMK_REQUIRES(mu_);
  // What RefreshProbers learnt, told by Drain once it holds no lock: the
  // registry's failures (to the Reporter) and changes of the set of other
  // agents (to the probers log).
  struct ProberNews {
    std::vector<std::string> errors;
    std::vector<std::string> changes;
  };
  // Asks the registry who else probes, now. Called with drain_mu_ held: it
  // makes no callback, it adds to `news`.
  void RefreshProbers(ProberNews* news) SHMK_EXCLUDES(mu_);
  // The floor below which cached verdicts and activity times are stale for
  // files on `dev`. REQUIRES: mu_ held.
  std::optional<TimePoint> FloorLocked(dev_t dev) const SHMK_REQUIRES(mu_);
  Use UseLocked(const Inode& in, dev_t dev) const SHMK_REQUIRES(mu_);
  Result<ProbeVerdict> Probe(int dir_fd, const std::string& name, const FileKey& key);
  // Check; `walk`: a held file no known process holds may be walked for
  // (not in the audit: its own walk has seeded every holder /proc shows).
  Use CheckOne(int dir_fd, const std::string& name, const FileKey& key, bool walk);
  // Marks the inode open as `fd` (key `key`) for its opens and closes, or
  // falls back to its filesystem's use mask. Runs inside the probe.
  Status MarkForUse(int fd, const FileKey& key);
  // The pid holding `key` now, among those its events named and the recent
  // creators on its tmpfs (none when none does).
  std::vector<pid_t> Holders(const FileKey& key);
  // Queues `key` for the holder walk and runs it now when none ran for
  // holder_walk_every: the pids holding `key` (maybe none), or nullopt while
  // it waits.
  std::optional<std::vector<pid_t>> WalkHolders(const FileKey& key) SHMK_EXCLUDES(mu_);
  // The holder walk when files wait for it and it is due.
  void WalkIfDue() SHMK_EXCLUDES(mu_);
  // One walk of /proc (counted) for every queued file: their holders are
  // remembered; a file no process holds is probed again at its next Check
  // and walked for no more until an event names it. Returns what it found.
  std::map<FileKey, std::vector<pid_t>> RunWalk() SHMK_EXCLUDES(mu_);
  // Removes FAN_CREATE from `dev`'s filesystem mark (through its Reopen).
  void Disarm(dev_t dev);
  // Drops every fact kept under `dev` (a new superblock has its number, or
  // it is no longer watched): the one list of what is keyed by device.
  void ForgetDeviceLocked(dev_t dev) SHMK_REQUIRES(mu_);
  // `dev` was marked on another superblock: its events (by fsid) and facts go.
  void ForgetSuperblock(dev_t dev) SHMK_EXCLUDES(mu_, drain_mu_);
  // Adds FAN_CREATE back on the filesystem of `dir_fd` if `dev` is disarmed.
  void Rearm(int dir_fd, dev_t dev);

  std::function<void()> on_change_, on_overflow_;
  Reporter* reporter_;
  ObserverOptions opts_;
  int64_t max_marks_ = -1;  // -1: unlimited
  std::unique_ptr<Fanotify> fan_;
  UniqueFd stop_;
  std::thread thread_;
  pid_t self_ = 0;
  Mutex drain_mu_ SHMK_ACQUIRED_BEFORE(arm_mu_);  // serialises Drain
  // Serialises a disarm with a re-arm (the syscall and the state together:
  // the state never says armed while the kernel's mask is not).
  Mutex arm_mu_ SHMK_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  std::map<FileKey, Inode> inodes_ SHMK_GUARDED_BY(mu_);
  std::map<dev_t, FsState> fs_ SHMK_GUARDED_BY(mu_);         // every fact kept per device number
  std::set<FileKey> pending_walk_ SHMK_GUARDED_BY(mu_);      // files waiting for the holder walk
  std::optional<TimePoint> last_walk_ SHMK_GUARDED_BY(mu_);  // the last holder walk
  // What the last holder walk found: every holder of every file on the tmpfs
  // it covered, reused for a moment (observer.cc, kWalkReuse).
  std::optional<TimePoint> walked_at_ SHMK_GUARDED_BY(mu_);
  std::set<dev_t> walked_devs_ SHMK_GUARDED_BY(mu_);
  std::map<FileKey, std::vector<pid_t>> walked_ SHMK_GUARDED_BY(mu_);
  std::optional<TimePoint> floor_ SHMK_GUARDED_BY(mu_);  // the last overflow
  ObserverCounters counters_ SHMK_GUARDED_BY(mu_);
  std::shared_ptr<ProberRegistry> probers_;              // set before Start
  std::function<void(const std::string&)> probers_log_;  // set before Start
  std::set<pid_t> others_ SHMK_GUARDED_BY(mu_);          // the other agents, at the last RefreshProbers
  std::atomic<bool> overflow_pending_{false};
};

}  // namespace shmkeeper
