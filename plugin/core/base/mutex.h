// A mutex the compiler checks: std::mutex wrapped with clang's thread-safety
// annotations (base/thread_annotations.h), as leveldb's port::Mutex and
// abseil's Mutex are. Members say SHMK_GUARDED_BY(mu_), functions SHMK_REQUIRES(mu_) or
// SHMK_EXCLUDES(mu_), and the clang build (-Wthread-safety -Werror) refuses an
// access without the lock.
//
//   Mutex mu_;
//   int n_ SHMK_GUARDED_BY(mu_) = 0;
//   void Add() SHMK_EXCLUDES(mu_) { MutexLock l(&mu_); n_++; }
//
// CondVar waits on a Mutex the caller holds (SHMK_REQUIRES it); write the wait as
// a loop over the guarded condition, which the analysis then checks too:
//   while (!ready_) cv_.Wait(&mu_);
//
// Thread-safety: as std::mutex and std::condition_variable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "base/thread_annotations.h"

namespace shmkeeper {

class SHMK_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() SHMK_ACQUIRE() { mu_.lock(); }
  void Unlock() SHMK_RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds it (no run-time check).
  void AssertHeld() const SHMK_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SHMK_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) SHMK_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() SHMK_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable over a Mutex. Spurious wakeups happen: wait in a loop.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Releases `mu` while waiting; holds it again on return.
  void Wait(Mutex* mu) SHMK_REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    cv_.wait(l);
    l.release();
  }
  // As Wait; returns false when `deadline` passed.
  template <class Clock, class Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline) SHMK_REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    bool woken = cv_.wait_until(l, deadline) == std::cv_status::no_timeout;
    l.release();
    return woken;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace shmkeeper
