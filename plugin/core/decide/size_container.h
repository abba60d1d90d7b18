// The one /dev/shm sizing flow shared by the runtime wrapper (before the real
// runtime reads the spec) and the OCI hook (after create, where only an
// engine-made host tmpfs can still be resized): load the spec, plan, apply,
// save the spec (wrapper only), write the sizing record, log the decision.
#pragma once

#include <string>

#include "base/os.h"
#include "base/status.h"
#include "decide/config.h"

namespace shmkeeper {

enum class Applier { kRuntime, kHook };

// kInvalidArgument for bad user input (the container must not start);
// anything else is internal (the caller applies onInternalError).
Status SizeContainerShm(const std::string& bundle, const std::string& container_id, const Config& config, Applier who,
                        Os& os);

}  // namespace shmkeeper
