// Several agents on one node (docs/agent.md#several-agents-on-one-node): who
// else lease-probes the node's shm files. A `--read-only` shmkeeperd beside
// the node's agent opens every dirty file to probe it, as the node's agent
// does; if each took the other's probes for use (fanotify reports them as
// opens and closes), no file would ever stay unheld for `leaks.grace`.
//
// The registry: every shmkeeperd, read-write or read-only, holds for its
// lifetime a classic POSIX write lock (fcntl F_SETLK) on one byte of
// <stateDir>/shmkeeperd.probers; the observer asks the kernel (F_GETLK)
// which other processes hold one, and does not take their opens and closes
// for use (observer.h).
//
// What the kernel proves, and only that:
//  - A classic POSIX lock belongs to the process that took it: it is not
//    inherited across fork (a child of an agent, a fork of a test binary
//    hosting an in-process agent, is not registered), it goes when the
//    process exits (no stale entry, no pid reuse: a reused pid holds no
//    lock), and F_GETLK reports its holder's pid translated into the
//    caller's pid namespace (holders the caller cannot see are left out).
//  - Only write locks count (the query is for a read lock, which only write
//    locks conflict with), and a write lock needs a descriptor open for
//    writing: only a process that can open the agent's 0600 state file
//    read-write (root on the host, or a pod given the agent's state
//    directory) can register. Nothing a container can forge (comm, the
//    executable's name, the environment) is read.
//
// The byte locked is the process's own pid (what lslocks shows), or when
// another process holds that byte (an agent of another pid namespace with the
// same number) the same number plus a multiple of kPidSlots.
//
// The pitfall of POSIX locks: any close(2) of the file by the process drops
// every lock the process holds on it. Join therefore keeps one descriptor per
// file per process, shared by every registry of that file in the process and
// closed with the last of them; nothing else in the process may open the file.
//
// Thread-safety: Others() may be called from any thread; Join is serialised
// by a process-wide mutex.
#pragma once

#include <sys/types.h>

#include <memory>
#include <set>
#include <string>

#include "base/fileutil.h"
#include "base/status.h"

namespace shmkeeper {

inline constexpr char kProbersFile[] = "shmkeeperd.probers";

class ProberRegistry {
 public:
  // Pids are below 2^22 (PID_MAX_LIMIT on 64-bit Linux): slot k of pid p is
  // byte p + k * kPidSlots.
  static constexpr off_t kPidSlots = off_t{1} << 22;
  static constexpr int kMaxSlots = 8;

  // Opens (creating it, mode 0600) <state_dir>/shmkeeperd.probers and
  // registers this process in it until the returned registry, and every
  // other registry of the same file in this process, is destroyed, or the
  // process exits. Refused: a symlink, a file that is not a regular file
  // owned by our effective uid, a file writable by group or others
  // (kFailedPrecondition, naming the path); every slot of our pid taken. A
  // forked child is not registered by its parent's registries: it joins
  // afresh.
  static Result<std::unique_ptr<ProberRegistry>> Join(const std::string& state_dir);

  // The pids (as this process's pid namespace sees them) of every other
  // process registered in the file now; never this process's own.
  Result<std::set<pid_t>> Others() const;

  const std::string& path() const { return path_; }
  off_t slot() const { return slot_; }  // the byte this process locks

  ProberRegistry(const ProberRegistry&) = delete;
  ProberRegistry& operator=(const ProberRegistry&) = delete;
  ~ProberRegistry();

 private:
  ProberRegistry(int fd, std::string path, off_t slot, dev_t dev, ino_t ino);
  int fd_;  // owned by the process-wide table (probers.cc), open while this exists
  std::string path_;
  off_t slot_;
  dev_t dev_;
  ino_t ino_;
};

// The pids of the processes other than the caller that hold a classic POSIX
// write lock on any byte of the file open as `fd`, as F_GETLK reports them
// (translated into the caller's pid namespace; a holder it cannot see, or an
// open-file-description lock, reports no pid and is left out). F_GETLK
// names one conflicting lock per call, not necessarily the lowest: the range
// is split around each answer and both sides asked again, so k disjoint
// locked regions cost at most 2k+1 calls. Stops after `max_calls` calls (the
// regions beyond are not reported: for the observer, their holders' opens
// count as use, the safe direction).
Result<std::set<pid_t>> WriteLockHolders(int fd, int max_calls = 257);

}  // namespace shmkeeper
