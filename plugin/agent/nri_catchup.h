// Catching up, at each (re)connection to the runtime, the pods it created
// while the agent was away (stopped, restarting, or too slow for the
// runtime's plugin request timeout): their containers were created without
// the plugin, so their first processes saw the runtime's /dev/shm (64 MiB).
// From the runtime's Synchronize (every pod and container it knows), each pod
// with a live container whose /dev/shm is containerd's sandbox tmpfs and was
// not sized by NRI (no sizing record by `nri`/`nri-late` in the sandbox's
// bundle) is decided by the same code as CreateContainer (nri_decide.h) and
// resized live, as agent-only mode's reconcile does; its sizing record says
// `nri-late` (`shmkeeper pods`: sized by nri-late, after its first process
// started). A bad size is not applied (the container exists already) and is
// reported: a `refused` entry.
//
// Thread-safety: a free function over its arguments; `os` must be thread-safe.
#pragma once

#include <string>
#include <vector>

#include "base/os.h"
#include "decide/config.h"
#include "decide/plan.h"
#include "nri_api.h"
#include "nri_decide.h"

namespace shmkeeper::agent {

struct NriCatchUp {
  std::string pod_id;
  std::string who;      // "<namespace>/<name>"
  std::string outcome;  // "resized", "refused" (a bad size: left as it is) or "failed" (an internal failure)
  std::string message;  // what happened, one line
  ShmPlan plan;         // for "resized"
};

// One entry per pod that was behind (resized, or not because of a bad size or
// a failure); pods sized already, pods whose /dev/shm is not the sandbox's
// tmpfs and pods with no live container yet (their CreateContainer will
// come) have none.
std::vector<NriCatchUp> CatchUpPods(const ::nri::pkg::api::v1alpha1::SynchronizeRequest& sync, const Config& config,
                                    Os& os);

}  // namespace shmkeeper::agent
