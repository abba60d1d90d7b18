// The lease probe: asks the kernel whether an inode is open or mapped
// anywhere, without walking /proc (one kernel concern, nsjail style).
//
// How: open the file read-only (O_NONBLOCK, no symlinks), try
// fcntl(F_SETLEASE, F_WRLCK), release it (F_UNLCK) and close. The kernel grants
// a write lease only when no other open file description of the inode exists
// (its read and write open counts are our own), checked atomically: an fd in
// any thread's table, a mapping whose fd was closed, an fd in flight in a unix
// socket (SCM_RIGHTS), an io_uring fixed file, a child in a fork chain all
// keep one alive, so each makes the probe say kHeld. Another process's lease
// makes our open fail with EWOULDBLOCK: kHeld too.
//
// Blind spot: an O_PATH descriptor is no open file description for leases
// (it cannot read, write or map the file; using it needs a real open, which
// the observer sees as an event). Reclaim's final check walks /proc and sees
// O_PATH holders (reclaim.h); the slow audit does too (observer.h).
//
// Never makes an application wait for long: the lease exists only between
// F_SETLEASE and F_UNLCK, two back-to-back system calls (microseconds); an
// open(2) racing it blocks for that long. The file's lease-break signal
// (F_SETSIG) is SIGCONT: if the agent is stopped (SIGSTOP, SIGTSTP) inside
// that window, the open that breaks the lease resumes it, and it releases the
// lease at once, instead of the open waiting fs.lease-break-time (45 s). What
// SIGCONT cannot end: a frozen cgroup, a ptrace stop (docs/agent.md).
//
// Thread-safety: a free function; any thread. Needs CAP_LEASE (or the file's
// owner) and fs.leases-enable=1: kError otherwise.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "scan/proc_table.h"

namespace shmkeeper {

enum class ProbeVerdict {
  kHeld,    // some other open file description of the inode exists
  kUnheld,  // none did at the moment of the check
  kGone,    // no such name, or the name is another inode now
};

// Probes `name` (relative to the directory `dir_fd`, no slashes followed
// through symlinks) expected to be inode `key`. `inside_window` (tests only)
// runs while the lease is held. `before_lease` (may be null) runs on the
// probe's own read-only descriptor once it is known to be inode `key`, before
// the lease is tried: the observer marks the inode there (observer.h), so
// that any open after the mark is an event and any holder from before it
// makes the lease fail. An error from it ends the probe with that error
// (the caller keeps the file as held).
Result<ProbeVerdict> ProbeLease(int dir_fd, const std::string& name, const FileKey& key,
                                const std::function<void()>& inside_window = nullptr,
                                const std::function<Status(int fd)>& before_lease = nullptr);

}  // namespace shmkeeper
