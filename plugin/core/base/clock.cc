#include "base/clock.h"

#include <algorithm>

namespace shmkeeper {

namespace {

class SteadyClock : public Clock {
 public:
  TimePoint Now() override { return std::chrono::steady_clock::now(); }
  bool WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) override SHMK_REQUIRES(mu) {
    return cv->WaitUntil(mu, deadline);
  }
};

}  // namespace

void Clock::SleepFor(std::chrono::nanoseconds d) {
  // Signalled by no one (FakeClock::Advance aside): only the deadline ends a
  // sleep. Shared by every sleeper and never destroyed: an Advance may still
  // signal a sleep that has just ended.
  static Mutex* mu = new Mutex();
  static CondVar* never = new CondVar();
  MutexLock l(mu);
  const TimePoint until = Now() + std::chrono::duration_cast<TimePoint::duration>(d);
  while (WaitUntil(never, mu, until)) {
  }
}

Clock* RealClock() {
  static SteadyClock* clock = new SteadyClock();  // never destroyed: threads may outlive static destruction
  return clock;
}

bool FakeClock::WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) {
  // Registered before the time is read: an Advance that this read misses
  // copies the list after registering, so it signals this waiter, and it
  // takes `mu` first, so the signal cannot slip between the read and the wait.
  {
    MutexLock l(&mu_);
    waiters_.push_back({cv, mu});
  }
  const bool blocks = Now() < deadline;
  {
    MutexLock l(&mu_);
    if (blocks) ++waits_;
  }
  changed_.SignalAll();
  if (blocks) cv->Wait(mu);
  {
    MutexLock l(&mu_);
    auto it = std::find_if(waiters_.begin(), waiters_.end(), [&](const Waiter& w) { return w.cv == cv && w.mu == mu; });
    if (it != waiters_.end()) waiters_.erase(it);
  }
  return Now() < deadline;
}

std::chrono::system_clock::time_point FakeClock::WallNow() {
  return wall_start_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           std::chrono::nanoseconds(now_ns_.load() - kStartNs));
}

void FakeClock::Advance(std::chrono::nanoseconds d) {
  now_ns_.fetch_add(d.count());
  std::vector<Waiter> waiters;
  {
    MutexLock l(&mu_);
    waiters = waiters_;
  }
  for (const Waiter& w : waiters) {
    w.mu->Lock();
    w.mu->Unlock();
    w.cv->SignalAll();
  }
}

uint64_t FakeClock::Waits() {
  MutexLock l(&mu_);
  return waits_;
}

bool FakeClock::AwaitWaits(uint64_t n) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  MutexLock l(&mu_);
  while (waits_ < n) {
    if (!changed_.WaitUntil(&mu_, deadline)) return waits_ >= n;
  }
  return true;
}

}  // namespace shmkeeper
