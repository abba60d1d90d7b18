#include "base/status.h"

#include <cerrno>
#include <cstring>

namespace shmkeeper {

Status Status::FromErrno(int err, std::string_view context) {
  Code code = Code::kIo;
  if (err == ENOENT) code = Code::kNotFound;
  if (err == EINVAL) code = Code::kInvalidArgument;
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  return Status(code, err, std::move(msg));
}

Status Status::WithContext(std::string_view outer) const {
  if (ok()) return *this;
  std::string msg(outer);
  msg += ": ";
  msg += message_;
  return Status(code_, errno_, std::move(msg));
}

namespace {

// The length of the valid UTF-8 sequence at the start of `s`, or 0.
size_t Utf8SequenceLength(std::string_view s) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char b = byte(0);
  if (b < 0x80) return 1;
  size_t n = b >= 0xf0 && b <= 0xf4 ? 4 : b >= 0xe0 ? 3 : b >= 0xc2 && b < 0xe0 ? 2 : 0;
  if (n == 0 || s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
  }
  if (n == 3 && ((b == 0xe0 && byte(1) < 0xa0) || (b == 0xed && byte(1) >= 0xa0))) return 0;  // overlong, surrogate
  if (n == 4 && ((b == 0xf0 && byte(1) < 0x90) || (b == 0xf4 && byte(1) >= 0x90))) return 0;  // overlong, > U+10FFFF
  return n;
}

}  // namespace

std::string EscapeInvalidUtf8(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    size_t n = Utf8SequenceLength(text);
    if (n == 0) {
      unsigned char ch = static_cast<unsigned char>(text[0]);
      out += std::string("\\x") + kHex[ch >> 4] + kHex[ch & 15];
      n = 1;
    } else {
      out.append(text.substr(0, n));
    }
    text.remove_prefix(n);
  }
  return out;
}

std::string EscapeControl(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char ch : text) {
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch < 0x20 || ch == 0x7f) {
      out += std::string("\\x") + kHex[ch >> 4] + kHex[ch & 15];
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out;
}

}  // namespace shmkeeper
