// A process's memory cgroup (v1 or v2): its limit and the shmem charged to it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shmkeeper {

struct Memcg {
  bool found = false;       // a memory.stat was readable
  int64_t limit_bytes = 0;  // 0: no limit
  int64_t shmem_bytes = 0;  // memory.stat "shmem"
};

// Reads the memory cgroup of `who` ("self" or a pid) from `proc`/<who>/cgroup
// and /sys/fs/cgroup. For "self" the mount root is tried second: inside a
// container the process's own cgroup is usually mounted there.
Memcg ReadMemcg(const std::string& proc, const std::string& who);

// The shmem charged to the memory cgroups of `pids` (the processes of one
// pod: a CRI pod's pause container and its workload containers each have a
// cgroup of their own, and the workload's holds the shmem it wrote): the sum
// of memory.stat "shmem" over their distinct cgroups. On cgroup v2, whose
// memory.stat counts the descendants too, a cgroup below another one of the
// list is not added again (v1's "shmem" is the cgroup's own). A pid whose
// cgroup cannot be read adds nothing.
int64_t MemcgShmemOf(const std::string& proc, const std::vector<pid_t>& pids);

}  // namespace shmkeeper
