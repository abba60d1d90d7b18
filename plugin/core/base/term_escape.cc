#include "base/term_escape.h"

#include <cstdint>

namespace shmkeeper {
namespace {

constexpr char kHex[] = "0123456789abcdef";

// The valid UTF-8 sequence at the start of `s`: its length and code point, or
// length 0 when the first byte does not start one (overlong forms, surrogates
// and values above U+10FFFF are invalid).
size_t DecodeUtf8(std::string_view s, uint32_t* cp) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char b = byte(0);
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  size_t n = b >= 0xf0 && b <= 0xf4 ? 4 : b >= 0xe0 && b < 0xf0 ? 3 : b >= 0xc2 && b < 0xe0 ? 2 : 0;
  if (n == 0 || s.size() < n) return 0;
  uint32_t v = b & (n == 2 ? 0x1f : n == 3 ? 0x0f : 0x07);
  for (size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (byte(i) & 0x3f);
  }
  if (n == 3 && (v < 0x800 || (v >= 0xd800 && v <= 0xdfff))) return 0;
  if (n == 4 && (v < 0x10000 || v > 0x10ffff)) return 0;
  *cp = v;
  return n;
}

bool HiddenFormatting(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029;
}

void AppendHexByte(std::string* out, unsigned char b) {
  *out += "\\x";
  *out += kHex[b >> 4];
  *out += kHex[b & 15];
}

}  // namespace

std::string TermEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    uint32_t cp = 0;
    size_t n = DecodeUtf8(text, &cp);
    if (n == 0) {
      AppendHexByte(&out, static_cast<unsigned char>(text[0]));
      text.remove_prefix(1);
      continue;
    }
    if (cp < 0x20 || cp == 0x7f) {
      static constexpr char kNamed[] = "abtnvfr";  // \a (7) .. \r (13)
      if (cp >= 7 && cp <= 13) {
        out += '\\';
        out += kNamed[cp - 7];
      } else {
        AppendHexByte(&out, static_cast<unsigned char>(cp));
      }
    } else if (HiddenFormatting(cp)) {
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 15];
    } else {
      out.append(text.substr(0, n));
    }
    text.remove_prefix(n);
  }
  return out;
}

}  // namespace shmkeeper
