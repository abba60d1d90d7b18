// A process's memory cgroup (v1 or v2): its limit and the shmem charged to it.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace shmkeeper
