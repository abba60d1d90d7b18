// The wrapper's injection (decide/inject.h InjectPreload, decide/cuda_ipc.h
// InjectCudaIpc) answered to an NRI CreateContainer as a ContainerAdjustment:
// the same decision from the same code, on a spec built of what NRI tells of
// the container (annotations, env, mounts, devices, rlimits, namespaces), and
// the spec's changes turned into the adjustment (mounts, env, devices,
// rlimits). Nothing under the runtime is edited.
//
// The image: NRI's Container carries no rootfs, and the preload library is
// only for glibc images. The caller gives a read-only view of the image's
// root (nri_rootfs.h: containerd's snapshot of the container, mounted
// read-only in the runtime's mount namespace), or "" with the reason it has
// none, and then the preload is skipped with that reason (CUDA IPC needs no
// image). With the view, the mount points are only checked (MountPoints::
// kCheck): runc creates the missing ones inside the rootfs.
//
// Thread-safety: free functions over their arguments.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "decide/config.h"
#include "decide/spec.h"
#include "nri_api.h"

namespace shmkeeper::agent {

// How every reason the image could not be read starts (NriInjection::preload
// is then "skip: " + it + ...).
inline constexpr const char* kNoImage = "the image cannot be read";

struct NriInjection {
  ::nri::pkg::api::v1alpha1::ContainerAdjustment adjust;
  std::string preload;  // the decision log's "inject": "preload", "skip: <why>"
  std::string cuda;     // the decision log's "cuda": "" (not asked), "cuda-ipc", "cuda-ipc: <why not>"
  std::vector<std::string> notes;
};

// The counters' outcome of a preload decision (NriInjection::preload):
// "injected", "undecided" (the image could not be read) or "skipped".
std::string PreloadOutcome(const std::string& preload);

// The container as a spec: annotations (the container's, then the pod's for
// keys the container has not), process.env, mounts, linux.devices,
// linux.namespaces, process.rlimits, and root.path = `rootfs` ("" = none).
Result<Spec> NriContainerSpec(const ::nri::pkg::api::v1alpha1::PodSandbox& pod,
                              const ::nri::pkg::api::v1alpha1::Container& container, const std::string& rootfs);

// Decides and builds the adjustment. `rootfs` is the image's root, readable
// here ("" = unknown: `no_rootfs` says why, and the preload is skipped with
// it); `runtime_dir` is where the library is looked for when inject.library
// is unset (the agent's own directory).
NriInjection InjectForNri(const ::nri::pkg::api::v1alpha1::PodSandbox& pod,
                          const ::nri::pkg::api::v1alpha1::Container& container, const Config& config,
                          const std::string& rootfs, const std::string& no_rootfs, const std::string& runtime_dir);

// InjectForNri's decision on `spec` (NriContainerSpec's), edited in place as
// the wrapper edits it; `adjust` is left empty. `no_rootfs` non-empty: the
// spec has no root.path, for that reason.
NriInjection InjectIntoSpec(Spec* spec, const Config& config, const std::string& no_rootfs,
                            const std::string& runtime_dir);

// The adjustment that turns `before` into `after` for what the injection
// edits: mounts added (by destination), env entries added or changed,
// linux.devices added, rlimits added or changed.
::nri::pkg::api::v1alpha1::ContainerAdjustment AdjustmentOf(const Spec& before, const Spec& after);

}  // namespace shmkeeper::agent
