// Safe reclaim of leaked shared memory. A segment is removed only when, at
// the moment of removal: it is the same file (device and inode) the scan saw,
// no process on the node holds an fd to it or maps it (scanned afresh), and
// the scan found it reclaimable (creator known dead and unheld longer than
// leaks.grace). Paths are resolved inside the pod's root without following
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
