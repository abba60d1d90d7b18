// One agent per node (docs/agent.md, "One agent per node"): an exclusive
// flock(2) on <stateDir>/shmkeeperd.lock, held for the agent's lifetime, with
// the holder's pid written into the file; and the agent's identity, 8 hex
// digits kept in <stateDir>/agent-id (made once, the same across restarts so
// that an agent renames back its own quarantine names after a crash).
//
// Thread-safety: an AgentLock is owned by one thread (main); it only holds
// the descriptor.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/fileutil.h"
#include "base/status.h"

namespace shmkeeper {

class AgentLock {
 public:
  // Takes the lock without waiting. Another agent holding it:
  // kFailedPrecondition "another shmkeeperd (pid N) holds DIR/shmkeeperd.lock".
  static Result<AgentLock> Acquire(const std::string& state_dir);
  // The pid written in the lock file by the agent holding it (0 if unknown).
  static pid_t Holder(const std::string& state_dir);

 private:
  UniqueFd fd_;
};

// The agent identity of `state_dir` (read, or made and written once).
Result<std::string> AgentIdentity(const std::string& state_dir);

}  // namespace shmkeeper
