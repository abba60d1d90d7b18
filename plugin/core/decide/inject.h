// What shmkeeper-runtime adds to a container's spec besides the shm size:
// the sharing runtime (libshmkeeper-preload.so; CUDA IPC device access is in
// decide/cuda_ipc.h). It edits the spec only; the caller saves it. The
// image's rootfs is untrusted: it is only ever opened below its own root, and a symlink where
// shmkeeper would create a mount point refuses the injection.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "decide/config.h"
#include "decide/spec.h"

namespace shmkeeper {

inline constexpr const char* kInjectAnnotation = "shmkeeper.io/inject";
inline constexpr const char* kInjectEnv = "SHMKEEPER_INJECT";
// Opt-in reservation (see Config::Preload): the annotation, then the env, then
// the policy's preload.reserve. The library reads only the env; the wrapper
// writes it into the spec when the annotation or the policy decides.
inline constexpr const char* kPreloadReserveAnnotation = "shmkeeper.io/preload-reserve";
inline constexpr const char* kPreloadReserveEnv = "SHMKEEPER_PRELOAD_RESERVE";
// The library is mounted at <dir>/libshmkeeper-preload.so and the agent's
// event directory at <dir>/events, <dir> being kPreloadDir, or
// kPreloadFallbackDir when a mount of the container's own covers /run.
inline constexpr const char* kPreloadDir = "/run/shmkeeper";
inline constexpr const char* kPreloadFallbackDir = "/.shmkeeper";
inline constexpr const char* kPreloadFile = "libshmkeeper-preload.so";
inline constexpr const char* kEventsDir = "events";

// Who makes the mount points in the image: the wrapper (kCreate: in the
// image, before runc reads the spec), or the runtime itself (kCheck: the NRI
// plugin sees a read-only view of the image; runc creates what is missing,
// inside the rootfs). kCheck refuses what kCreate refuses (a symlink or a
// non-directory on the way, a non-file at the library's place) and creates
// nothing.
enum class MountPoints { kCreate, kCheck };

struct InjectResult {
  bool changed = false;  // the spec was edited
  std::string what;      // "preload", "skip: <why>", ...
  // With the preload injected: "" (no reservation), or where the reservation
  // came from ("annotation:shmkeeper.io/preload-reserve", "env:SHMKEEPER_PRELOAD_RESERVE",
  // "policy"); an unreadable annotation or env value is named and ignored.
  std::string reserve;
};

// Adds the preload library (bind mount, LD_PRELOAD) and the agent's event
// directory. `bundle` resolves a relative root.path. Decided from the final
// mount layout: nothing is created inside any mount of the spec (a volume,
// bind or tmpfs at /run, also through the image's symlinks, e.g. /var/run):
// the fallback directory is used, or the injection is skipped naming the
// mount. The mount points are created in the image, every component opened
// without following symlinks (a symlink anywhere, the last component
// included, refuses it), and a rootfs that cannot take them (read-only) is a
// skip. Never an error for the container: every reason not to inject is a
// skip with its reason. With the library injected, the reservation mode is
// decided (annotation, env, policy) and, when the annotation or the policy
// decides, written as SHMKEEPER_PRELOAD_RESERVE=1 or =0 into the env,
// replacing the container's own value.
InjectResult InjectPreload(Spec* spec, const std::string& bundle, const Config& config, const std::string& runtime_dir,
                           MountPoints mount_points = MountPoints::kCreate);

}  // namespace shmkeeper
