// The agent's answer to an NRI CreateContainer: the wrapper's /dev/shm
// decision (decide/plan.h: annotation > policy, `auto` from the pod's memory
// limit, shm.max/overMax, refusal of a bad size) for the container's pod,
// applied before the answer, so no process of the pod sees the engine's
// 64 MiB.
//
// A pod's /dev/shm under containerd's CRI is one tmpfs per pod sandbox
// (<state>/io.containerd.grpc.v1.cri/sandboxes/<pod id>/shm), bound into each
// container; it is planned as the wrapper plans the sandbox's, from a spec
// built of what NRI tells (the pod's annotations and memory limit, the
// container's /dev/shm mount and namespaces), and resized in place: the first
// container resizes it, the next ones find it sized (keep). Anything else at
// /dev/shm (a memory emptyDir, the host's with hostIPC) is a skip, as today.
//
// Thread-safety: a free function over its arguments; `os` must be thread-safe.
#pragma once

#include <string>

#include "base/os.h"
#include "base/status.h"
#include "decide/config.h"
#include "decide/plan.h"
#include "nri_api.h"

namespace shmkeeper::agent {

// The sizing record's and the decision log's `by` for a pod resized after its
// first process started (the catch-up of a pod already running at Synchronize).
inline constexpr const char* kNriLate = "nri-late";

// Who decides: a CreateContainer, answered before the container's first
// process starts (`by` "nri"; a bad size refuses the container), or the
// catch-up of a running pod (`by` "nri-late"; a bad size leaves the running
// pod's /dev/shm as it is: its decision line says "keep", never "refuse").
enum class NriSizer { kCreate, kCatchUp };

struct NriDecision {
  ShmPlan plan;  // action kSkip with its reason when /dev/shm is left alone
  // A bad size: the container must not be created. The one line the wrapper
  // gives ("shmkeeper: ..."), answered to the runtime as the call's error.
  std::string refusal;
  // Where the sizing record went ("" = none written): the sandbox's bundle.
  std::string record_bundle;
  // Why no record was written for a resize ("" when one was).
  std::string record_error;
};

// Plans and applies. kInvalidArgument never comes back (a bad size is a
// decision with `refusal`); a non-OK status is an internal failure (statfs,
// the remount), for the caller to answer per onInternalError.
Result<NriDecision> DecideCreateContainer(const ::nri::pkg::api::v1alpha1::PodSandbox& pod,
                                          const ::nri::pkg::api::v1alpha1::Container& container, const Config& config,
                                          Os& os, NriSizer sizer = NriSizer::kCreate);

// containerd's task bundle of the sandbox whose shm tmpfs is `shm_source`
// (<state>/io.containerd.grpc.v1.cri/sandboxes/<id>/shm ->
// <state>/io.containerd.runtime.v2.task/k8s.io/<id>), where the sizing record
// goes; "" when the layout is another's or the bundle is not a directory
// (lstat: a symlink is not followed).
std::string SandboxBundle(const std::string& shm_source, const std::string& pod_id);

// The spec DecideCreateContainer plans on (for tests): annotations (the
// pod's, then the container's for keys the pod has not; containerd's
// sandbox keys), the container's /dev/shm mount and namespaces.
Result<Spec> NriSandboxSpec(const ::nri::pkg::api::v1alpha1::PodSandbox& pod,
                            const ::nri::pkg::api::v1alpha1::Container& container);

}  // namespace shmkeeper::agent
