// Safe reclaim of leaked shared memory: a protocol that cannot remove a file
// that any process holds, by construction (docs/reclaim-safety.md).
//
// For each candidate (a `leaked` verdict of the latest scan), in batches:
//  1. Claim: open the file by name without following symlinks, check it is
//     the very inode the scan saw with one link, and take a write lease on it
//     (fcntl F_SETLEASE F_WRLCK). The kernel grants that lease only when no
//     other open file description of the inode exists anywhere: an fd in any
//     thread's table (private fd tables, zombie leaders' workers, fork chains),
//     a mapping whose fd was closed, an fd in flight in a unix socket
//     (SCM_RIGHTS) or registered with io_uring all keep one alive. While the
//     lease is held, every open(2) of the inode blocks (or fails with
//     EWOULDBLOCK) and marks the lease as breaking.
//  2. Quarantine: rename the file to ".shmkeeper-reclaim.<name>" in its own
//     directory (RENAME_NOREPLACE): no open by the old name can start after it.
//  3. Settle (20 ms by the injected clock), then a fresh pass over every task
//     in /proc (also O_PATH fds, which take no lease).
//  4. Remove only if the lease is still unbroken, can be taken again (no
//     open file description appeared), the quarantine name still is that
//     inode, and the pass found no holder; otherwise rename it back.
// A crash in between leaves quarantine names, which every scan renames back
// (Scanner). Names are resolved below the pod's shm root without following
// symlinks; a container cannot make the agent touch another pod's files.
//
// Thread-safety: ReclaimLeaks must not run concurrently with a Scanner::Scan
// over the same directories (the scan restores quarantine names); the Agent
// serialises both under its scan lock.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/clock.h"
#include "node/node_scan.h"
#include "node/quarantine.h"

namespace shmkeeper {

// Why ReclaimLeaks kept a candidate (or, kPinned, removed it without freeing
// its memory). The same values, in the same order, are the proto's
// shmkeeper.v1.SkipReason (SKIP_REASON_<NAME>, UNSPECIFIED = 0 there).
enum class SkipReason {
  kHeld = 1,      // an fd, mapping or lease holds it (the kernel refused the lease, or /proc shows a holder)
  kOpened = 2,    // opened while the claim was held (the lease broke)
  kChanged = 3,   // another inode under the name since the scan or during the check
  kLinked = 4,    // it has (or gained) a second name
  kError = 5,     // a system call failed
  kPinned = 6,    // removed, but a reference /proc does not show still pins its memory
  kVerdict = 7,   // not a candidate: the latest scan did not call it leaked past leaks.grace
  kDeadline = 8,  // the caller's deadline passed before its removal (renamed back, kept)
};

// "held", "opened", ...: the metric label (shmkeeper_reclaim_kept_total{reason})
// and the word people read.
const char* SkipReasonName(SkipReason r);

struct SkippedLeak {
  LeakRecord leak;
  SkipReason reason = SkipReason::kError;
  std::string message;  // one line for people
  // The kernel refused the lease although the scan saw no holder: a reference
  // no /proc entry shows (an io_uring fixed file, ...). The scan then calls
  // the file held until a lease can be taken (Scanner::NoteLeaseRefused).
  bool lease_refused = false;
};

struct ReclaimOutcome {
  std::vector<LeakRecord> reclaimed;  // removed, or with dry_run: would be
  std::vector<SkippedLeak> skipped;
  int64_t freed_bytes = 0;
  // Removed, but an open(2) that had looked the name up before the
  // quarantine rename reached the inode after the last check (see docs/reclaim-safety.md).
  int64_t raced = 0;
};
// A removed file whose inode outlived the claim (found with
// open_by_handle_at(2) after the agent closed its own descriptor) is
// reported as skipped with reason kPinned: its name is gone, but something
// the kernel does not show in /proc and that takes no lease (an O_PATH
// descriptor in flight over SCM_RIGHTS) still references it, so its memory
// was not freed.

// When the caller stops waiting (a gRPC client's deadline), a time of the
// reclaim's clock; max(): never.
using Deadline = Clock::TimePoint;

// Reclaims `candidates` (from the latest snapshot). With dry_run nothing is
// renamed or removed, but the claim (lease) and holder checks run.
// `agent_id` goes into the quarantine names (quarantine.h). Once `deadline`
// has passed nothing more is quarantined or removed: each file not yet
// removed is renamed back and kept with reason "deadline" (checked before each
// quarantine and right before each removal). `clock` (not owned) reads the
// deadline and times the settle: RealClock() in the agent, a FakeClock in
// tests (the settle then waits for Advance).
ReclaimOutcome ReclaimLeaks(const std::vector<LeakRecord>& candidates, bool dry_run, const std::string& proc = "/proc",
                            const std::string& agent_id = "", Deadline deadline = Deadline::max(),
                            Clock* clock = RealClock());

}  // namespace shmkeeper
