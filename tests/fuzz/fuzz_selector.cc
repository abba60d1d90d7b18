// libFuzzer target: pod selectors (from gRPC requests: untrusted) parse or
// fail with a message; a parsed selector can be matched safely.
#include <cstdlib>
#include <string>

#include "node/engine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  shmkeeper::Result<std::vector<shmkeeper::SelectorTerm>> terms = shmkeeper::ParseSelector(text);
  if (!terms.ok()) {
    if (terms.status().message().empty()) std::abort();
    return 0;
  }
  shmkeeper::PodRecord pod;
  pod.labels["app"] = "x";
  pod.annotations["shmkeeper.io/shm-size"] = "1Gi";
  (void)shmkeeper::MatchesSelector(pod, *terms);
  return 0;
}
