// CUDA IPC device access: what shmkeeper-runtime adds to a container's spec
// so that CUDA IPC works in it. Edits the spec only; the caller saves it.
#pragma once

#include <string>
#include <vector>

#include "decide/config.h"
#include "decide/inject.h"
#include "decide/spec.h"

namespace shmkeeper {

inline constexpr const char* kCudaIpcAnnotation = "shmkeeper.io/cuda-ipc";
inline constexpr const char* kCudaIpcEnv = "SHMKEEPER_CUDA_IPC";

// Adds the host's NVIDIA device nodes (with device-cgroup allow rules) and
// RLIMIT_MEMLOCK unlimited when the container asks for CUDA IPC. `notes` gets
// what was done and advice (a PID-isolated container cannot use legacy CUDA IPC).
InjectResult InjectCudaIpc(Spec* spec, const Config& config, std::vector<std::string>* notes);

}  // namespace shmkeeper
