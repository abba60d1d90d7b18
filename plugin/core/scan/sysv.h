// SysV shared memory, per IPC namespace. /proc/sysvipc/shm shows the reading
// thread's IPC namespace, so reads and removals run on a short-lived thread
// that has joined the target namespace with setns(2); the agent's own
// threads never change namespace, and no thread outlives the call that made
// it (a thread left in a pod's IPC namespace would pin it after the pod).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace shmkeeper {

struct SysvSegment {
  int32_t shmid = 0;
  int64_t key = 0;
  int64_t bytes = 0;  // size
  pid_t cpid = 0;     // creator, as a host pid (the reader is in the host pid namespace)
  pid_t lpid = 0;     // last shmat/shmdt
  int64_t nattch = 0;
  int64_t ctime = 0;  // last change (seconds since the epoch)
  int64_t atime = 0;  // last shmat (0: never)
  int64_t dtime = 0;  // last shmdt (0: never)
};

// What a removal expects to find unchanged (from the scan that judged it).
struct SysvExpect {
  int32_t shmid = 0;
  pid_t cpid = 0, lpid = 0;
  int64_t atime = 0, dtime = 0;
};

// Parses /proc/sysvipc/shm text.
std::vector<SysvSegment> ParseSysvShm(const std::string& text);

// The segments in the IPC namespace of process `pid` (its /proc/<pid>/ns/ipc).
Result<std::vector<SysvSegment>> ListSysvShm(pid_t pid, const std::string& proc = "/proc");

// One IPC namespace's segments, as ListSysvShmEach found them.
struct SysvListing {
  ino_t ipc_ns = 0;   // the namespace's inode (0: it could not be opened)
  bool host = false;  // the caller's own IPC namespace: not listed
  Status status;      // why there is no listing (segments empty then)
  std::vector<SysvSegment> segments;
};

// The segments in the IPC namespaces of `pids` (out[i] for pids[i]), on one
// thread for the whole call that joins each namespace in turn: a scan of
// many pods makes one thread, not one per pod. A namespace that
// shmctl(SHM_INFO) shows without any segment is not read further (the
// kernel's count of the namespace's segments: exact, and far cheaper than
// formatting /proc/sysvipc/shm); a namespace met again is listed once.
std::vector<SysvListing> ListSysvShmEach(const std::vector<pid_t>& pids, const std::string& proc = "/proc");

// In that namespace, right before IPC_RMID: removes `want.shmid` only if the
// kernel (IPC_STAT, in that namespace) still shows no attachment and the
// same creator, last attaching pid and attach/detach times as the scan saw;
// kFailedPrecondition otherwise (nothing used it since, or it is another
// segment under a reused id).
Status RemoveSysvShm(pid_t pid, const SysvExpect& want, const std::string& proc = "/proc");

}  // namespace shmkeeper
