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

}  // namespace shmkeeper
