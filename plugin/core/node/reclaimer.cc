#include "node/reclaimer.h"

#include <algorithm>

#include "base/bytes.h"
#include "node/pod_query.h"

namespace shmkeeper {
namespace {

std::string Where(const LeakRecord& l) { return l.sysv_id >= 0 ? "sysv:" + std::to_string(l.sysv_id) : l.path; }

// One line per removal: what, where, and on which evidence.
std::string RemovalLine(const LeakRecord& l) {
  std::string pod = l.pod.ns.empty() ? l.pod.name : l.pod.ns + "/" + l.pod.name;
  return "reclaimed " + Where(l) + " of " + pod + ": inode " + std::to_string(l.key.dev) + ":" +
         std::to_string(l.key.ino) + ", " + std::to_string(l.bytes) + " bytes, creator pid " +
         std::to_string(l.creator_pid) + (l.creator_command.empty() ? "" : " (" + l.creator_command + ")") +
         " dead, evidence " + l.creator_source + ", unheld for " +
         std::to_string(static_cast<int64_t>(l.unheld_for_sec)) + "s";
}

}  // namespace

Reclaimer::Reclaimer(std::string agent_id, bool read_only, EventHub* events, Reporter::Log log, Clock* clock)
    : agent_id_(std::move(agent_id)), read_only_(read_only), events_(events), log_(std::move(log)), clock_(clock) {}

ReclaimOutcome Reclaimer::Auto(const NodeSnapshot& snap, LeakReclaim mode) {
  std::vector<LeakRecord> due;
  for (const LeakRecord& l : snap.leaks) {
    // The node decides; a pod may only opt out (never in beyond the node).
    bool on = mode == LeakReclaim::kAuto && !l.reclaim_opt_out;
    if (on && l.reclaimable) due.push_back(l);
  }
  if (due.empty() || read_only_) return {};
  ReclaimOutcome out = ReclaimLeaks(due, /*dry_run=*/false, "/proc", agent_id_, Deadline::max(), clock_);
  Record(out);
  return out;
}

ReclaimOutcome Reclaimer::Request(const NodeSnapshot& snap, bool dry_run, const std::string& ns, const std::string& pod,
                                  const std::vector<std::string>& paths, Deadline deadline) {
  std::vector<LeakRecord> candidates;
  for (const LeakRecord& l : QueryLeaks(&snap, ns, pod)) {
    // Paths as ListLeaks shows them (names that are not UTF-8 escaped).
    bool listed = std::find(paths.begin(), paths.end(), l.path) != paths.end() ||
                  std::find(paths.begin(), paths.end(), EscapeInvalidUtf8(l.path)) != paths.end();
    if (paths.empty() || listed) candidates.push_back(l);
  }
  ReclaimOutcome out = ReclaimLeaks(candidates, dry_run, "/proc", agent_id_, deadline, clock_);
  if (!dry_run) Record(out);
  return out;
}

void Reclaimer::Record(const ReclaimOutcome& out) {
  std::vector<AgentEvent> events;
  for (const LeakRecord& l : out.reclaimed) {
    log_(LogLevel::kInfo, RemovalLine(l));
    AgentEvent e =
        MakeEvent(EventKind::kLeakReclaimed, l.pod, "reclaimed " + Where(l) + " (" + FormatSize(l.bytes) + ")");
    e.bytes = l.bytes;
    e.path = l.path;
    events.push_back(e);
  }
  {
    MutexLock lock(&mu_);
    for (const SkippedLeak& k : out.skipped) {
      if (k.reason == SkipReason::kVerdict) continue;  // not a candidate: nothing was refused
      if (k.reason == SkipReason::kPinned) {           // removed, but not freed
        counters_.pinned++;
        continue;
      }
      counters_.kept[k.reason]++;
      if (k.reason == SkipReason::kError) counters_.errors++;
    }
    counters_.raced += out.raced;
  }
  for (const SkippedLeak& k : out.skipped) {
    if (k.reason == SkipReason::kError || k.reason == SkipReason::kPinned) {
      log_(LogLevel::kError,
           "reclaim of " + Where(k.leak) + (k.reason == SkipReason::kError ? " failed: " : ": ") + k.message);
    }
  }
  if (out.raced) {
    log_(LogLevel::kError, std::to_string(out.raced) +
                               " removed file(s) were opened by a process whose lookup preceded the quarantine "
                               "rename (see docs/reclaim-safety.md)");
  }
  reclaimed_total_ += static_cast<int64_t>(out.reclaimed.size());
  reclaimed_bytes_total_ += out.freed_bytes;
  events_->Publish(events);
}

ReclaimCounters Reclaimer::counters() const {
  MutexLock l(&mu_);
  return counters_;
}

}  // namespace shmkeeper
