// Reclaim as the agent runs it: which leaks of a snapshot are due (auto-reclaim,
// or a request's namespace, pod and paths), the safe protocol on them
// (ReclaimLeaks, reclaim.h), and what a removal leaves behind: a log line per
// removal with its evidence, a leak_reclaimed event, the counters for /metrics.
//
// Ownership: borrows the EventHub and the Clock (both outlive the reclaimer);
// `log` is called on the reclaiming thread. The clock times the protocol's
// settle and reads requests' deadlines (reclaim.h).
// Thread-safety: Auto and Request must not run concurrently with each other
// or with Scanner::Scan (reclaim.h); the agent calls them under its scan lock.
// counters() and the totals may be called from any thread. Auto and Request
// block on the filesystem and /proc (the protocol's settle and holder pass),
// the counters' mutex and the hub's.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/mutex.h"
#include "decide/config.h"
#include "node/event_hub.h"
#include "node/reclaim.h"
#include "node/reporter.h"

namespace shmkeeper {

struct ReclaimCounters {
  std::map<SkipReason, int64_t> kept;  // by SkippedLeak::reason
  int64_t errors = 0;
  int64_t raced = 0;
  int64_t pinned = 0;
};

class Reclaimer {
 public:
  // `agent_id` goes into quarantine names; a `read_only` agent never
  // auto-reclaims.
  Reclaimer(std::string agent_id, bool read_only, EventHub* events, Reporter::Log log, Clock* clock = RealClock());

  // Removes the leaks of `snap` that are due: reclaimable, with leaks.reclaim
  // auto (`mode`) and their pod not opted out (shmkeeper.io/reclaim: report
  // or off). Returns what it did.
  ReclaimOutcome Auto(const NodeSnapshot& snap, LeakReclaim mode) SHMK_EXCLUDES(mu_);
  // The leaks of `snap` in `ns` and `pod` ("" = all) whose path is in
  // `paths` (empty = all; as ListLeaks shows them), reclaimed, or with
  // `dry_run` only checked; nothing is removed after `deadline` (a time of
  // the reclaimer's clock).
  ReclaimOutcome Request(const NodeSnapshot& snap, bool dry_run, const std::string& ns, const std::string& pod,
                         const std::vector<std::string>& paths, Deadline deadline = Deadline::max()) SHMK_EXCLUDES(mu_);

  ReclaimCounters counters() const SHMK_EXCLUDES(mu_);
  int64_t reclaimed_total() const { return reclaimed_total_; }
  int64_t reclaimed_bytes_total() const { return reclaimed_bytes_total_; }

 private:
  // Logs, counts and announces what a (real) reclaim did.
  void Record(const ReclaimOutcome& out) SHMK_EXCLUDES(mu_);

  const std::string agent_id_;
  const bool read_only_;
  EventHub* const events_;
  const Reporter::Log log_;
  Clock* const clock_;
  mutable Mutex mu_;
  ReclaimCounters counters_ SHMK_GUARDED_BY(mu_);
  std::atomic<int64_t> reclaimed_total_{0}, reclaimed_bytes_total_{0};
};

}  // namespace shmkeeper
