// libFuzzer target: the /proc text parsers the agent feeds with kernel output
// (SysV table) and the policy's duration values.
#include <string>

#include "decide/config.h"
#include "scan/sysv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)shmkeeper::ParseSysvShm(text);
  (void)shmkeeper::ParseDuration(text);
  return 0;
}
