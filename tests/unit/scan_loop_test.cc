// ScanLoop's timing rules against a FakeClock (issue 35: timing rules tested
// by advancing a fake clock, never by waiting). Each step advances the clock
// and waits until the loop blocks on it again, so every scan the step allows
// has run when the step returns, and none that it does not.
#include "node/scan_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "base/clock.h"

namespace shmkeeper {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct Scan {
  Clock::TimePoint at;
  ScanDepth depth;
  std::string reason;
};

class ScanLoopTest : public ::testing::Test {
 protected:
  // A loop with `interval` and `audit`; with `observer` its scans observe
  // and `overflow_` answers TakeOverflow.
  void StartLoop(milliseconds interval, milliseconds audit, bool observer) {
    start_ = clock_.Now();
    loop_ = std::make_unique<ScanLoop>(
        interval, audit,
        [this](ScanDepth depth, const char* reason) {
          MutexLock l(&mu_);
          scans_.push_back({clock_.Now(), depth, reason});
        },
        &clock_);
    ScanLoop::TakeOverflowFn take;
    if (observer) take = [this] { return overflow_.exchange(false); };
    uint64_t waits = clock_.Waits();
    loop_->Start(std::move(take));
    ASSERT_TRUE(clock_.AwaitWaits(waits + 1)) << "the loop never waited on the clock";
  }

  // Advances the clock by `d` and returns once the loop waits again.
  void Step(std::chrono::nanoseconds d) {
    uint64_t waits = clock_.Waits();
    clock_.Advance(d);
    ASSERT_TRUE(clock_.AwaitWaits(waits + 1)) << "the loop did not wait again";
  }
  // Runs `poke` and returns once the loop waits again (on the gap).
  void PokeWith(void (ScanLoop::*poke)()) {
    uint64_t waits = clock_.Waits();
    (loop_.get()->*poke)();
    ASSERT_TRUE(clock_.AwaitWaits(waits + 1)) << "the loop did not wait again";
  }

  std::vector<Scan> Scans() {
    MutexLock l(&mu_);
    return scans_;
  }
  double SecondsOf(const Scan& s) { return std::chrono::duration<double>(s.at - start_).count(); }

  void TearDown() override {
    if (loop_) loop_->Stop();
  }

