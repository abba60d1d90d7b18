// The policy file as `shmkeeper status` shows it: the running policy's file
// and what is on disk now.
#pragma once

#include "node/engine.h"
#include "shmkeeper/v1/agent.pb.h"

namespace shmkeeper::agent {

// Fills `out` from `state` and a fresh read of state.path: on_disk "same"
// (the text the running policy came from), "changed" (parses, not reloaded
// yet), "invalid" (with the loader's file:line:col line) or "missing".
void ConfigFileToProto(const ConfigFileState& state, v1::ConfigFile* out);

}  // namespace shmkeeper::agent
