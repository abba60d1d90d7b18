// The /dev/shm decision: which size a container gets, from which source, and
// how it is applied. Pure logic over a Spec, a Config and an Os.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/os.h"
#include "base/status.h"
#include "decide/config.h"
#include "decide/spec.h"

namespace shmkeeper {

// Keys users write. Kept here so every component uses the same spelling.
inline constexpr const char* kShmSizeAnnotation = "shmkeeper.io/shm-size";
inline constexpr const char* kCrioShmSizeAnnotation = "shm-size.crio.io";
inline constexpr const char* kCrioLegacyShmSizeAnnotation = "io.kubernetes.cri-o.ShmSize";
inline constexpr const char* kShmSizeEnv = "SHMKEEPER_SHM_SIZE";

// podman gives every container and pod this much when nobody asked:
// containers.conf shm_size, default "65536k" (containers/common DefaultShmSize),
// read with decimal units (k = 1000), so 65,536,000 bytes, a 64000 KiB tmpfs.
// Docker, containerd and CRI-O (its sandbox DefaultShmSize) give
// kEngineDefaultShmBytes (64 MiB).
inline constexpr int64_t kPodmanDefaultShmBytes = 65536 * 1000;

// The size the container's own engine gives /dev/shm when nobody asked for
// one: kPodmanDefaultShmBytes for a podman container (annotation
// io.container.manager: libpod), else kEngineDefaultShmBytes. Only for this
// engine's default does the node policy decide; any other size is the
// user's (--shm-size, --ipc=shareable size) and is kept.
int64_t EngineDefaultShmBytes(const Spec& spec);

// Where runtimes put a pod's memory limit on the sandbox's spec. containerd
// (1.6+, the CRI plugin) writes the kubelet's PodSandboxConfig.linux.resources
// as sandbox-memory (bytes; "0" = none) next to sandbox-cpu-period/-quota/
// -shares, which shmkeeper does not read; CRI-O writes the same message as
// JSON under PodLinuxResources (renamed pod-linux-resources.crio.io).
inline constexpr const char* kContainerdSandboxMemoryAnnotation = "io.kubernetes.cri.sandbox-memory";
inline constexpr const char* kCrioPodResourcesAnnotation = "pod-linux-resources.crio.io";
inline constexpr const char* kCrioLegacyPodResourcesAnnotation = "io.kubernetes.cri-o.PodLinuxResources";

// The shape /dev/shm takes in a container's spec.
enum class ShmShape {
  kSpecTmpfs,  // a tmpfs mount in the spec (Docker --ipc=private): edit size=
  kHostTmpfs,  // bind of a host tmpfs this container owns: remount it
  kUnmanaged,  // host IPC, another container's shm, a user mount, none
};

struct ShmTarget {
  ShmShape shape = ShmShape::kUnmanaged;
  size_t mount_index = 0;      // kSpecTmpfs
  std::string host_path;       // kHostTmpfs
  unsigned long st_flags = 0;  // kHostTmpfs: mount flags to keep
  int64_t current_bytes = 0;   // the size the engine gave it
  int64_t used_bytes = 0;      // kHostTmpfs: bytes already used
  std::string why;             // kUnmanaged: why it is left alone
};

enum class ShmAction { kResize, kKeep, kSkip };

// A memory limit for `shm.default: auto` and where it was read:
// "spec:linux.resources.memory.limit", "annotation:<key>" or
// "cri:PodSandboxStatus" (agent-only mode).
struct MemoryLimit {
  int64_t bytes = 0;
  std::string source;
};

struct ShmPlan {
  ShmAction action = ShmAction::kSkip;
  ShmTarget target;
  std::string source;     // "annotation:<key>", "env:SHMKEEPER_SHM_SIZE", "engine", "policy"
  std::string requested;  // the value as written ("2Gi"), or "auto"
  int64_t old_bytes = 0;
  int64_t new_bytes = 0;
  bool clamped = false;  // reduced to shm.max under overMax: clamp
  std::string reason;    // human explanation of the action
  MemoryLimit limit;     // the memory limit "auto" used (bytes 0 = none, half of RAM)
};

// A size request and where it came from.
struct ShmRequest {
  int64_t bytes = 0;
  std::string source;  // "annotation:<key>", "env:SHMKEEPER_SHM_SIZE", "engine", "policy"
  std::string raw;     // as written
};

// The size the container's annotations ask for (shmkeeper.io/shm-size, then
// CRI-O's two keys), or nullopt. kInvalidArgument for an unparseable value.
Result<std::optional<ShmRequest>> AnnotationShmRequest(const Spec& spec);
// The size env SHMKEEPER_SHM_SIZE asks for, or nullopt. The env may come
// from the image (ENV), so it ranks below an explicit --shm-size.
Result<std::optional<ShmRequest>> EnvShmRequest(const Spec& spec);
// AnnotationShmRequest, else EnvShmRequest (what a spec alone asks for).
Result<std::optional<ShmRequest>> UserShmRequest(const Spec& spec);

// The container's or its pod's memory limit as its spec shows it, first of:
// linux.resources.memory.limit, containerd's sandbox-memory annotation,
// CRI-O's pod resources annotation. Malformed or zero values are skipped.
std::optional<MemoryLimit> SpecMemoryLimit(const Spec& spec);

// Classifies the container's /dev/shm. Errors are internal (statfs failures).
Result<ShmTarget> ClassifyShm(const Spec& spec, const std::string& container_id, Os& os);

// Decides the size. Sizes are planned and compared as the kernel stores them,
// rounded up to whole pages (RoundUpToPage), so a size the tmpfs already has
// is a kKeep. `cri_limit` is the pod's memory limit as the CRI reports it,
// used by "auto" when the spec shows none. kInvalidArgument for bad user input
// (an unparseable size, a size over shm.max under overMax: reject, a shrink
// below used bytes).
Result<ShmPlan> PlanShm(const Spec& spec, const Config& config, const std::string& container_id, Os& os,
                        const std::optional<MemoryLimit>& cri_limit = std::nullopt);

// Applies a kResize plan: edits the spec (kSpecTmpfs) or remounts the host
// tmpfs (kHostTmpfs). The spec is not saved here.
Status ApplyShm(const ShmPlan& plan, Spec* spec, Os& os);

const char* ShmActionName(ShmAction action);

}  // namespace shmkeeper
