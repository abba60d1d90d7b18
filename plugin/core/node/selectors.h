// Pod selectors: "k=v,k2!=v2,k3,!k4" parsed and matched.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "node/node_scan.h"

namespace shmkeeper {

// "k=v,k2!=v2,k3,!k4" over labels and annotations together.
struct SelectorTerm {
  std::string key, value;
  enum Op { kEquals, kNotEquals, kExists, kNotExists } op = kExists;
};
Result<std::vector<SelectorTerm>> ParseSelector(const std::string& text);
bool MatchesSelector(const PodRecord& pod, const std::vector<SelectorTerm>& terms);

}  // namespace shmkeeper
