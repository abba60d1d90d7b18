// One scan of the node's shared memory: pods (from discovered containers and
// watched host directories), their /dev/shm usage, holders, SysV segments,
// memory-cgroup shmem, and the segments nobody holds.
//
// Thread-safety: a Scanner is used by one thread (the agent's scan loop); the
// NodeSnapshot it returns is an immutable value shared with readers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "node/creator_book.h"
#include "node/discovery.h"
#include "node/node_facts.h"
#include "node/node_records.h"
#include "node/observer.h"
#include "node/reporter.h"
#include "scan/node_refs.h"
#include "scan/proc_table.h"
#include "scan/shm_dir.h"
#include "scan/sysv.h"

namespace shmkeeper {

// How a scan learns who holds what.
enum class ScanDepth {
  kWalk,     // walk every task in /proc (start-up, overflow, audit, the scan mode)
  kObserve,  // ask the observer (event-derived state and lease probes); /proc
             // only for filesystems the observer cannot watch
};

// What a scan's leaked verdicts are for. The node facts they read (NodeFacts:
// namespaces, mounts) are reused between signals; a verdict that may remove
// a file reads them afresh.
enum class VerdictUse {
  kReport,  // listed and reported only (leaks.reclaim: report or off)
  kRemove,  // acted on: leaks.reclaim auto, or a reclaim request's scan
};

struct ScanOptions {
  std::vector<std::string> runtime_roots = DefaultRuntimeRoots();
  std::string docker_socket = "/var/run/docker.sock";  // "" = no Docker enrichment
  std::vector<std::string> host_shm_dirs;              // watched as kHost pods
  std::chrono::seconds grace{60};
  std::string proc = "/proc";
  std::string sys = "/sys", dev = "/dev";  // loop devices (scan/node_refs.h)
  // The agent's identity, in its quarantine names (quarantine.h); "" = none.
  std::string agent_id;
  // A read-only agent (another one owns the node) renames nothing back from
  // quarantine and reclaims nothing.
  bool read_only = false;
  size_t top_segments = 10;
  // agent.maxFilesPerPod: the most entries of one pod's tmpfs the scan lists
  // and tracks. A tmpfs with more is listed to this many plus one, reported
  // (PodRecord::files_over_limit) and none of its files is judged: the
  // agent's memory and CPU per pod stay bounded whatever a pod creates.
  size_t max_files_per_pod = 10000;
  // Creator records from the sharing runtime (shared with the agent's event
  // receiver); null = names are the only creator evidence.
  std::shared_ptr<CreatorBook> creators;
  // Where errors the scan survives go (a Docker API that fails while its
  // socket exists); null = counted nowhere.
  std::shared_ptr<Reporter> reporter;
  // The observer (not owned; outlives the scanner), null in scan mode: pods'
  // tmpfs are marked as they are found, and their files' use is its verdict
  // (with the walk's, when the scan walks: an audit).
  Observer* observer = nullptr;
  // The time its rules read (leaks.grace, "unheld since", the node facts'
  // maximum age: NodeFacts) and the calendar time of its snapshots and ages
  // (not owned; outlives the scanner; never null). A scan's own duration is
  // measured on the real clock.
  Clock* clock = RealClock();
};

// Creator hint from a segment name: torch_<pid>_…, sgl_shm_<kind>_<pid>_…
// give a pid; psm_…, nccl-… give only the pattern.
struct NameHint {
  std::string pattern;
  pid_t pid = 0;
};
NameHint CreatorHintFromName(const std::string& name);

class Scanner {
 public:
  explicit Scanner(ScanOptions options);
  // A scan of the node: pods, usage, verdicts. Keeps, between calls, when
  // each unheld segment was first seen unheld and who last held each
  // segment. kObserve without an observer walks. With kRemove, a leaked
  // verdict never rests on node facts read before this scan.
  NodeSnapshot Scan(ScanDepth depth = ScanDepth::kWalk, VerdictUse use = VerdictUse::kReport);
  // Attaches the observer (ScanOptions::observer) once it has started.
  // REQUIRES: no scan running.
  void SetObserver(Observer* observer) { opts_.observer = observer; }
  // The kernel refused a reclaim's lease on `key` while no process showed as
  // its holder (an io_uring fixed file, ...): until a lease probe at a later
  // scan succeeds, the file is held (kept_by_reason "lease"), so that
  // auto-reclaim does not try it again at every scan.
  void NoteLeaseRefused(const FileKey& key) { mem_.lease_refused.insert(key); }