  FakeClock clock_;
  Clock::TimePoint start_;
  std::atomic<bool> overflow_{false};
  Mutex mu_;
  std::vector<Scan> scans_ SHMK_GUARDED_BY(mu_);
  std::unique_ptr<ScanLoop> loop_;
};

TEST_F(ScanLoopTest, ScansEveryIntervalAndNotBefore) {
  StartLoop(seconds(10), seconds(600), /*observer=*/false);
  Step(milliseconds(9999));
  EXPECT_TRUE(Scans().empty());
  Step(milliseconds(1));
  ASSERT_EQ(Scans().size(), 1u);
  EXPECT_EQ(SecondsOf(Scans()[0]), 10.0);
  EXPECT_EQ(Scans()[0].depth, ScanDepth::kWalk);  // scan mode: every scan walks
  EXPECT_EQ(Scans()[0].reason, "scan");
  Step(seconds(10));
  EXPECT_EQ(Scans().size(), 2u);
}

TEST_F(ScanLoopTest, APokeScansOneSecondAfterTheLastScanNotSooner) {
  StartLoop(seconds(10), seconds(600), false);
  PokeWith(&ScanLoop::Poke);
  EXPECT_TRUE(Scans().empty());
  Step(milliseconds(999));
  EXPECT_TRUE(Scans().empty());
  Step(milliseconds(1));
  ASSERT_EQ(Scans().size(), 1u);
  EXPECT_EQ(SecondsOf(Scans()[0]), 1.0);
  // Five pokes within the next second buy one scan, a second after the last.
  for (int i = 0; i < 5; ++i) {
    PokeWith(&ScanLoop::Poke);
    Step(milliseconds(100));
  }
  EXPECT_EQ(Scans().size(), 1u);
  Step(milliseconds(500));
  ASSERT_EQ(Scans().size(), 2u);
  EXPECT_EQ(SecondsOf(Scans()[1]), 2.0);
}

TEST_F(ScanLoopTest, AUsagePokeWaitsFiveSecondsAndAPokeShortensIt) {
  StartLoop(seconds(60), seconds(600), true);
  PokeWith(&ScanLoop::PokeUsage);
  Step(milliseconds(4999));
  EXPECT_TRUE(Scans().empty()) << "a usage change bought a scan before kUsageGap";
  Step(milliseconds(1));
  ASSERT_EQ(Scans().size(), 1u);
  EXPECT_EQ(SecondsOf(Scans()[0]), 5.0);
  EXPECT_EQ(Scans()[0].depth, ScanDepth::kObserve);
  // A usage poke, then a structural one 0.5 s later: the scan comes 1 s after the last.
  PokeWith(&ScanLoop::PokeUsage);
  Step(milliseconds(500));
  EXPECT_EQ(Scans().size(), 1u);
  PokeWith(&ScanLoop::Poke);
  Step(milliseconds(500));
  ASSERT_EQ(Scans().size(), 2u);
  EXPECT_EQ(SecondsOf(Scans()[1]), 6.0);
}

TEST_F(ScanLoopTest, AUsagePokeWaitsAtMostTheInterval) {
  StartLoop(seconds(2), seconds(600), true);
  Step(seconds(2));  // the periodic scan at 2 s
  ASSERT_EQ(Scans().size(), 1u);
  PokeWith(&ScanLoop::PokeUsage);
  Step(milliseconds(1999));
  EXPECT_EQ(Scans().size(), 1u);
  Step(milliseconds(1));
  ASSERT_EQ(Scans().size(), 2u);
  EXPECT_EQ(SecondsOf(Scans()[1]), 4.0);
}

TEST_F(ScanLoopTest, LostEventsBuyAWalkAtMostEveryTenSeconds) {
  StartLoop(seconds(1), seconds(600), true);
  overflow_ = true;
  Step(seconds(1));
  ASSERT_EQ(Scans().size(), 1u);
  EXPECT_EQ(Scans()[0].depth, ScanDepth::kWalk);
  EXPECT_EQ(Scans()[0].reason, "overflow");
  overflow_ = true;  // lost again right away: observed scans until 10 s after the walk
  for (int i = 0; i < 9; ++i) Step(seconds(1));
  ASSERT_EQ(Scans().size(), 10u);
  for (size_t i = 1; i < 10; ++i) EXPECT_EQ(Scans()[i].depth, ScanDepth::kObserve) << "scan " << i;
  EXPECT_TRUE(overflow_) << "the pending overflow was taken before its walk was due";
  Step(seconds(1));
  ASSERT_EQ(Scans().size(), 11u);
  EXPECT_EQ(Scans()[10].depth, ScanDepth::kWalk);
  EXPECT_EQ(Scans()[10].reason, "overflow");
  EXPECT_EQ(SecondsOf(Scans()[10]), 11.0);
}

TEST_F(ScanLoopTest, TheAuditWalksEveryAuditIntervalAndObservesOtherwise) {
  StartLoop(seconds(10), seconds(30), true);
  for (int i = 0; i < 3; ++i) Step(seconds(10));
  ASSERT_EQ(Scans().size(), 3u);
  EXPECT_EQ(Scans()[0].depth, ScanDepth::kObserve);
  EXPECT_EQ(Scans()[1].depth, ScanDepth::kObserve);
  EXPECT_EQ(Scans()[2].depth, ScanDepth::kWalk);
  EXPECT_EQ(Scans()[2].reason, "audit");
  EXPECT_EQ(SecondsOf(Scans()[2]), 30.0);
  for (int i = 0; i < 3; ++i) Step(seconds(10));
  ASSERT_EQ(Scans().size(), 6u);
  EXPECT_EQ(Scans()[5].reason, "audit");
  EXPECT_EQ(Scans()[4].depth, ScanDepth::kObserve);
}

TEST_F(ScanLoopTest, AnAuditDueBeforeTheIntervalIsNotLate) {
  StartLoop(seconds(60), seconds(15), true);
  Step(seconds(15));
  ASSERT_EQ(Scans().size(), 1u);
  EXPECT_EQ(Scans()[0].reason, "audit");
}

TEST_F(ScanLoopTest, SetIntervalTakesEffectAtTheNextWait) {
  StartLoop(seconds(60), seconds(600), false);
  uint64_t waits = clock_.Waits();
  loop_->SetInterval(seconds(2));
  ASSERT_TRUE(clock_.AwaitWaits(waits + 1));
  // The wait under way keeps its deadline (60 s); the next ones use 2 s.
  Step(seconds(60));
  ASSERT_EQ(Scans().size(), 1u);
  Step(seconds(2));
  EXPECT_EQ(Scans().size(), 2u);
}

TEST_F(ScanLoopTest, StopEndsAWaitWithoutAScan) {
  StartLoop(seconds(60), seconds(600), true);
  PokeWith(&ScanLoop::PokeUsage);
  loop_->Stop();
  EXPECT_TRUE(Scans().empty());
}

}  // namespace
}  // namespace shmkeeper
