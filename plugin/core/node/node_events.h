// What wakes the agent between periodic scans: datagrams on its event socket
// (the hook's "stopped", the sharing runtime's creator records) and inotify
// on the shm directories and runtime state roots it knows.
//
// Each class owns one thread, started by Start and joined by the destructor.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/fileutil.h"
#include "base/mutex.h"
#include "base/status.h"
#include "node/reporter.h"
#include "node/sender_limiter.h"

namespace shmkeeper {

// A SOCK_DGRAM unix socket with SO_PASSCRED. `on_datagram` gets the sender's
// pid and uid as the kernel reports them (in the agent's namespaces) and the
// payload; a datagram too large for the buffer arrives as an empty payload.
// The socket is mode 0666: any container user may send, because nothing in
// a payload is trusted (see creator_book.h).
//
// A datagram that never reaches `on_datagram` (no sender credentials, a
// receive error, over a sender's rate limit: sender_limiter.h) is reported to
// `reporter` (kDatagramsNoCredentials, kDatagramsReceiveErrors,
// kDatagramsRateLimited) when it is not null; it must outlive the receiver.
// The rate limits run on `clock` (not owned; outlives the receiver).
class EventReceiver {
 public:
  using Handler = std::function<void(pid_t sender, uid_t uid, const std::string& payload)>;
  EventReceiver(std::string path, Handler on_datagram, Reporter* reporter = nullptr, Clock* clock = RealClock());
  ~EventReceiver();
  Status Start();

 private:
  void Run();
  // Reads and handles one datagram; false when none is queued (or on a
  // receive error other than EINTR, which is reported). Sets `*over_limit`
  // when it dropped one over the rate limits.
  bool ReceiveOne(bool* over_limit);
  std::string path_;
  Handler handler_;
  Reporter* reporter_;
  Clock* const clock_;
  SenderLimiter limiter_;  // the receiver's thread only
  UniqueFd sock_, stop_;
  std::thread thread_;
};

// inotify on a set of directories; `on_change` runs on the watcher's thread
// for any create, delete, move or finished write in them. A directory that
// exists but cannot be watched is reported to `reporter` (kWatcherErrors, once
// until it can be) when it is not null; it must outlive the watcher.
class ChangeWatcher {
 public:
  explicit ChangeWatcher(std::function<void()> on_change, Reporter* reporter = nullptr);
  ~ChangeWatcher();
  Status Start();
  // Replaces the watched set (paths that do not exist are dropped). `roots`
  // (runtime state roots) are watched one level down too, so a new
  // container's state.json written after its directory appeared is seen; a
  // root that does not exist yet is waited for on its nearest existing parent
  // and watched once it appears (before `on_change` runs for that event).
  void SetPaths(const std::vector<std::string>& paths, const std::vector<std::string>& roots = {});

 private:
  void Run();
  void Sync() SHMK_REQUIRES(mu_);  // Makes the watches match want_/roots_.
  std::function<void()> on_change_;
  Reporter* reporter_;
  UniqueFd inotify_, stop_;
  Mutex mu_;
  std::vector<std::string> want_ SHMK_GUARDED_BY(mu_), roots_ SHMK_GUARDED_BY(mu_);
  std::map<std::string, int> watches_ SHMK_GUARDED_BY(mu_);  // path -> wd
  std::set<std::string> failed_ SHMK_GUARDED_BY(mu_);        // paths whose watch failed, already reported
  std::thread thread_;
};

}  // namespace shmkeeper
