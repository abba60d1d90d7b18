// fanotify, for the observer: one notification group reporting file handles
// (FAN_REPORT_FID) rather than descriptors, with a filesystem-wide mark
// (FAN_MARK_FILESYSTEM) per watched tmpfs for creates and renames, and an
// inode mark (FAN_MARK_INODE) per file the agent has probed for its opens,
// closes and attribute changes, its unlink included (one kernel concern,
// nsjail style).
//
// Why these choices:
// - Filesystem and inode marks see every event of their object, through any
//   mount (bind mounts, another mount namespace's view of a pod's
//   /dev/shm); a mount mark would miss those.
// - Opens and closes only of probed inodes (MarkInode): a file created, used
//   and removed between two scans is never probed, has no mark, and its
//   opens and closes cost nothing (fsnotify() returns at once when no mark
//   on the inode or its superblock asks for FS_OPEN/FS_CLOSE). With
//   FAN_REPORT_FID the directory events name the directory, not the file,
//   so those of one directory merge in the queue: a create/use/remove cycle
//   repeated 20,000 times is a handful of events, not 20,000. Removals are
//   not watched on the filesystem (each would cost the remover an event):
//   the removal of a file the agent listed is its inode mark's FAN_ATTRIB
//   (the link count changed), at the unlink, held or not; a file it never
//   listed is in no listing to correct.
// - An inode mark is placed on the probe's own open descriptor
//   (fanotify_mark(fd, NULL path)), never by name: it marks exactly the inode
//   the probe checked. It does not keep the file alive: when the last link
//   goes and the last user closes it, the kernel destroys the inode's marks
//   (fsnotify_inoderemove) and frees its pages as before (tested:
//   observer_test's UnlinkedMarkedFileFreesItsPages). It follows the inode
//   through renames.
// - When an inode mark cannot be added (the per-user mark limit,
//   fs.fanotify.max_user_marks, or any error), AllUses widens the filesystem
//   mark to every open and close on that tmpfs (the observer's fallback): more
//   events, never missed use.
// - FAN_CREATE is on the filesystem mark only between a scan and the first
//   create after it (Creates): the kernel builds an event inside every
//   create of a marked filesystem, even one that merges in the queue (~6 %
//   of a workload's shm_open/unlink cycle); disarmed, a create costs nothing.
// - FID reporting opens nothing in the agent: a descriptor-reporting group
//   would open each file for each event, an open that breaks reclaim's and
//   the probe's leases. It also gives FAN_CREATE/FAN_DELETE/FAN_MOVE.
// - Events are hints, merged by the kernel; a lost event shows up as
//   FAN_Q_OVERFLOW (kOverflow), never silently.
//
// Kernel requirements (see docs/agent.md#kernel-requirements): fanotify
// with inode marks (2.6.37), FAN_MARK_FILESYSTEM (4.20), FAN_REPORT_FID with
// FAN_CREATE/FAN_DELETE/FAN_MOVE and with inode marks (5.1), and a tmpfs that
// reports a non-zero fsid (tmpfs: 5.13; it always encoded file handles);
// CAP_SYS_ADMIN in the initial user namespace.
//
// Thread-safety: Mark/Unmark and Read may run on different threads (the
// group's fd is immutable; the fsid table is guarded). Read decodes events
// under that lock and calls its callback after releasing it: a callback may
// take any lock, and call Mark or Forget.
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

  // Marks the filesystem of the directory `dir_fd`, whose device is `dev`,
  // for its directory events: create, rename (FAN_ONDIR included).
  Status Mark(int dir_fd, dev_t dev);
  // Marks the inode open as `fd` for its opens, closes and attribute changes
  // (FAN_OPEN, FAN_CLOSE_WRITE, FAN_CLOSE_NOWRITE, FAN_ATTRIB: chmod, chown,
  // times, link count, so its unlink); adding it again is harmless. Its
  // filesystem must have been marked (Mark), else its events name dev 0.
  Status MarkInode(int fd);
  // Widens the filesystem mark of the object open as `fd` to every open,
  // close and removal on that filesystem (the fallback when MarkInode fails).
  Status AllUses(int fd);
  // Adds (`on`) or removes FAN_CREATE on the filesystem mark of the object
  // open as `fd` (the observer disarms a tmpfs's creates at its first create
  // and re-arms them at the next scan, before the listing: one create event
  // per scan per tmpfs, however many files a burst creates). Renames stay.
  Status Creates(int fd, bool on);
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
