// libFuzzer target: any PodSandboxStatus info["info"] text (a runtime's JSON,
// untrusted) through MemoryLimitFromSandboxInfo; never crashes, and a limit it
// finds is positive and names the CRI.
#include <cstdlib>
#include <string>

#include "node/reconcile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::optional<shmkeeper::MemoryLimit> limit = shmkeeper::MemoryLimitFromSandboxInfo(text);
  if (limit && (limit->bytes <= 0 || limit->source != "cri:PodSandboxStatus")) std::abort();
  return 0;
}
