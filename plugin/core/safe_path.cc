#include "shmkeeper/safe_path.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace shmkeeper {

namespace {

Result<UniqueFd> OpenAt2(int root_fd, const std::string& path, int flags, uint64_t resolve) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = resolve;
  std::string_view trimmed = path;
  while (!trimmed.empty() && trimmed.front() == '/') trimmed.remove_prefix(1);
  const std::string rel(trimmed.empty() ? std::string_view(".") : trimmed);
  long fd;
  do {
    fd = ::syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how);
  } while (fd < 0 && (errno == EAGAIN || errno == EINTR));
  if (fd < 0) return Status::FromErrno(errno, "open " + path + " in root");
  return UniqueFd(static_cast<int>(fd));
}

}  // namespace

Result<UniqueFd> OpenInRoot(int root_fd, const std::string& path, int flags, bool allow_xdev) {
  return OpenAt2(root_fd, path, flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | (allow_xdev ? 0 : RESOLVE_NO_XDEV));
}

Result<UniqueFd> OpenNoSymlinks(int root_fd, const std::string& path, int flags) {
  return OpenAt2(root_fd, path, flags, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
}

Result<UniqueFd> OpenProcessDir(int pid, const std::string& path, const std::string& proc) {
  std::string root = proc + "/" + std::to_string(pid) + "/root";
  UniqueFd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) return Status::FromErrno(errno, "open " + root);
  Result<UniqueFd> fd = OpenInRoot(root_fd.get(), path, O_RDONLY | O_DIRECTORY);
  if (!fd.ok()) return fd.status().WithContext("pid " + std::to_string(pid));
  return fd;
}

}  // namespace shmkeeper
