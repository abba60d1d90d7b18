// The Reporter directly (issue 35: timing rules tested by advancing a fake
// clock): every report is counted, at most kLinesPerWindow lines per counter
// are logged within a window of the injected clock, and the first line of the
// next window says how many were not logged. Also the Clock's own sleep and
// calendar time as a FakeClock gives them.
#include "node/reporter.h"

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "base/clock.h"

namespace shmkeeper {
namespace {

class ReporterTest : public ::testing::Test {
 protected:
  ReporterTest() : reporter_(&clock_) {
    reporter_.SetLog([this](LogLevel level, const std::string& line) {
      EXPECT_EQ(level, LogLevel::kWarn);
      lines_.push_back(line);
    });
  }

  FakeClock clock_;
  Reporter reporter_;
  std::vector<std::string> lines_;
};

TEST_F(ReporterTest, RepeatsWithinTheWindowAreCountedNotLogged) {
  const size_t n = Reporter::kLinesPerWindow;
  for (int i = 0; i < 25; ++i) reporter_.Report(kWatcherErrors, "line " + std::to_string(i));
  EXPECT_EQ(reporter_.Count(kWatcherErrors), 25);
  ASSERT_EQ(lines_.size(), n) << "the first lines of a window are logged, the rest not";
  EXPECT_EQ(lines_.front(), "line 0");
  EXPECT_EQ(lines_.back(), "line 9");
  clock_.Advance(Reporter::kWindow - std::chrono::nanoseconds(1));
  reporter_.Report(kWatcherErrors, "still suppressed");
  EXPECT_EQ(lines_.size(), n) << "a repeat within the window was logged";
  EXPECT_EQ(reporter_.Count(kWatcherErrors), 26);
  clock_.Advance(std::chrono::nanoseconds(1));
  reporter_.Report(kWatcherErrors, "next window");
  ASSERT_EQ(lines_.size(), n + 1) << "a report after the window was not logged";
  EXPECT_EQ(lines_.back(), "16 more watcher_errors were not logged; next window");
  reporter_.Report(kWatcherErrors, "second of the new window");
  ASSERT_EQ(lines_.size(), n + 2);
  EXPECT_EQ(lines_.back(), "second of the new window") << "the summary was repeated";
  EXPECT_EQ(reporter_.Count(kWatcherErrors), 28);
}

TEST_F(ReporterTest, EachCounterHasItsOwnWindow) {
  for (int i = 0; i < 11; ++i) reporter_.Report(kDockerEnrichmentErrors, "docker");
  ASSERT_EQ(lines_.size(), static_cast<size_t>(Reporter::kLinesPerWindow));
  reporter_.Report(kDatagramsReceiveErrors, "receive");
  ASSERT_EQ(lines_.size(), static_cast<size_t>(Reporter::kLinesPerWindow) + 1) << "one noisy counter silenced another";
  EXPECT_EQ(lines_.back(), "receive");
  EXPECT_EQ(reporter_.Count(kDockerEnrichmentErrors), 11);
  EXPECT_EQ(reporter_.Count(kDatagramsReceiveErrors), 1);
  EXPECT_EQ(reporter_.Count(kDatagramsRateLimited), 0);
}

TEST_F(ReporterTest, AWindowWithNothingDroppedStartsWithoutASummary) {
  reporter_.Report(kWatcherErrors, "one");
  clock_.Advance(Reporter::kWindow);
  reporter_.Report(kWatcherErrors, "two");
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_EQ(lines_.back(), "two");
}

// ---- the Clock's sleep and calendar time ------------------------------------

TEST(FakeClockTest, SleepForEndsOnlyWhenAdvancePassesItsEnd) {
  FakeClock clock;
  auto slept = std::async(std::launch::async, [&] { clock.SleepFor(std::chrono::milliseconds(20)); });
  ASSERT_TRUE(clock.AwaitWaits(1)) << "the sleep did not wait on the clock";
  clock.Advance(std::chrono::milliseconds(19));
  ASSERT_TRUE(clock.AwaitWaits(2)) << "the sleep ended before its time";
  EXPECT_EQ(slept.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  clock.Advance(std::chrono::milliseconds(1));
  EXPECT_EQ(slept.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "the sleep outlived its end";
}

TEST(FakeClockTest, ASleepOfNothingDoesNotWait) {
  FakeClock clock;
  clock.SleepFor(std::chrono::nanoseconds(0));
  EXPECT_EQ(clock.Waits(), 0u);
  RealClock()->SleepFor(std::chrono::nanoseconds(0));
}

TEST(FakeClockTest, TheCalendarMovesWithAdvance) {
  auto before = std::chrono::system_clock::now();
  FakeClock clock;
  auto start = clock.WallNow();
  EXPECT_GE(start, before) << "a fake calendar far from today's: file ages would be nonsense";
  EXPECT_EQ(clock.WallNow(), start) << "the fake calendar moved by itself";
  clock.Advance(std::chrono::seconds(90));
  EXPECT_EQ(clock.WallNow() - start, std::chrono::seconds(90));
}

}  // namespace
}  // namespace shmkeeper
