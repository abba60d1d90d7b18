// The node facts that the verdicts on unheld files read, kept between scans
// in one place: every process's namespaces (a ProcTable without holders) and
// the references the fd tables do not show (NodeRefs: mounts of single
// files, loop devices, the pid namespaces that reach each tmpfs, every live
// pid). Reading them is a pass over every process and every mount
// namespace's mountinfo (~12 µs per process, 90 % in the kernel), so they
// are read when something says they may have changed and reused otherwise.
//
// The rule, checked at the first use in a scan. Everything (the pass over
// every process, then each namespace's mounts) is read again when
//  1. they were never read, or Invalidate() was called;
//  2. the scan's tmpfs devices differ from those they were read for (a new
//     pod tmpfs, or one gone);
//  3. the pods' processes differ (a container came, went or was replaced:
//     a new container can bind a file, or bring a pid namespace);
//  3a. a mount namespace was made since they were read: an id not among
//     those asked just before the read ("namespace_made"; every mount
//     namespace's id, scan/mount_ns.h: never reused, but not in creation
//     order), or they cannot be told ("namespaces_unknown": a kernel before
//     6.12, an error, or facts adopted from a walk made before they were
//     asked). Asked again at every check: a failure is retried, never kept
//     as a mode, and until it is answered the facts are read at every scan
//     that uses them, as if never kept. This is what shows a mount made in
//     a new mount namespace (`unshare -m` then `mount --bind` of a file) at
//     the next scan; once the namespace is known, its later mounts are rule
//     7's;
//  4. a creator the facts called alive (Alive) exited. Whether a name's
//     pid runs is asked of the kernel at each use, not taken from the
//     facts: NS_GET_TGID_FROM_PIDNS through a member of its pid namespace
//     (Linux >= 6.9), so a process started since the read (`docker exec`
//     in an existing container, which no other rule sees) is alive; where
//     it cannot be asked, the facts are read again by that scan first;
//  5. they are older than max_age: what no signal covers (a pid namespace
//     made without a mount namespace of its own, a namespace only an fd or
//     a bind of nsfs holds) shows within that age;
//  6. a namespace could not be watched (more than kMaxWatches, a mountinfo
//     that could not be opened): then they are never reused.
// Only one namespace's mounts (its mountinfo, no pass over the processes)
// are read again when
//  7. its mount table changed: poll() on its /proc/<pid>/mountinfo, held
//     open, reports POLLPRI (Linux >= 2.6.15);
//  8. the process it was watched through left it: it is watched through
//     another of its members, or, when none is left, it is dropped.
// Loop devices are read again at every scan that uses the facts
// (/sys/block only: no signal says one was attached).
// What may be stale between reads changes what is shown, never what is
// removed: a scan whose leaked verdicts may remove files asks for facts read
// by itself (Refresh) before it calls a file leaked (node_scan.h).
//
// The watch fds: each one holds a reference to its mount namespace, which
// keeps that namespace's mounts (a dead pod's /dev/shm tmpfs) alive while it
// is open. They are closed as soon as the process they were opened through
// leaves the namespace (checked at every scan that uses the facts), at every
// read for namespaces no process has any more, and when a scan does not use
// the facts at all (EndScan forgets everything).
//
// Time comes from the injected Clock (base/clock.h).
//
// Thread-safety: used by one thread (the scan's); the references returned
// are valid until the next call of a non-const method.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/fileutil.h"
#include "base/status.h"
#include "scan/node_refs.h"
#include "scan/proc_table.h"

namespace shmkeeper {

class NodeFacts {
 public:
  struct Options {
    std::string proc = "/proc", sys = "/sys", dev = "/dev";
    std::chrono::seconds max_age{300};
    Clock* clock = RealClock();  // not owned; outlives the NodeFacts
    // Every mount namespace's id on the node (rule 3a); tests give their
    // own. Null: the kernel's (MountNamespaceIds from the agent's own).
    std::function<Result<std::vector<uint64_t>>()> mount_namespaces;
  };
  // The processes of the pods (container inits and access processes, with
  // their start times), sorted: a change says a container came or went.
  using PodProcesses = std::vector<std::pair<pid_t, uint64_t>>;
  // The most mount namespaces watched; beyond it the facts are not reused.
  static constexpr size_t kMaxWatches = 4096;

  explicit NodeFacts(Options options) : opts_(std::move(options)) {}

