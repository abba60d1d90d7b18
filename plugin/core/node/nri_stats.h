// What the agent's NRI plugin (agent.nri.socket) tells /metrics and
// `shmkeeper status`: whether it is connected and to which runtime, and how
// many decisions, refusals and internal failures it answered with.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/mutex.h"

namespace shmkeeper {

struct NriState {
  std::string socket;  // "" = the plugin is off
  bool connected = false;
  std::string runtime_name, runtime_version;  // from the runtime's Configure
  std::string last_error;                     // why the last connection ended or failed
  int64_t connections = 0;                    // registrations that succeeded
  int64_t connect_failures = 0;               // connects or registrations that failed
  std::map<std::string, int64_t> decisions;   // by action: resize, keep, skip
  int64_t refusals = 0;                       // CreateContainer answered with the wrapper's refusal
  int64_t failures = 0;                       // internal failures answered per onInternalError
  // Injections answered (the wrapper's, as adjustments), by "what/outcome":
  // what preload or cuda-ipc; outcome injected, skipped (an opt-out, the
  // policy, a non-glibc image, ...) or undecided (preload only: the image
  // could not be read, so it was not injected).
  std::map<std::string, int64_t> injections;
  // Pods created while the agent was away, caught up at a (re)connection, by
  // outcome: resized (late: their first process saw the runtime's size),
  // refused (a bad size, left as it is), failed.
  std::map<std::string, int64_t> late;
  int64_t abandoned = 0;  // CreateContainer calls the runtime stopped waiting for (its timeout): not decided
};

class NriStats {
 public:
  void SetSocket(const std::string& socket) SHMK_EXCLUDES(mu_);
  // A registration that succeeded, or a connection that ended (`why`).
  void Connected() SHMK_EXCLUDES(mu_);
  void Disconnected(const std::string& why) SHMK_EXCLUDES(mu_);
  void ConnectFailed(const std::string& why) SHMK_EXCLUDES(mu_);
  void Configured(const std::string& runtime_name, const std::string& runtime_version) SHMK_EXCLUDES(mu_);
  void Decided(const std::string& action) SHMK_EXCLUDES(mu_);
  void Refused() SHMK_EXCLUDES(mu_);
  void Failed() SHMK_EXCLUDES(mu_);
  void Injected(const std::string& what, const std::string& outcome) SHMK_EXCLUDES(mu_);
  void CaughtUp(const std::string& outcome) SHMK_EXCLUDES(mu_);
  void Abandoned() SHMK_EXCLUDES(mu_);
  NriState state() const SHMK_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  NriState state_ SHMK_GUARDED_BY(mu_);
};

}  // namespace shmkeeper
