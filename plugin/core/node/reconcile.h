// Agent-only mode: sizing pod sandboxes' /dev/shm without a runtime change on
// the node. The CRI tells which pods exist and their annotations (containerd
// passes pod annotations to the OCI spec only when configured to, so the
// spec alone does not have them); the runtime state tells where each
// sandbox's shm tmpfs is. The decision is the wrapper's own (PlanShm) on the
// sandbox spec with the CRI annotations merged in; applying it is a remount.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/os.h"
#include "base/status.h"
#include "decide/config.h"
#include "decide/plan.h"
#include "node/discovery.h"
#include "node/node_scan.h"

namespace shmkeeper {

// A pod sandbox as the CRI lists it.
struct CriSandbox {
  std::string id;
  std::string ns, name, uid;
  bool ready = false;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::optional<MemoryLimit> memory_limit;  // from PodSandboxStatus, when the runtime tells
};

// The pod's memory limit in the runtime's verbose PodSandboxStatus
// info["info"] JSON: the kubelet's config.linux.resources.memory_limit_in_bytes
// (containerd), else what SpecMemoryLimit finds in "runtimeSpec" (both).
// Source "cri:PodSandboxStatus". The text is untrusted; nullopt when absent.
std::optional<MemoryLimit> MemoryLimitFromSandboxInfo(const std::string& info_json);

struct ReconcileResult {
  std::string sandbox_id;
  std::string ns, name;
  ShmPlan plan;   // valid when status is OK
  Status status;  // a bad annotation, an unmanaged shm, a failed remount
  Status record;  // writing the sizing record after a resize (failed: no sizedBy)
};

// Plans and applies the size of every ready sandbox found in `containers`
// (by id). Resized sandboxes get a sizing record "reconcile". Sandboxes the
// runtime state does not show yet are left for the next pass.
std::vector<ReconcileResult> ReconcileSandboxes(const std::vector<CriSandbox>& sandboxes,
                                                const std::vector<ContainerRecord>& containers, const Config& config,
                                                Os& os);

// Puts each sandbox's CRI labels on its Kubernetes pod (matched by uid, else
// namespace and name). Labels the pod already has are kept.
void LabelPodsFromCri(const std::vector<CriSandbox>& sandboxes, std::vector<PodRecord>* pods);

}  // namespace shmkeeper