 private:
  struct History {
    pid_t last_holder_pid = 0;
    std::string last_holder_command;
    std::chrono::steady_clock::time_point first_unheld{};
    bool unheld = false;
    std::chrono::steady_clock::time_point last_seen{};
    // Held by the observer's probe with no process showing it (a loop
    // device, a mount, an io_uring fixed file): the reason counted in
    // kept_by_reason, decided when it was probed.
    std::string hidden_reason;
  };
  struct Clock {
    std::chrono::steady_clock::time_point now;
    int64_t now_sec = 0;  // wall clock, for ages
  };
  // The stages of Scan, in order.
  // `refresh`: ask Docker again for every container (a walk re-reads everything).
  std::vector<PodRecord> DiscoverPods(bool refresh);
  void EnrichOrReport(std::vector<ContainerRecord>* containers, bool refresh);
  // After an ask: the names of the containers Docker listed; a miss counted
  // (kDockerAsks, see docker_names_).
  void RememberDockerNames(const std::vector<ContainerRecord>& containers, const std::set<std::string>& listed);
  void MeasureHost(NodeSnapshot* snap, dev_t* host_dev) const;
  // What a scan knows of processes: the walk's table with holders (when
  // the scan walked, or MeasurePods walked for an unobserved tmpfs), and the
  // node facts (every process's namespaces, and the references /proc does
  // not show: mounts, loop devices, pid namespaces reaching each tmpfs:
  // node_refs.h), kept between scans by facts_ and read when a signal says
  // they changed (node_facts.h), on the first need of a file nobody holds.
  struct ProcView {
    ProcTable table;
    NodeFacts* facts = nullptr;
    const ProcTable& Procs() { return facts->Procs(); }
    const NodeRefs& Refs() { return facts->Refs(); }
    const NodeRefs* RefsIfUsed() const { return facts->RefsIfUsed(); }
  };
  // Whether `l` (with "unheld since" `since`) would be a leaked verdict that
  // removes its file while the facts it read are older than this scan: then
  // they are read again (NodeFacts::Refresh) and the file judged again.
  bool NeedsFreshFacts(const PodRecord& p, const LeakRecord& l, std::chrono::steady_clock::time_point now,
                       std::chrono::steady_clock::time_point since) const;
  // What FileLeaks learnt of held files, for the pod's top segments.
  struct HeldFiles {
    std::set<FileKey> held;
    std::map<FileKey, std::vector<pid_t>> observed_pids;
  };
  // Opens and marks every pod's tmpfs and lists it (dirs[i], fds[i] for
  // pods[i]), walking /proc meanwhile (on this thread; the listing on
  // another) when `walk` or some tmpfs is not observed. Reads only.
  ProcTable MeasurePods(std::vector<PodRecord>* pods, dev_t host_dev, std::vector<ShmDir>* dirs,
                        std::vector<UniqueFd>* fds, bool walk);
  // One pod's tmpfs (open at `fd`, device `dev`): its last listing when the
  // listing cache says nothing changed, else a fresh one (bounded:
  // max_files_per_pod).
  Result<ShmDir> ListPodShm(int fd, dev_t dev, bool walk);
  // The tmpfs's last listing when it was over max_files_per_pod and still
  // may be (statfs shows more inodes in use than the limit, or cannot tell),
  // with statfs's figures of now; nullopt when it must be listed. Only a
  // walk lists such a tmpfs again: a light scan never relists a huge one.
  std::optional<ShmDir> OverLimitListing(int fd, dev_t dev) const;
  // A pod whose tmpfs is over max_files_per_pod: reported, every file kept.
  void KeepOverLimit(PodRecord* p, const ShmDir& d, NodeSnapshot* snap) const;
  // The one step of a scan that writes: renames back the files a reclaim
  // left in quarantine (an agent killed mid-reclaim) in each pod's own tmpfs
  // and lists those tmpfs again; nothing in a read-only agent. No reclaim
  // runs during a scan. Returns the files renamed back.
  int64_t RestoreFromQuarantine(const std::vector<PodRecord>& pods, const std::vector<UniqueFd>& fds,
                                std::vector<ShmDir>* dirs);
  // Gives the observer the holders of files on `dev` that no event can name:
  // every holder the walk found (`walked`), or, for a tmpfs marked by this
  // scan, those of one walk for its files.
  void SeedHolders(dev_t dev, const ShmDir& d, const ProcTable& table, bool walked);
  void FileLeaks(PodRecord* p, const ShmDir& d, int dir_fd, ProcView* view, const ProcInfo* access, bool walked,
                 const Clock& clock, HeldFiles* held, NodeSnapshot* snap);
  // FileLeaks judges one pod's tmpfs file by file (JudgeFile), in named
  // steps (node_scan_verdicts.cc):
  //   1. observe: the observer's use of the file (one gone since the
  //      listing is skipped);
  //   2. HeldByProcess: a process holds it (the walk's table, or the
  //      observer's verdict), with who last held it and any hidden reason;
  //   3. KeptByKernel: a reference /proc does not show (a mount, a loop
  //      device) or a reclaim's lease still refused;
  //   4. JudgeUnheld: nobody holds it: its creator evidence (a record, a
  //      name's pid: NameEvidence) and its verdict (FinishLeak).
  // Steps 2 and 3 end in Keep, the one bookkeeping of a file kept held.
  struct PodFiles {
    PodRecord* p = nullptr;
    int dir_fd = -1;
    ProcView* view = nullptr;
    const ProcInfo* access = nullptr;
    bool walked = false;
    const Clock* clock = nullptr;
    HeldFiles* held = nullptr;
    NodeSnapshot* snap = nullptr;
    Observer* observer = nullptr;  // the observer, when it watches this tmpfs
    // Observing, but this tmpfs is not marked (yet): its files are kept.
    bool unobserved = false;
    bool walked_dev = false;                    // the walk covered this filesystem
    std::optional<std::set<ino_t>> reaching{};  // ReachingPidNamespaces, read on first need (reset by a refresh)
  };
  void JudgeFile(PodFiles* pf, const ShmFile& f);
  bool HeldByProcess(PodFiles* pf, const ShmFile& f, History* h, const std::optional<Observer::Use>& use);
  std::string HiddenReason(PodFiles* pf, const ShmFile& f, const Observer::Use& use) const;
  bool KeptByKernel(PodFiles* pf, const ShmFile& f, History* h, const NodeRefs& refs);
  void JudgeUnheld(PodFiles* pf, const ShmFile& f, History* h, const std::optional<Observer::Use>& use);
  void NameEvidence(PodFiles* pf, const NameHint& hint, LeakRecord* l);
  void Keep(PodFiles* pf, const FileKey& key, History* h, const std::string& reason);
  // `sysv`: the pod's IPC namespace as ListSysvShmEach listed it.
  void SysvLeaks(PodRecord* p, ProcView* view, const SysvListing& sysv, const Clock& clock, std::set<ino_t>* ipc_seen,
                 NodeSnapshot* snap);

