// SysV shared memory, per IPC namespace. /proc/sysvipc/shm shows the reading
// thread's IPC namespace, so reads and removals run on a short-lived thread
// that has joined the target namespace with setns(2); the agent's own
// threads never change namespace.
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

// In that namespace, right before IPC_RMID: removes `want.shmid` only if the
// kernel (IPC_STAT, in that namespace) still shows no attachment and the
// same creator, last attaching pid and attach/detach times as the scan saw;
// kFailedPrecondition otherwise (nothing used it since, or it is another
// segment under a reused id).
Status RemoveSysvShm(pid_t pid, const SysvExpect& want, const std::string& proc = "/proc");

}  // namespace shmkeeper
