// Safe reclaim of leaked shared memory. A segment is removed only when the
// scan found it reclaimable (creator known dead, unheld longer than
// leaks.grace), a fresh pass over every process taken right before the
// removals finds no fd to it and no mapping of it, and at its unlink it is
// still the same file (device and inode) the scan saw. Paths are resolved inside the pod's root without following
// symlinks; a container cannot make the agent touch another pod's files.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "shmkeeper/node_scan.h"

namespace shmkeeper {

struct ReclaimOutcome {
  std::vector<LeakRecord> reclaimed;  // removed, or with dry_run: would be
  std::vector<std::pair<LeakRecord, std::string>> skipped;
  int64_t freed_bytes = 0;
};

// Reclaims `candidates` (from the latest snapshot). With dry_run nothing is
// removed, but every check runs.
ReclaimOutcome ReclaimLeaks(const std::vector<LeakRecord>& candidates, bool dry_run, const std::string& proc = "/proc");

}  // namespace shmkeeper