  ScanOptions opts_;
  // The node facts of every scan (the one place they are kept; after opts_,
  // which they are made from), and whether the current scan's leaked
  // verdicts may remove files.
  NodeFacts facts_;
  bool verdicts_remove_ = false;
  ContainerDiscovery discovery_;
  // Docker's names and labels by container id, as of the last time Docker was
  // asked: when a container it has not seen appears, and at every walk (so
  // a `docker rename` shows within agent.auditInterval). An id Docker did
  // not list is asked about again at the next kDockerAsks asks (a container
  // whose runtime state is there before Docker lists it: a miss is retried,
  // never remembered as "not Docker's"), then maps to an empty entry
  // (containerd's containers: not asked about again until a walk).
  static constexpr int kDockerAsks = 3;
  struct DockerNames {
    std::string name;
    std::map<std::string, std::string> labels;
  };
  std::map<std::string, DockerNames> docker_names_;
  std::map<std::string, int> docker_misses_;  // ids Docker has not listed yet: asks that missed them
  // The listing cache. Listing a tmpfs (readdir and a stat per file) is the
  // one per-pod cost of a scan that grows with the pod's files; when nothing
  // happens on a tmpfs, its listing is the same. So a scan that does not walk
  // reuses a tmpfs's last listing when (1) the observer watches it and its
  // Observer::Layout is what it was when listed (no create, delete, rename or
  // close after writing since, by anyone), and (2) statfs says the same blocks
  // and inodes are in use (pages written or punched through a mapping). A walk
  // (start-up, overflow, audit, request) lists every tmpfs afresh. What can
  // be stale until then: a file's mtime changed by utimensat alone (the
  // age shown for it). A listing that stopped at max_files_per_pod is reused
  // by every light scan, watched or not, until statfs shows the tmpfs back
  // under the limit (OverLimitListing).
  struct FsUse {
    uint64_t blocks = 0, bfree = 0, files = 0, ffree = 0;
    bool operator==(const FsUse&) const = default;
  };
  struct Listing {
    uint64_t layout = 0;
    FsUse fs;
    ShmDir dir;
  };
  std::map<dev_t, Listing> listings_;
  // The superblock (fsid) each pod tmpfs's device number was last seen on.
  // When a number comes back on another superblock, every fact the scanner
  // keeps under it (files' histories, refused leases, the listing, the
  // recent references) is another filesystem's and is dropped
  // (ForgetFilesystem); the observer and the creator book check the same
  // identity themselves.
  std::map<dev_t, uint64_t> superblocks_;
  void NoteSuperblock(dev_t dev, uint64_t fsid);
  void ForgetFilesystem(dev_t dev);
  // What the scanner remembers of files and SysV segments between scans,
  // and the one rule that keeps it consistent:
  //  1. Begin() (start of Scan) forgets what the previous scan met;
  //  2. while judging, a scan Meets() every file it lists, and every SysV
  //     segment it finds unattached, before it reads or writes that entry of
  //     `files`, `lease_refused` or `sysv_unheld`;
  //  3. End() (end of Scan) drops every entry it did not meet: a file that is
  //     gone, a segment that is gone or attached again (its "unheld since"
  //     restarts when it is next found unattached). The CreatorBook and the
  //     Observer are pruned to `seen_files` at the same point.
  // Nothing else removes entries; NoteLeaseRefused adds to `lease_refused`
  // between scans (the next End() drops it if the file is gone).
  struct Memory {
    using SysvKey = std::pair<ino_t, int32_t>;  // (IPC namespace, shmid)
    std::map<FileKey, History> files;
    std::set<FileKey> lease_refused;                                       // see NoteLeaseRefused
    std::map<SysvKey, std::chrono::steady_clock::time_point> sysv_unheld;  // first seen unattached
    std::set<FileKey> seen_files;                                          // met by the current scan
    std::set<SysvKey> seen_sysv;                                           // met unattached by the current scan
    void Begin();
    History& Meet(const FileKey& key);
    void MeetSysv(const SysvKey& key) { seen_sysv.insert(key); }
    void End();
  };
  Memory mem_;
  // The namespaces of each pod's access process (its container's init), by
  // host pid with the start time discovery verified at this scan: a
  // process's pid namespace and its pid there never change, so they are read
  // (/proc/<pid>/status) once per process, not once per scan. Entries of
  // pids no pod uses any more are dropped at each scan.
  struct AccessEntry {
    uint64_t start_ticks = 0;
    ProcInfo info;
  };
  std::map<pid_t, AccessEntry> access_;
  std::optional<ProcInfo> AccessInfo(pid_t pid, uint64_t start_ticks, std::map<pid_t, AccessEntry>* next);
  // The shmem charged to each pod's memory cgroup (memory.stat: the kernel
  // formats every counter of the cgroup, and /proc/<pid>/cgroup, for each
  // pod) is read again only when something the scan sees moved: the pod's
  // /dev/shm usage or file count (statfs, the listing), its SysV segments or
  // bytes, its access process, or a walk; and at least every kMemcgEvery
  // scans (shmem the scan cannot see: memfd, shared anonymous mappings, SysV
  // pages touched later). Between reads the last value is reported.
  static constexpr int64_t kMemcgEvery = 6;
  struct MemcgEntry {
    uint64_t start_ticks = 0;
    int64_t used_bytes = 0, sysv_bytes = 0;
    int32_t files = 0, sysv_segments = 0;
    int64_t read_at_scan = 0;
    int64_t shmem_bytes = 0;
    std::vector<std::pair<pid_t, uint64_t>> members;  // the pod's containers (init pid, start time) it was read for
  };
  std::map<pid_t, MemcgEntry> memcg_;
  int64_t PodMemcgShmem(const PodRecord& p, bool walk, std::map<pid_t, MemcgEntry>* next);
  // Scan's steps after the listing: each pod's access process and which
  // IPC namespaces to list (ReadAccess), each pod's turn (MeasurePod), and
  // the memory kept for the next scan (EndScan).
  struct PodAccess {
    std::vector<std::optional<ProcInfo>> infos;  // per pod
    std::vector<pid_t> sysv_pids;                // the access processes whose IPC namespace is listed
    std::vector<size_t> sysv_of;                 // per pod: its index in sysv_pids, SIZE_MAX for none
  };
  struct PodTurn {
    NodeSnapshot* snap = nullptr;
    std::vector<ShmDir>* dirs = nullptr;
    std::vector<UniqueFd>* fds = nullptr;
    ProcView* view = nullptr;
    Clock clock;
    bool walk = false;
    PodAccess access;
    std::vector<SysvListing> sysv;
    std::set<dev_t> counted, judged;
    std::set<ino_t> ipc_seen;
    HeldFiles held;  // node-wide: a pod that shares another's tmpfs shows the owner's verdicts
    std::map<pid_t, MemcgEntry> memcg_next;
  };
  void ReadAccess(const std::vector<PodRecord>& pods, PodAccess* out);
  void MeasurePod(size_t i, PodTurn* t);
  void EndScan(const NodeSnapshot& snap);
  // Tmpfs the observer marked during the current scan: files already open
  // there have no events naming their holders, so FileLeaks seeds them (from
  // the walk, or one walk for that tmpfs's files when the scan does not walk).
  std::set<dev_t> marked_now_;
  int64_t scans_ = 0;
  int64_t walks_ = 0;
};

const char* PodKindName(PodKind kind);
const char* LeakStateName(LeakState state);

}  // namespace shmkeeper
