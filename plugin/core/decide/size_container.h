// The one /dev/shm sizing flow shared by the runtime wrapper (before the real
// runtime reads the spec) and the OCI hook (after create, where only an
// engine-made host tmpfs can still be resized): load the spec, plan, apply,
// save the spec (wrapper only), write the sizing record, log the decision.
#pragma once

#include <string>
#include <vector>

#include "base/os.h"
#include "base/status.h"
#include "decide/config.h"

namespace shmkeeper {

enum class Applier { kRuntime, kHook };

// kInvalidArgument for bad user input (the container must not start);
// anything else is internal (the caller applies FailureOutcome). Problems that
// do not stop the container (the sizing record or the decision log could not
// be written) are appended to `warnings` for the caller to report.
// REQUIRES: warnings != nullptr.
Status SizeContainerShm(const std::string& bundle, const std::string& container_id, const Config& config, Applier who,
                        Os& os, std::vector<Status>* warnings);

// What the wrapper and the hook do when sizing failed with `failure` (not OK).
enum class FailureOutcome { kRefuse, kPassThrough };

// The one policy for both: bad user input refuses the container when the
// config was loaded (`config_loaded`); any other failure refuses it only under
// `onInternalError: fail`, else the container goes on as the engine made it.
FailureOutcome OutcomeOfFailure(const Status& failure, bool config_loaded, const Config& config);

// Where this binary lives: the preload library is looked up next to it when
// inject.library is unset ("/usr/local/bin" when /proc/self/exe is unreadable).
std::string ExecutableDir();

}  // namespace shmkeeper
