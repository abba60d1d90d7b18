// libFuzzer target: ParseSize never crashes, and what it accepts is positive
// and formats back to something that parses.
#include <cstdlib>
#include <string_view>

#include "base/bytes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  shmkeeper::Result<int64_t> r = shmkeeper::ParseSize(text);
  if (r.ok()) {
    if (*r <= 0) std::abort();
    if (!shmkeeper::ParseSize(std::to_string(*r)).ok()) std::abort();
    (void)shmkeeper::FormatSize(*r);
  } else if (r.status().message().empty()) {
    std::abort();
  }
  return 0;
}
