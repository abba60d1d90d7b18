// The agent's scan loop: one thread that asks for a scan every
// agent.scanInterval and soon after a Poke (at most one a second beyond the
// periodic ones), or after a PokeUsage (at most one per kUsageGap, or per
// interval when that is shorter: a workload that creates and removes files
// all the time buys a refresh of its figures every 5 s, not every second).
// With the observer it also picks how deep: a walk of /proc after the
// observer lost events (at most one per kOverflowWalkGap, so that a flood of
// opens cannot buy a walk a second) and for the audit every
// agent.auditInterval; an observer scan otherwise. Without it every scan walks.
//
// Time is the injected Clock's (RealClock() in the agent; unit tests advance
// a FakeClock: scan_loop_test.cc).
//
// Ownership: owns its thread; borrows the clock, which must outlive it. The
// scan and take-overflow callbacks are the agent's (the latter asks the
// observer, and must stay valid until Stop()).
// Thread-safety: Poke and SetInterval may be called from any thread (the
// observer's, the watcher's, the event receiver's, a reload); Start and Stop
// from the owner's. The callback runs on the loop's thread without the loop's
// mutex held, so Poke never waits for a scan; Stop waits for a running scan
// to end.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

#include "base/clock.h"
#include "base/mutex.h"
#include "node/node_scan.h"

namespace shmkeeper {

class ScanLoop {
 public:
  // `reason` names the scan for the walk counters: scan, overflow, audit.
  using ScanFn = std::function<void(ScanDepth depth, const char* reason)>;
  // True once after the observer lost events (Observer::TakeOverflow).
  using TakeOverflowFn = std::function<bool()>;
  static constexpr auto kMinGap = std::chrono::seconds(1);
  static constexpr auto kUsageGap = std::chrono::seconds(5);
  static constexpr auto kOverflowWalkGap = std::chrono::seconds(10);

  ScanLoop(std::chrono::milliseconds interval, std::chrono::milliseconds audit_interval, ScanFn scan,
           Clock* clock = RealClock());
  ~ScanLoop() { Stop(); }
  ScanLoop(const ScanLoop&) = delete;
  ScanLoop& operator=(const ScanLoop&) = delete;

  // Starts the thread; its first scan comes after the first interval or poke.
  // With `take_overflow` (the observer runs) scans observe, and walk after
  // lost events and for the audit; without it (scan mode) every scan walks.
  void Start(TakeOverflowFn take_overflow);
  // Asks for a scan soon: something was created or went (a container, a
  // pod's tmpfs), or events were lost.
  void Poke() SHMK_EXCLUDES(mu_);
  // Asks for a refresh of the figures: files were written, created or
  // removed on a watched tmpfs (kUsageGap after the last scan).
  void PokeUsage() SHMK_EXCLUDES(mu_);
  // The periodic interval from the next wait on (a reload of agent.scanInterval).
  void SetInterval(std::chrono::milliseconds interval) SHMK_EXCLUDES(mu_);
  // Ends the thread (idempotent).
  void Stop() SHMK_EXCLUDES(mu_);

 private:
  void Run() SHMK_EXCLUDES(mu_);

  const std::chrono::milliseconds audit_interval_;
  const ScanFn scan_;
  Clock* const clock_;
  TakeOverflowFn take_overflow_;  // set by Start before the thread runs
  Mutex mu_;
  CondVar cv_;
  std::chrono::milliseconds interval_ SHMK_GUARDED_BY(mu_);
  bool poked_ SHMK_GUARDED_BY(mu_) = false;        // by Poke: kMinGap
  bool usage_poked_ SHMK_GUARDED_BY(mu_) = false;  // by PokeUsage only: kUsageGap
  bool stop_ SHMK_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shmkeeper
