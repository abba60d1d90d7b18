// The node policy as shmkeeper-runtime and shmkeeper-hook load it for one
// container: the one loader both mains share, so both treat a missing or an
// invalid file the same way.
#pragma once

#include <string_view>
#include <vector>

#include "base/status.h"
#include "decide/config.h"

namespace shmkeeper {

struct ContainerPolicy {
  // The policy in force for this container: the file's, or the built-in
  // defaults when the file could not be used.
  Config config;
  // OK; kNotFound: $SHMKEEPER_CONFIG names a missing file (the defaults are
  // used, with a warning); anything else: the file is invalid or unreadable
  // (the container passes through untouched unless onInternalError: fail).
  Status file;
  // Problems that do not stop the container, which both mains report the
  // same way (a "warning" line on stderr and in the decision log) before
  // they size a container: $SHMKEEPER_CONFIG naming a missing file ("...:
  // using the defaults").
  std::vector<Status> warnings;
  // Whether the container may be sized with `config`.
  bool usable() const { return file.ok() || file.code() == Code::kNotFound; }
  // One phrase for the decision log: "" when the file was used, else what
  // happened ("policy file invalid: <file:line:col ...>").
  std::string Problem() const;
};

// Loads the policy named by --config `flag` (must exist), else
// $SHMKEEPER_CONFIG (a missing file: the defaults, file kNotFound and one
// warning), else /etc/shmkeeper/config.yaml (optional: missing = defaults,
// silently: the usual case on a node that never wrote one). Never fails: an
// invalid file is `file`, for the mains to pass the container through.
ContainerPolicy LoadContainerPolicy(std::string_view flag);

}  // namespace shmkeeper
