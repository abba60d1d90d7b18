// What a service shows of the workloads of workloads.h (internal to
// shmkeeper_compose): the signs gathered from its image, command, environment,
// build, scripts and mounts, the workloads they match, and the /dev/shm size
// that serves them, raised by what was measured of it.
#pragma once

#include <cstdint>
#include <string>

#include "compose/compose.h"
#include "compose/compose_reader.h"

namespace shmkeeper::compose {

struct Need {
  bool needs = false;
  int64_t bytes = 0;  // the size to suggest
  int64_t floor = 0;  // an explicit shm_size below this is too small
  std::string reason;
  std::string because;  // the signs that fired, in words ("image postgres; deploy reserves GPUs")
  // It reserves GPUs or runs NCCL: CUDA IPC and NCCL between containers may
  // rely on the host's IPC namespace (ipc: host shared with another service
  // is then kept, a choice).
  bool gpu_ipc = false;
  std::string build_torch_tests;  // the build's RUN command that runs PyTorch tests ("" : none)
};

// The evidence of the service, raised to twice its measured peak (whole GiB) when that is more.
Need NeedOf(const Service& s, const ComposeCheckOptions& o, const ComposeProject& project);

}  // namespace shmkeeper::compose
