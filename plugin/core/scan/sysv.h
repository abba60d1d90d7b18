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
};

// Parses /proc/sysvipc/shm text.
std::vector<SysvSegment> ParseSysvShm(const std::string& text);

// The segments in the IPC namespace of process `pid` (its /proc/<pid>/ns/ipc).
Result<std::vector<SysvSegment>> ListSysvShm(pid_t pid, const std::string& proc = "/proc");

// In that namespace: removes `shmid` only if it still has no attachments and
// the same creator; kFailedPrecondition otherwise.
Status RemoveSysvShm(pid_t pid, int32_t shmid, pid_t expect_cpid, const std::string& proc = "/proc");

}  // namespace shmkeeper
