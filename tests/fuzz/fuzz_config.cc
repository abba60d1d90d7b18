// libFuzzer target: the node-policy parser turns any bytes into a Config or a
// one-line error naming the file; it never throws or crashes.
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "base/json.h"
#include "decide/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shmkeeper::Result<shmkeeper::Config> c = shmkeeper::ParseConfig(text, "fuzz.yaml");
  if (c.ok()) {
    (void)shmkeeper::DumpJson(shmkeeper::ConfigToJson(*c));
  } else if (c.status().message().rfind("fuzz.yaml", 0) != 0) {
    std::abort();
  }
  return 0;
}
