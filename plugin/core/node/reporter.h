// Where the node code reports an error it survives by going on (a failed
// Docker enrichment, a watcher that cannot watch, a dropped datagram): a named
// counter for /metrics and a warning in the log, at most kLinesPerWindow lines
// per counter a minute (the rest are counted and summarized in the next line).
// The minute is the injected Clock's (RealClock() in the agent; unit tests
// advance a FakeClock).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "base/clock.h"
#include "base/mutex.h"
#include "decide/config.h"

namespace shmkeeper {

// The counters the node code reports to (names as Reporter::Count takes them).
inline constexpr char kDockerEnrichmentErrors[] = "enrichment_errors.docker";
inline constexpr char kWatcherErrors[] = "watcher_errors";
inline constexpr char kDatagramsNoCredentials[] = "datagrams_dropped.no_credentials";
inline constexpr char kDatagramsReceiveErrors[] = "datagrams_dropped.receive_error";
inline constexpr char kDatagramsRateLimited[] = "datagrams_dropped.rate_limited";

class Reporter {
 public:
  using Log = std::function<void(LogLevel, const std::string&)>;
  static constexpr int kLinesPerWindow = 10;
  static constexpr std::chrono::minutes kWindow{1};

  // `clock` (not owned) outlives the reporter.
  explicit Reporter(Clock* clock = RealClock()) : clock_(clock) {}

  // REQUIRES: called before the reporter is shared with other threads. The
  // default drops the lines (the counters still count).
  void SetLog(Log log) { log_ = std::move(log); }

  // Adds one to `counter` and logs `message` as a warning, rate-limited.
  void Report(const std::string& counter, const std::string& message);
  // The value of `counter` (0 when never reported).
  int64_t Count(const std::string& counter) const;

 private:
  struct Window {
    Clock::TimePoint start{};
    int logged = 0;
    int64_t dropped = 0;
  };
  Clock* const clock_;
  Log log_ = [](LogLevel, const std::string&) {};
  mutable Mutex mu_;
  std::map<std::string, int64_t> counts_ SHMK_GUARDED_BY(mu_);
  std::map<std::string, Window> windows_ SHMK_GUARDED_BY(mu_);
};

}  // namespace shmkeeper
