// Time as the agent's timing rules read it, and waits on it (leveldb's Env,
// for time only). The agent runs on RealClock(); tests drive a FakeClock so
// that a rule such as "at most one scan per 5 s" is checked by advancing
// time, never by waiting for it.
//
// Two times: Now() (steady: every timing rule, every wait) and WallNow()
// (the calendar: timestamps people read, and ages against the kernel's file
// and segment times). Code that shows a time without an injected clock reads
// RealClock()->WallNow(): every read of the time goes through here.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/mutex.h"

namespace shmkeeper {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() = 0;
  // Waits on `cv` (with `mu` held, released while waiting) until it is
  // signalled or `deadline` by this clock passed; false when it passed.
  // Spurious wakeups return true: callers wait in a loop.
  virtual bool WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) SHMK_REQUIRES(mu) = 0;
  // The calendar time (std::chrono::system_clock's by default).
  virtual std::chrono::system_clock::time_point WallNow() { return std::chrono::system_clock::now(); }
  // Waits until `d` by this clock has passed, nothing else ending the wait
  // (a sleep: on RealClock() std::this_thread::sleep_for's).
  void SleepFor(std::chrono::nanoseconds d);
};

// std::chrono::steady_clock. Owned by no one; lives for the process.
Clock* RealClock();

// A clock that moves only when Advance is called. A WaitUntil whose deadline
// is not reached waits until it is signalled or Advance reaches its deadline.
// Waits() counts the waits that blocked; a test waits for the next one
// (AwaitWaits) to know that the code under test has done all an Advance
// let it do and is blocked on the clock again. WallNow() starts at the real
// calendar time of construction and moves with Advance (files written by the
// test just before read as Advance-old).
class FakeClock : public Clock {
 public:
  FakeClock() = default;
  TimePoint Now() override { return TimePoint(std::chrono::nanoseconds(now_ns_.load())); }
  std::chrono::system_clock::time_point WallNow() override;
  bool WaitUntil(CondVar* cv, Mutex* mu, TimePoint deadline) override SHMK_REQUIRES(mu);
  // Moves time forward and wakes every waiter (each rechecks its deadline).
  void Advance(std::chrono::nanoseconds d) SHMK_EXCLUDES(mu_);
  // WaitUntil calls that blocked (their deadline not reached) so far.
  uint64_t Waits() SHMK_EXCLUDES(mu_);
  // Blocks until Waits() >= n (a real-time deadline of 10 s against a hung
  // test); false when it passed.
  bool AwaitWaits(uint64_t n) SHMK_EXCLUDES(mu_);

 private:
  struct Waiter {
    CondVar* cv;
    Mutex* mu;
  };
  static constexpr int64_t kStartNs = std::chrono::nanoseconds(std::chrono::hours(1)).count();
  std::atomic<int64_t> now_ns_{kStartNs};
  const std::chrono::system_clock::time_point wall_start_ = std::chrono::system_clock::now();
  Mutex mu_;  // after any waiter's mutex: WaitUntil takes it with theirs held
  CondVar changed_;
  std::vector<Waiter> waiters_ SHMK_GUARDED_BY(mu_);
  uint64_t waits_ SHMK_GUARDED_BY(mu_) = 0;
};

}  // namespace shmkeeper
