#include "node/scan_loop.h"

#include <pthread.h>

#include <algorithm>

namespace shmkeeper {

ScanLoop::ScanLoop(std::chrono::milliseconds interval, std::chrono::milliseconds audit_interval, ScanFn scan,
                   Clock* clock)
    : audit_interval_(audit_interval), scan_(std::move(scan)), clock_(clock), interval_(interval) {}

void ScanLoop::Start(TakeOverflowFn take_overflow) {
  take_overflow_ = std::move(take_overflow);
  thread_ = std::thread([this] { Run(); });
}

void ScanLoop::Poke() {
  {
    MutexLock l(&mu_);
    poked_ = true;
  }
  cv_.SignalAll();
}

void ScanLoop::PokeUsage() {
  {
    MutexLock l(&mu_);
    usage_poked_ = true;
  }
  cv_.SignalAll();
}

void ScanLoop::SetInterval(std::chrono::milliseconds interval) {
  {
    MutexLock l(&mu_);
    interval_ = interval;
  }
  cv_.SignalAll();
}

void ScanLoop::Stop() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void ScanLoop::Run() {
  ::pthread_setname_np(::pthread_self(), "shmk-scan");  // top -H, the benchmarks' per-thread CPU
  using Steady = Clock::TimePoint::clock;
  mu_.Lock();
  auto last = clock_->Now();
  auto next_audit = last + audit_interval_;
  auto last_overflow_walk = Steady::time_point{};
  while (!stop_) {
    auto wait = std::chrono::duration_cast<Steady::duration>(interval_);
    if (take_overflow_) wait = std::max(Steady::duration::zero(), std::min(wait, next_audit - clock_->Now()));
    // Until poked, stopped or the wait is over (a wakeup for anything else waits on).
    for (auto until = clock_->Now() + wait; !stop_ && !poked_ && !usage_poked_;) {
      if (!clock_->WaitUntil(&cv_, &mu_, until)) break;
    }
    if (stop_) break;
    // The earliest the asked-for scan may run: kMinGap after the last for a
    // Poke, kUsageGap (at most the interval) for a usage change alone; a
    // Poke during the longer wait shortens it.
    while (!stop_ && (poked_ || usage_poked_)) {
      auto gap = poked_
                     ? Steady::duration(kMinGap)
                     : std::min<Steady::duration>(kUsageGap, std::chrono::duration_cast<Steady::duration>(interval_));
      if (!clock_->WaitUntil(&cv_, &mu_, last + gap)) break;
    }
    if (stop_) break;
    poked_ = false;
    usage_poked_ = false;
    // With the observer, /proc is walked only after lost events and for the
    // slow audit; every other scan asks the observer.
    ScanDepth depth = ScanDepth::kWalk;
    const char* reason = "scan";
    if (take_overflow_) {
      depth = ScanDepth::kObserve;
      // Lost events make every cached verdict stale, so scans re-probe every
      // file until then; the walk (pids, O_PATH holders) runs at most once
      // per kOverflowWalkGap.
      if (clock_->Now() - last_overflow_walk >= kOverflowWalkGap && take_overflow_()) {
        last_overflow_walk = clock_->Now();
        depth = ScanDepth::kWalk;
        reason = "overflow";
      } else if (clock_->Now() >= next_audit) {
        depth = ScanDepth::kWalk;
        reason = "audit";
      }
      if (depth == ScanDepth::kWalk) next_audit = clock_->Now() + audit_interval_;
    }
    mu_.Unlock();
    scan_(depth, reason);
    last = clock_->Now();
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace shmkeeper
