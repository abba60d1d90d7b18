#include "base/event_send.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "base/fileutil.h"

namespace shmkeeper {

Status SendEvent(const std::string& path, const std::string& payload) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) return Status::Invalid("event socket path \"" + path + "\"");
  if (payload.size() > 4096) return Status::Invalid("event payload over 4 KiB");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno(errno, "socket");
  ssize_t n = ::sendto(fd.get(), payload.data(), payload.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                       reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  if (n < 0) return Status::FromErrno(errno, "send to " + path);
  return Status::Ok();
}

}  // namespace shmkeeper
