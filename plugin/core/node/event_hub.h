// Agent events (pods started and stopped, resizes, usage, leaks) and their
// fan-out to watch subscribers.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "node/node_scan.h"

namespace shmkeeper {

enum class EventKind {
  kPodStarted = 1,
  kPodStopped,
  kResizeApplied,
  kUsageHigh,
  kLeakFound,
  kLeakReclaimed,
  kFilesOverLimit
};

struct AgentEvent {
  std::chrono::system_clock::time_point time;
  EventKind kind = EventKind::kPodStarted;
  PodKey pod;
  std::string message;
  int64_t bytes = 0;
  int32_t threshold_percent = 0;
  std::string path;
};

// A bounded queue per subscriber; a slow subscriber loses its oldest events.
class EventHub {
 public:
  class Subscription {
   public:
    // Waits up to `timeout` for events; returns what is queued (maybe none).
    std::vector<AgentEvent> Next(std::chrono::milliseconds timeout) { return hub_->Take(this, timeout); }
    ~Subscription() { hub_->Remove(this); }

   private:
    friend class EventHub;
    EventHub* hub_ = nullptr;
  };
  std::unique_ptr<Subscription> Subscribe() SHMK_EXCLUDES(mu_);
  void Publish(const std::vector<AgentEvent>& events) SHMK_EXCLUDES(mu_);

 private:
  std::vector<AgentEvent> Take(Subscription* sub, std::chrono::milliseconds timeout) SHMK_EXCLUDES(mu_);
  void Remove(Subscription* sub) SHMK_EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;
  std::map<Subscription*, std::deque<AgentEvent>> queues_ SHMK_GUARDED_BY(mu_);  // one per subscriber
};

const char* EventKindName(EventKind kind);

// An event of `kind` about `pod`, stamped now.
AgentEvent MakeEvent(EventKind kind, const PodKey& pod, std::string msg);

// The events between two published snapshots (`prev` null: the first scan,
// which announces no pod as started): pods started and stopped, /dev/shm
// resized, usage crossing 80% and 95% (or over it at first sight), a tmpfs
// going over agent.maxFilesPerPod (or over it at first sight), and leaked
// verdicts not leaked before. Unheld segments are not announced. Pure.
std::vector<AgentEvent> DiffSnapshots(const NodeSnapshot* prev, const NodeSnapshot& next);

}  // namespace shmkeeper
