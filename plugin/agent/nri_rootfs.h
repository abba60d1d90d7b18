// The image a container created through NRI will run, read as the wrapper
// reads it (decide/inject.h needs the image's root to tell a glibc image and
// to check the mount points), although NRI's Container carries no rootfs.
//
// Where it comes from: containerd's CRI prepares the container's snapshot
// (key = the container's id, in the "k8s.io" namespace) before it asks the
// NRI plugins (internal/cri/server/container_create.go: WithNewSnapshot comes
// before WithContainerAdjustment), as containerd's own WithUser reads the
// image's /etc/passwd from it. The agent asks containerd's snapshots service
// (agent.criSocket: containerd serves it on the CRI socket) for the
// snapshot's mounts, and in the runtime's mount namespace mounts the image's
// layers as one read-only overlay that is attached nowhere (fsmount(2): no
// mount point, nothing for anyone else to see, gone with the child); every
// path in it is opened below its root without following the image's symlinks
// out of it (base/safe_path.h). The snapshot's writable layer is empty at
// CreateContainer and is read as the top layer all the same.
//
// Without it (agent.criSocket off, another runtime, another snapshotter, the
// snapshot not found) the preload is skipped with the reason, counted and
// logged; the container is created all the same. CUDA IPC needs no image.
//
// Thread-safety: free functions; `ns` as RuntimeMountNsOs.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/fileutil.h"
#include "base/status.h"
#include "decide/config.h"
#include "nri_inject.h"
#include "nri_mountns.h"

namespace shmkeeper::agent {

inline constexpr const char* kContainerdCriNamespace = "k8s.io";
inline constexpr const char* kContainerdSnapshotter = "overlayfs";

struct SnapshotMount {
  std::string type, source;
  std::vector<std::string> options;
};

// containerd's Snapshots.Mounts(snapshotter, key) at `endpoint`
// ("unix:///path" or "/path").
Result<std::vector<SnapshotMount>> SnapshotMounts(const std::string& endpoint, const std::string& key,
                                                  std::chrono::milliseconds timeout);

// The snapshot's layers as one read-only, unattached mount (an overlay of its
// lowerdirs under its upperdir; a bind snapshot is its directory, opened
// O_PATH); the paths are the calling process's mount namespace's.
Result<UniqueFd> OpenSnapshotReadOnly(const std::vector<SnapshotMount>& mounts);

// The injection for `container`, decided in a child in the runtime's mount
// namespace with the image read as above. Never fails: a reason not to
// inject is a skip in the result.
NriInjection InjectThroughRuntime(RuntimeMountNsOs& ns, const ::nri::pkg::api::v1alpha1::PodSandbox& pod,
                                  const ::nri::pkg::api::v1alpha1::Container& container, const Config& config);

}  // namespace shmkeeper::agent
