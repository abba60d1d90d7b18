#include "node/sender_limiter.h"

#include <algorithm>

namespace shmkeeper {

SenderLimiter::SenderLimiter(Limits limits) : limits_(limits) { total_.tokens = limits_.total_burst; }

void SenderLimiter::Refill(Bucket* b, double rate, double burst, Clock::time_point now) {
  if (b->last != Clock::time_point{} && now > b->last) {
    b->tokens = std::min(burst, b->tokens + std::chrono::duration<double>(now - b->last).count() * rate);
  }
  b->last = now;
}

void SenderLimiter::Forget(Clock::time_point now) {
  // A bucket idle long enough to be full again is the same as no bucket.
  const auto full_after = std::chrono::duration<double>(limits_.per_sender_burst / limits_.per_sender_rate);
  for (auto it = senders_.begin(); it != senders_.end();) {
    it = now - it->second.last >= full_after ? senders_.erase(it) : std::next(it);
  }
  if (senders_.size() >= limits_.max_senders) senders_.clear();  // a storm of senders: the total bucket still holds
}

bool SenderLimiter::Allow(pid_t sender, Clock::time_point now) {
  Refill(&total_, limits_.total_rate, limits_.total_burst, now);
  auto it = senders_.find(sender);
  if (it == senders_.end()) {
    if (senders_.size() >= limits_.max_senders) Forget(now);
    it = senders_.emplace(sender, Bucket{limits_.per_sender_burst, now}).first;
  }
  Bucket& b = it->second;
  Refill(&b, limits_.per_sender_rate, limits_.per_sender_burst, now);
  if (b.tokens < 1) return false;
  if (total_.tokens < 1) return false;
  b.tokens -= 1;
  total_.tokens -= 1;
  return true;
}

}  // namespace shmkeeper
