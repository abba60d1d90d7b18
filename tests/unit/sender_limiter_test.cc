#include "node/sender_limiter.h"

#include <gtest/gtest.h>

namespace shmkeeper {
namespace {

using std::chrono::milliseconds;

SenderLimiter::Limits Small() {
  SenderLimiter::Limits l;
  l.per_sender_rate = 10;
  l.per_sender_burst = 20;
  l.total_rate = 100;
  l.total_burst = 50;
  l.max_senders = 8;
  return l;
}

int Allowed(SenderLimiter* lim, pid_t pid, int n, SenderLimiter::Clock::time_point at) {
  int ok = 0;
  for (int i = 0; i < n; ++i) ok += lim->Allow(pid, at);
  return ok;
}

TEST(SenderLimiterTest, OneSenderGetsItsBurstThenItsRate) {
  SenderLimiter lim(Small());
  auto t0 = SenderLimiter::Clock::now();
  EXPECT_EQ(Allowed(&lim, 100, 1000, t0), 20);                       // the burst
  EXPECT_EQ(Allowed(&lim, 100, 1000, t0 + milliseconds(1000)), 10);  // one second of rate
  EXPECT_EQ(Allowed(&lim, 200, 5, t0 + milliseconds(1000)), 5);      // another sender is not affected
}

TEST(SenderLimiterTest, ManySendersTogetherAreHeldByTheTotal) {
  SenderLimiter lim(Small());
  auto t0 = SenderLimiter::Clock::now();
  int ok = 0;
  for (pid_t pid = 1000; pid < 1100; ++pid) ok += Allowed(&lim, pid, 20, t0);  // each within its own bucket
  EXPECT_EQ(ok, 50);                                                           // the total burst
  EXPECT_LE(lim.tracked_senders(), 8u);                                        // the table stays bounded
  ok = 0;
  for (pid_t pid = 2000; pid < 2100; ++pid) ok += Allowed(&lim, pid, 1, t0 + milliseconds(100));
  EXPECT_EQ(ok, 10);  // 100 ms of the total rate
}

TEST(SenderLimiterTest, AnIdleSenderIsForgottenAndStartsFull) {
  SenderLimiter lim(Small());
  auto t0 = SenderLimiter::Clock::now();
  EXPECT_EQ(Allowed(&lim, 1, 20, t0), 20);
  for (pid_t pid = 10; pid < 17; ++pid) Allowed(&lim, pid, 1, t0);
  EXPECT_EQ(lim.tracked_senders(), 8u);
  EXPECT_EQ(Allowed(&lim, 99, 1, t0 + milliseconds(10000)), 1);  // a new sender in a full table: idle ones go
  EXPECT_EQ(lim.tracked_senders(), 1u);
  EXPECT_EQ(Allowed(&lim, 1, 30, t0 + milliseconds(10000)), 20);
}

}  // namespace
}  // namespace shmkeeper
