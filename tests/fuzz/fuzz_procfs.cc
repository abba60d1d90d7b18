// libFuzzer target: the /proc text parsers the agent feeds with kernel output
// (SysV table, mountinfo lines: mount points are names any container user
// chooses) and the policy's duration values.
#include <cstdlib>
#include <sstream>
#include <string>

#include "decide/config.h"
#include "scan/node_refs.h"
#include "scan/sysv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)shmkeeper::ParseSysvShm(text);
  (void)shmkeeper::ParseDuration(text);
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    shmkeeper::MountLine m;
    // Unescaping only ever shortens a field.
    if (shmkeeper::ParseMountInfoLine(line, &m) && m.root.size() + m.mount_point.size() > line.size()) std::abort();
  }
  return 0;
}
