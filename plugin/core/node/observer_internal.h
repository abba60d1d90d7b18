// What the observer's files share (observer.cc, observer_filesystems.cc,
// observer_holders.cc): not part of its interface.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace shmkeeper::observer_internal {

// Moves `pid` to the end of `pids` (the newest), keeping at most `max`.
inline void Remember(std::vector<pid_t>* pids, pid_t pid, size_t max) {
  std::erase(*pids, pid);
  pids->push_back(pid);
  if (pids->size() > max) pids->erase(pids->begin());
}

}  // namespace shmkeeper::observer_internal
