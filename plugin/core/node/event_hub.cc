#include "node/event_hub.h"

namespace shmkeeper {
namespace {

constexpr size_t kMaxQueuedEvents = 1024;

}  // namespace

std::unique_ptr<EventHub::Subscription> EventHub::Subscribe() {
  auto sub = std::make_unique<Subscription>();
  sub->hub_ = this;
  std::lock_guard<std::mutex> l(mu_);
  subs_.push_back(sub.get());
  return sub;
}

EventHub::Subscription::~Subscription() {
  std::lock_guard<std::mutex> l(hub_->mu_);
  std::erase(hub_->subs_, this);
}

std::vector<AgentEvent> EventHub::Subscription::Next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(hub_->mu_);
  hub_->cv_.wait_for(l, timeout, [&] { return !queue_.empty(); });
  std::vector<AgentEvent> out(queue_.begin(), queue_.end());
  queue_.clear();
  return out;
}

void EventHub::Publish(const std::vector<AgentEvent>& events) {
  if (events.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  for (Subscription* s : subs_) {
    for (const AgentEvent& e : events) {
      if (s->queue_.size() >= kMaxQueuedEvents) s->queue_.pop_front();
      s->queue_.push_back(e);
    }
  }
  cv_.notify_all();
}

const char* EventKindName(EventKind kind) {
  static constexpr const char* kNames[] = {"?",          "pod_started", "pod_stopped",   "resize_applied",
                                           "usage_high", "leak_found",  "leak_reclaimed"};
  return kNames[static_cast<int>(kind)];
}

}  // namespace shmkeeper
