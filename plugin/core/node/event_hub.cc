#include "node/event_hub.h"

#include <map>
#include <set>

#include "base/bytes.h"
#include "base/clock.h"

namespace shmkeeper {
namespace {

constexpr size_t kMaxQueuedEvents = 1024;

std::string PodName(const PodKey& k) { return k.ns.empty() ? k.name : k.ns + "/" + k.name; }

}  // namespace

std::unique_ptr<EventHub::Subscription> EventHub::Subscribe() {
  auto sub = std::make_unique<Subscription>();
  sub->hub_ = this;
  MutexLock l(&mu_);
  queues_[sub.get()];
  return sub;
}

void EventHub::Remove(Subscription* sub) {
  MutexLock l(&mu_);
  queues_.erase(sub);
}

std::vector<AgentEvent> EventHub::Take(Subscription* sub, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock l(&mu_);
  std::deque<AgentEvent>& queue = queues_[sub];
  while (queue.empty() && cv_.WaitUntil(&mu_, deadline)) {
  }
  std::vector<AgentEvent> out(queue.begin(), queue.end());
  queue.clear();
  return out;
}

void EventHub::Publish(const std::vector<AgentEvent>& events) {
  if (events.empty()) return;
  MutexLock l(&mu_);
  for (auto& [sub, queue] : queues_) {
    for (const AgentEvent& e : events) {
      if (queue.size() >= kMaxQueuedEvents) queue.pop_front();
      queue.push_back(e);
    }
  }
  cv_.SignalAll();
}

const char* EventKindName(EventKind kind) {
  static constexpr const char* kNames[] = {"?",          "pod_started", "pod_stopped",    "resize_applied",
                                           "usage_high", "leak_found",  "leak_reclaimed", "files_over_limit"};
  return kNames[static_cast<int>(kind)];
}

AgentEvent MakeEvent(EventKind kind, const PodKey& pod, std::string msg) {
  AgentEvent e;
  e.time = RealClock()->WallNow();  // shown to people: the calendar, whatever clock the rules run on
  e.kind = kind;
  e.pod = pod;
  e.message = std::move(msg);
  return e;
}

namespace {

// What changed for one pod: started (not at the first snapshot), resized,
// over 80 % / 95 % full (crossing it, or over it at first sight), over the
// files limit. `old` is its record in the previous snapshot, if any.
void PodEvents(const PodRecord* old, const PodRecord& p, bool first, std::vector<AgentEvent>* out) {
  if (!old && !first) out->push_back(MakeEvent(EventKind::kPodStarted, p.key, PodName(p.key) + " started"));
  if (old && old->size_bytes && p.size_bytes && old->size_bytes != p.size_bytes) {
    AgentEvent e =
        MakeEvent(EventKind::kResizeApplied, p.key,
                  "/dev/shm resized from " + FormatSize(old->size_bytes) + " to " + FormatSize(p.size_bytes));
    e.bytes = p.size_bytes;
    out->push_back(e);
  }
  for (int pct : {80, 95}) {
    auto over = [pct](const PodRecord& r) { return r.size_bytes > 0 && r.used_bytes * 100 >= r.size_bytes * pct; };
    if (over(p) && !(old && over(*old))) {
      AgentEvent e = MakeEvent(EventKind::kUsageHigh, p.key,
                               "/dev/shm " + std::to_string(pct) + "% full (" + FormatSize(p.used_bytes) + " of " +
                                   FormatSize(p.size_bytes) + ")");
      e.bytes = p.used_bytes;
      e.threshold_percent = pct;
      out->push_back(e);
    }
  }
  if (p.files_over_limit && !(old && old->files_over_limit)) {
    out->push_back(MakeEvent(EventKind::kFilesOverLimit, p.key,
                             "/dev/shm holds more than " + std::to_string(p.files_limit) +
                                 " files (agent.maxFilesPerPod): not listed further, every file kept"));
  }
}

// Segments leaked in `next` that were not leaked in `prev`. Only a leaked
// verdict is news: unheld segments (scratch files, a creator still running)
// are listed by ListLeaks, not announced.
void LeakEvents(const NodeSnapshot* prev, const NodeSnapshot& next, std::vector<AgentEvent>* out) {
  std::set<std::pair<std::string, int32_t>> known;
  if (prev) {
    for (const LeakRecord& l : prev->leaks) {
      if (l.state == LeakState::kLeaked) known.insert({l.pod.uid + l.path, l.sysv_id});
    }
  }
  for (const LeakRecord& l : next.leaks) {
    if (l.state != LeakState::kLeaked || known.count({l.pod.uid + l.path, l.sysv_id})) continue;
    AgentEvent e = MakeEvent(EventKind::kLeakFound, l.pod,
                             std::string(LeakStateName(l.state)) + " segment " +
                                 (l.sysv_id >= 0 ? "sysv:" + std::to_string(l.sysv_id) : l.path) + " (" +
                                 FormatSize(l.bytes) + ")");
    e.bytes = l.bytes;
    e.path = l.path;
    out->push_back(e);
  }
}

}  // namespace

std::vector<AgentEvent> DiffSnapshots(const NodeSnapshot* prev, const NodeSnapshot& next) {
  std::vector<AgentEvent> out;
  std::map<std::string, const PodRecord*> before;
  if (prev) {
    for (const PodRecord& p : prev->pods) before[p.key.uid] = &p;
  }
  std::set<std::string> seen;
  for (const PodRecord& p : next.pods) {
    seen.insert(p.key.uid);
    auto it = before.find(p.key.uid);
    PodEvents(it == before.end() ? nullptr : it->second, p, prev == nullptr, &out);
  }
  for (const auto& [uid, p] : before) {
    if (!seen.count(uid)) out.push_back(MakeEvent(EventKind::kPodStopped, p->key, PodName(p->key) + " stopped"));
  }
  LeakEvents(prev, next, &out);
  return out;
}

}  // namespace shmkeeper
