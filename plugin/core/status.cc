#include "shmkeeper/status.h"

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