  // The start of a scan: the tmpfs devices it watches and its pods'
  // processes. Reads nothing.
  void BeginScan(std::set<dev_t> devices, PodProcesses pods);
  // A walk of every process made by this scan (start-up, audit, ...): its
  // table is the facts' process table (read now, so not read again).
  void Adopt(const ProcTable& walked);
  // The facts, checked against the rule at the first use in a scan and read
  // when stale.
  const ProcTable& Procs();
  const NodeRefs& Refs();
  // Whether (pid namespace, pid) is a live process by the facts; one that
  // is, is watched (rule 4).
  bool Alive(ino_t pid_ns, pid_t ns_pid);
  // Facts read by this scan, reading them now when they were not.
  void Refresh();
  // The next use reads them again.
  void Invalidate() { invalid_ = true; }
  // Whether this scan read them (or adopted its walk's table).
  bool ReadThisScan() const { return read_this_scan_; }
  // Whether this scan used them (Procs, Refs, Alive, Refresh).
  bool UsedThisScan() const { return used_this_scan_; }
  // The references this scan used, without reading anything; null when it
  // used none.
  const NodeRefs* RefsIfUsed() const { return used_this_scan_ && refs_ ? &*refs_ : nullptr; }
  // The end of a scan: facts no use asked for are forgotten (watch fds closed).
  void EndScan();
  // Passes over every process made by NodeFacts itself (not adopted), so far.
  int64_t reads() const { return reads_; }
  // Why the last read was made ("never", "devices", "pods",
  // "namespace_made", "namespaces_unknown", "mounts",
  // "namespace_left", "creator_exited", "age", "unwatched", "invalidated",
  // "refresh"): for tests and logs.
  const std::string& last_reason() const { return last_reason_; }
  // Mount namespaces watched now.
  size_t watches() const { return spaces_.size(); }
  // Reads of one namespace's mounts alone (rules 7 and 8), so far.
  int64_t namespace_reads() const { return namespace_reads_; }

 private:
  // One mount namespace: its members (lowest pid first) and their pid
  // namespaces, the watch, and its part of the references.
  struct Space {
    std::vector<pid_t> members;
    std::vector<ino_t> pid_ns;
    pid_t watched = 0;  // the member the fd was opened through
    UniqueFd fd;        // its /proc/<pid>/mountinfo
    NodeRefs refs;      // mounts and shm_pid_ns of this namespace only
  };
  // The first rule of 1-6 that applies ("" when none).
  std::string Stale() const;
  bool CreatorExited() const;
  // Rule 3a: "namespace_made", "namespaces_unknown" or "".
  std::string NamespaceMade();
  // Whether `ns_pid` runs in `pid_ns` now, asked of the kernel through a
  // member of that namespace: its host tgid, 0 when not; none when it
  // cannot be asked.
  std::optional<pid_t> AskAlive(ino_t pid_ns, pid_t ns_pid) const;
  Result<std::vector<uint64_t>> MountNamespaces() const;
  void Read(const std::string& reason);
  // Rules 7 and 8: namespaces whose mounts changed or whose watched member
  // left are read again (or dropped); true when any was.
  bool UpdateNamespaces();
  // Watches `ns` through its first member still in it; false when none is.
  bool Rewatch(ino_t ns, Space* space) const;
  void ReadSpace(Space* space);
  // refs_ from base_ and every namespace's part.
  void Compose();
  void Use();
  void Forget();

  Options opts_;
  // What the facts are, and what they were read for.
  std::optional<ProcTable> procs_;
  std::optional<NodeRefs> refs_;  // base_ and every namespace's part
  NodeRefs base_;                 // the live pids and completeness, from procs_
  std::set<dev_t> devices_;
  PodProcesses pods_;
  Clock::TimePoint read_at_{};
  std::map<ino_t, Space> spaces_;    // by mount namespace
  bool unwatched_ = false;           // rule 6
  std::map<pid_t, ProcInfo> alive_;  // rule 4, by host pid
  bool invalid_ = false;
  // Rule 3a: the mount namespace ids asked before the read, sorted (none:
  // unknown).
  std::optional<std::vector<uint64_t>> known_ns_;
  // The current scan.
  std::set<dev_t> scan_devices_;
  PodProcesses scan_pods_;
  bool checked_this_scan_ = false, read_this_scan_ = false, used_this_scan_ = false, loops_this_scan_ = false;
  int64_t reads_ = 0, namespace_reads_ = 0;
  std::string last_reason_;
};

}  // namespace shmkeeper
