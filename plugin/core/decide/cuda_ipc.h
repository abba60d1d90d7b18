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

// CUDA IPC is given only by the node's leave and only for the container's own
// GPUs. It is asked for by the annotation shmkeeper.io/cuda-ipc: "true"
// (untrusted: a pod's or a docker run's) and given only when the node policy
// is cuda.ipc: allocated and the spec already holds NVIDIA GPUs (linux.devices
// /dev/nvidiaN, put there by the engine, the device plugin or CDI). Then the
// host's control and UVM nodes (/dev/nvidiactl, /dev/nvidia-uvm,
// /dev/nvidia-uvm-tools, each only a character device whose major
// /proc/devices lists as nvidia*) are added with device-cgroup allow rules,
// and RLIMIT_MEMLOCK unlimited (or the node's hard limit). Never another
// GPU's /dev/nvidiaN, never /dev/nvidia-caps/*. The env SHMKEEPER_CUDA_IPC
// never enables it (a note says it was ignored); an annotation on an `off`
// node is a note, not an error. Never fails the container.
//
// InjectCudaIpc (the wrapper, before the runtime reads the spec) edits the
// spec; `notes` gets what was done or why not, and advice (legacy CUDA IPC
// needs a shared PID namespace). InjectResult::what is the decision log's
// "cuda": "" (not asked), "cuda-ipc" (added), "cuda-ipc: <why not>".
InjectResult InjectCudaIpc(Spec* spec, const Config& config, std::vector<std::string>* notes);

// The same decision for the OCI hook, which runs after the runtime has read
// the spec and so never adds anything: where the wrapper would add nodes,
// "cuda-ipc: not applied by the hook" and a note naming them.
InjectResult ExplainCudaIpc(const Spec& spec, const Config& config, std::vector<std::string>* notes);

}  // namespace shmkeeper
