// The agent's Prometheus text exposition (/metrics).
#pragma once

#include <string>

#include "node/engine.h"

namespace shmkeeper {

// Prometheus text exposition of a snapshot.
std::string RenderMetrics(const NodeSnapshot* snap, const Agent& agent);

}  // namespace shmkeeper
