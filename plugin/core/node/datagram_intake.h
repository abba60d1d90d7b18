// The event socket's datagrams as the agent acts on them: a creator claim is
// verified (VerifyCreatorClaim, creator_book.h) and recorded in the
// CreatorBook; "stopped", "unlink" and "memfd" say the node changed and ask for
// a scan; anything else is refused. Refusals are counted by ClaimRejection
// name and logged, at most kLinesPerWindow lines a minute (the rest are
// counted and summarized in the next line).
//
// Ownership: shares the CreatorBook with the Scanner; `poke` and `log` are
// called from the receiver's thread and must outlive the intake; the clock
// (the log's window, the reuse of a sender's description; base/clock.h) too.
// Thread-safety: every method may be called from any thread. OnDatagram
// blocks on /proc (the claim's checks), the book's mutex, this object's mutex
// (held only to count) and whatever `poke` and `log` block on.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/clock.h"
#include "base/mutex.h"
#include "node/creator_book.h"
#include "node/reporter.h"

namespace shmkeeper {

class DatagramIntake {
 public:
  static constexpr int kLinesPerWindow = 10;

  DatagramIntake(std::shared_ptr<CreatorBook> creators, std::function<void()> poke, Reporter::Log log,
                 Clock* clock = RealClock());

  // One datagram from `sender` (pid and uid as the kernel reported them).
  void OnDatagram(pid_t sender, uid_t uid, const std::string& payload) SHMK_EXCLUDES(mu_);
  // Refused datagrams by ClaimRejection name.
  std::map<std::string, int64_t> rejected() const SHMK_EXCLUDES(mu_);

 private:
  void Reject(ClaimRejection why, pid_t sender, const std::string& detail) SHMK_EXCLUDES(mu_);

  const std::shared_ptr<CreatorBook> creators_;
  const std::function<void()> poke_;
  const Reporter::Log log_;
  Clock* const clock_;
  mutable Mutex mu_;
  std::map<std::string, int64_t> rejected_ SHMK_GUARDED_BY(mu_);
  // The log lines' rate limit: a window and what was logged or dropped in it.
  Clock::TimePoint window_ SHMK_GUARDED_BY(mu_){};
  int logged_ SHMK_GUARDED_BY(mu_) = 0;
  int64_t dropped_ SHMK_GUARDED_BY(mu_) = 0;
};

}  // namespace shmkeeper
