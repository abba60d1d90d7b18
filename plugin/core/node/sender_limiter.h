// Rate limits for the event socket (mode 0666: every container may send):
// a token bucket per sender, the pid SCM_CREDENTIALS proves, and one for all
// senders together, so that neither one process nor a fork storm of many can
// make the agent verify claims without end. A datagram over a limit is
// dropped before it is read any further; the caller counts it. A dropped
// creator record only costs a leak its creator evidence, which keeps the
// segment (the verdict needs evidence to say "leaked").
//
// Not thread-safe: the event receiver's thread alone uses it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <unordered_map>

namespace shmkeeper {

class SenderLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    double per_sender_rate = 200;  // datagrams a second, sustained
    double per_sender_burst = 1000;
    double total_rate = 5000;
    double total_burst = 10000;
    size_t max_senders = 4096;  // buckets kept; full (idle) ones are forgotten first
  };
  SenderLimiter() : SenderLimiter(Limits{}) {}
  explicit SenderLimiter(Limits limits);

  // Whether one more datagram from `sender` at `now` is within both limits;
  // if so it takes a token from each.
  bool Allow(pid_t sender, Clock::time_point now);
  size_t tracked_senders() const { return senders_.size(); }

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point last{};
  };
  static void Refill(Bucket* b, double rate, double burst, Clock::time_point now);
  void Forget(Clock::time_point now);

  Limits limits_;
  Bucket total_;
  std::unordered_map<pid_t, Bucket> senders_;
};

}  // namespace shmkeeper
