// Queries over one published snapshot: pods by namespace and selector, one pod
// by uid, name or container id, leaks by namespace and pod. Pure functions of
// the snapshot they are given (the agent passes its current one).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "node/node_scan.h"

namespace shmkeeper {

struct PodFilter {
  std::string ns;
  std::string selector;
  bool only_with_leaks = false;
};

// "namespace/name", or the name of a pod without a namespace.
std::string PodName(const PodKey& k);

// `snap` null: the first scan has not finished (kFailedPrecondition).
Result<std::vector<PodRecord>> QueryPods(const NodeSnapshot* snap, const PodFilter& filter);
// `uid`, "namespace/name" (or a plain container's name), or a container id
// (full or a unique prefix of at least 4 characters).
Result<PodRecord> QueryPod(const NodeSnapshot* snap, const std::string& uid, const std::string& name,
                           const std::string& container_id);
// The leaks of `pod` (name or uid; "" = all) in `ns` ("" = all); none when
// `snap` is null.
std::vector<LeakRecord> QueryLeaks(const NodeSnapshot* snap, const std::string& ns, const std::string& pod);

}  // namespace shmkeeper
