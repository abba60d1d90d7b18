// The fix planner (internal to shmkeeper_compose).
#pragma once

#include <string>
#include <vector>

#include "compose/compose.h"
#include "compose/compose_rules.h"

namespace shmkeeper::compose {

// The fixes of the findings of `c` in `file` (the first file read when
// empty), each by the planner of its code; `size` overrides the suggested
// sizes. Only edits whose result still parses are kept; the rest is in
// `skipped`. kInvalidArgument when `file` was not read.
Result<ComposeFix> PlanFix(const Checked& c, const std::string& file, const std::string& size);

// The fixes of every file read (compose files, then `extends` files), in
// that order, one ComposeFix per file (unchanged ones included).
Result<std::vector<ComposeFix>> PlanFixes(const Checked& c, const std::string& size);

}  // namespace shmkeeper::compose
