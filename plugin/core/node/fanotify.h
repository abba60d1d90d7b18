// fanotify, for the observer: one notification group with a filesystem-wide
// mark (FAN_MARK_FILESYSTEM) per watched tmpfs, reporting file handles
// (FAN_REPORT_FID) rather than descriptors (one kernel concern, nsjail style).
//
// Why these choices:
// - A filesystem mark sees every open and close of every inode on the
//   superblock, through any mount (bind mounts, another mount namespace's
//   view of a pod's /dev/shm); a mount mark would miss those.
// - FID reporting opens nothing in the agent: a descriptor-reporting group
//   would open each file for each event, an open that breaks reclaim's and
//   the probe's leases. It also gives FAN_CREATE/FAN_DELETE/FAN_MOVE.
// - Events are hints, merged by the kernel; a lost event shows up as
//   FAN_Q_OVERFLOW (kOverflow), never silently.
//
// Kernel requirements (see docs/agent.md#kernel-requirements): fanotify
// (2.6.37), FAN_MARK_FILESYSTEM (4.20), FAN_REPORT_FID with FAN_CREATE/
// FAN_DELETE/FAN_MOVE (5.1), and a tmpfs that reports a non-zero fsid
// (tmpfs: 5.13; it always encoded file handles); CAP_SYS_ADMIN in the
// initial user namespace.
//
// Thread-safety: Mark/Unmark and Read may run on different threads (the
// group's fd is immutable; the fsid table is guarded).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "base/fileutil.h"
#include "base/mutex.h"
#include "base/status.h"

namespace shmkeeper {

struct FanEvent {
  bool overflow = false;  // FAN_Q_OVERFLOW: events were lost
  pid_t pid = 0;          // the process (thread-group id) that caused it, as a host pid
  uint64_t mask = 0;      // FAN_OPEN, FAN_CLOSE_*, FAN_CREATE, ...
  dev_t dev = 0;          // the marked filesystem (0: not one we marked)
  ino_t ino = 0;          // the inode (0: the handle was not one we can decode)
};

class Fanotify {
 public:
  // A group for open/close/create/delete/move events, non-blocking.
  // kUnavailable-like errors (EPERM, ENOSYS, EINVAL) say fanotify cannot be used here.
  static Result<std::unique_ptr<Fanotify>> Open();

  // Marks the filesystem of the directory `dir_fd`, whose device is `dev`.
  Status Mark(int dir_fd, dev_t dev);
  // Forgets `dev` (its mark dies with the superblock; events from it are
  // then reported with dev 0).
  void Forget(dev_t dev);
  // Reads what is queued (never blocks), calling `fn` per event.
  // Returns false when the group is broken (read error other than EAGAIN).
  bool Read(const std::function<void(const FanEvent&)>& fn);
  int fd() const { return fd_.get(); }

  explicit Fanotify(UniqueFd fd) : fd_(std::move(fd)) {}

 private:
  UniqueFd fd_;
  Mutex mu_;
  std::map<uint64_t, dev_t> fsids_ SHMK_GUARDED_BY(mu_);  // fsid -> dev of each marked filesystem
};

}  // namespace shmkeeper
