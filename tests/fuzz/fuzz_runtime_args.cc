// libFuzzer target: runtime argv (NUL-separated) parses or errors; whatever
// parses passes every argument on except shmkeeper's own --config.
#include <cstdlib>
#include <string>
#include <vector>

#include "decide/runtime_args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  args.push_back(cur);
  shmkeeper::Result<shmkeeper::RuntimeArgs> r = shmkeeper::ParseRuntimeArgs(args);
  if (r.ok() && r->passthrough.size() > args.size()) std::abort();
  return 0;
}
