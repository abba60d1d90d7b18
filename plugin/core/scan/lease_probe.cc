#include "scan/lease_probe.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "base/fileutil.h"
#include "base/safe_path.h"

namespace shmkeeper {

Result<ProbeVerdict> ProbeLease(int dir_fd, const std::string& name, const FileKey& key,
                                const std::function<void()>& inside_window,
                                const std::function<Status(int fd)>& before_lease) {
  UniqueFd file;
  if (name.find('/') == std::string::npos) {
    file.reset(::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  } else {
    Result<UniqueFd> f = OpenNoSymlinks(dir_fd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    if (f.ok()) file = std::move(*f);
  }
  if (!file.valid()) {
    if (errno == EWOULDBLOCK) return ProbeVerdict::kHeld;  // someone else's lease: in use
    if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR) return ProbeVerdict::kGone;
    return Status::FromErrno(errno, "probe open " + name);
  }
  struct stat st;
  if (::fstat(file.get(), &st) != 0) return Status::FromErrno(errno, "probe fstat " + name);
  if (!S_ISREG(st.st_mode) || st.st_dev != key.dev || st.st_ino != key.ino) return ProbeVerdict::kGone;
  // The hook sees exactly the inode the lease is tried on (the descriptor,
  // never the name, which could be swapped meanwhile).
  if (before_lease) SHMK_RETURN_IF_ERROR(before_lease(file.get()));
  // An open that breaks our lease makes the kernel signal the lease holder
  // (this process) with the file's F_SETSIG signal: SIGCONT, so that a
  // stopped agent is resumed by the very open it would block, and releases
  // the lease at once (SIGCONT continues a stopped process whatever its
  // disposition; a running one ignores it).
  if (::fcntl(file.get(), F_SETSIG, SIGCONT) != 0) return Status::FromErrno(errno, "probe F_SETSIG " + name);
  if (::fcntl(file.get(), F_SETLEASE, F_WRLCK) != 0) {
    if (errno == EAGAIN || errno == EBUSY) return ProbeVerdict::kHeld;
    return Status::FromErrno(errno, "probe lease " + name);
  }
  if (inside_window) inside_window();
  (void)::fcntl(file.get(), F_SETLEASE, F_UNLCK);  // close() releases it too; this shortens the window
  return ProbeVerdict::kUnheld;
}

}  // namespace shmkeeper
