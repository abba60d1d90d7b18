// The runtime wrapper's and the OCI hook's decisions, counted for /metrics
// from the decision log (log.path) they append one JSON line per decision to
// (decide/decision_log.h): by `by` ("runtime", "hook") and `action` (resize,
// keep, skip: applied; refuse; passthrough: an internal error let the spec
// through untouched; warning), and the preloads the wrapper skipped.
//
// Why the log and not datagrams: the log is a host file only root writes
// (0640 under /var/log/shmkeeper), so nothing in a container can forge a
// count; a datagram on the event socket (which containers can reach) could.
// What the log does not hold is not counted: log.path "" or a log.level above
// info (applied decisions are info lines; refusals and passthroughs are
// error and warning lines).
//
// The first Poll starts at the file's end (at its start once it exists, when
// it does not exist yet): decisions made before the agent started are not
// counted (counters start at 0, as Prometheus expects of a
// restarted process). A rotated log (a new file at the path) is read to its
// end through <path>.1 first, so no line is lost to a rotation between polls.
//
// Thread-safety: every method may be called from any thread (one mutex).
// Poll blocks on the file's reads (at most kMaxReadPerPoll bytes a call).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "base/mutex.h"

namespace shmkeeper {

class DecisionTally {
 public:
  static constexpr int64_t kMaxReadPerPoll = 4 << 20;
  static constexpr size_t kMaxLineBytes = 64 << 10;

  // Counts the lines appended to the log at `path` since the last call ("" =
  // no log: nothing is read). A new `path` (a reload) starts at its end.
  void Poll(const std::string& path) SHMK_EXCLUDES(mu_);

  // The counters in Prometheus text format.
  std::string RenderMetrics() const SHMK_EXCLUDES(mu_);

  // By (by, action), and preloads skipped by `by`.
  std::map<std::pair<std::string, std::string>, int64_t> decisions() const SHMK_EXCLUDES(mu_);
  std::map<std::string, int64_t> preload_skipped() const SHMK_EXCLUDES(mu_);

 private:
  // Reads `fd` from offset_ to its end (within `budget`), counting complete lines.
  void ReadFrom(int fd, int64_t* budget) SHMK_REQUIRES(mu_);
  void CountLine(std::string_view line) SHMK_REQUIRES(mu_);

  mutable Mutex mu_;
  std::string path_ SHMK_GUARDED_BY(mu_);
  bool started_ SHMK_GUARDED_BY(mu_) = false;
  dev_t dev_ SHMK_GUARDED_BY(mu_) = 0;
  ino_t ino_ SHMK_GUARDED_BY(mu_) = 0;
  int64_t offset_ SHMK_GUARDED_BY(mu_) = 0;
  std::string partial_ SHMK_GUARDED_BY(mu_);  // the last line read, not yet ended by '\n'
  bool readable_ SHMK_GUARDED_BY(mu_) = false;
  std::map<std::pair<std::string, std::string>, int64_t> decisions_ SHMK_GUARDED_BY(mu_);
  std::map<std::string, int64_t> preload_skipped_ SHMK_GUARDED_BY(mu_);
  int64_t unparsed_ SHMK_GUARDED_BY(mu_) = 0;
};

}  // namespace shmkeeper
