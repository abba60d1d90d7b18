#include "nri_mountns.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <sstream>

namespace shmkeeper::agent {
namespace {

// Runs `fn` in a child joined to the mount namespace `ns_fd` (-1: the agent's own); `fn`'s text
// comes back (at most 64 KiB). The child only makes system calls and
// formats text.
Result<std::string> InNamespace(int ns_fd, const std::function<std::string()>& fn) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Status::FromErrno(errno, "NRI: pipe");
  pid_t pid = ::fork();
  if (pid < 0) {
    Status s = Status::FromErrno(errno, "NRI: fork");
    ::close(p[0]);
    ::close(p[1]);
    return s;
  }
  if (pid == 0) {
    ::close(p[0]);
    std::string out =
        ns_fd < 0 || ::setns(ns_fd, CLONE_NEWNS) == 0 ? fn() : std::string("Esetns: ") + std::strerror(errno);
    size_t at = 0;
    while (at < out.size()) {
      ssize_t n = ::write(p[1], out.data() + at, out.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(p[1]);
  std::string out;
  char buf[4096];
  while (out.size() < (64 << 10)) {
    ssize_t n = ::read(p[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(p[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (out.empty()) return Status::Internal("NRI: the child in the runtime's mount namespace answered nothing");
  return out;
}

// The child's answer: "O<text>", or "E<message>" (the failure, as an
// internal one: the caller answers it per onInternalError).
std::string Encode(const Status& s) { return "E" + s.message(); }

Status Decode(const std::string& out) {
  if (!out.empty() && out[0] == 'O') return Status::Ok();
  return Status::Internal(out.substr(1) + " (in the runtime's mount namespace)");
}

}  // namespace

std::unique_ptr<RuntimeMountNsOs> RuntimeMountNsOs::ForPeerOf(int fd, Os* base) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  int ns = -1;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0) {
    std::string path = "/proc/" + std::to_string(cred.pid) + "/ns/mnt";
    struct stat theirs {
    }, ours{};
    if (::stat(path.c_str(), &theirs) == 0 && ::stat("/proc/self/ns/mnt", &ours) == 0 &&
        (theirs.st_ino != ours.st_ino || theirs.st_dev != ours.st_dev)) {
      ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    }
  }
  // The pid is the peer's at its listen(); by now it may have exited and the
  // pid gone to another process, whose namespace was opened. An exiting
  // process's sockets are closed before its pid can be reused, so a
  // connection still up after the open says the pid was still the peer's.
  pollfd p{fd, POLLRDHUP, 0};
  if (ns >= 0 && ::poll(&p, 1, 0) != 0) {  // hung up (or poll failed: not trusted either)
    ::close(ns);
    ns = -1;  // the session ends at its first read
  }
  return std::unique_ptr<RuntimeMountNsOs>(new RuntimeMountNsOs(ns, base));
}

RuntimeMountNsOs::~RuntimeMountNsOs() {
  if (ns_fd_ >= 0) ::close(ns_fd_);
}

Result<FsInfo> RuntimeMountNsOs::StatFs(const std::string& path) {
  if (ns_fd_ < 0) return base_->StatFs(path);
  SHMK_ASSIGN_OR_RETURN(std::string out, InNamespace(ns_fd_, [&] {
                          Result<FsInfo> fs = base_->StatFs(path);
                          if (!fs.ok()) return Encode(fs.status());
                          std::ostringstream o;
                          o << "O" << fs->is_tmpfs << " " << fs->is_mount_root << " " << fs->size_bytes << " "
                            << fs->used_bytes << " " << fs->st_flags;
                          return o.str();
                        }));
  SHMK_RETURN_IF_ERROR(Decode(out));
  FsInfo fs;
  std::istringstream in(out.substr(1));
  if (!(in >> fs.is_tmpfs >> fs.is_mount_root >> fs.size_bytes >> fs.used_bytes >> fs.st_flags)) {
    return Status::Internal("NRI: an unreadable statfs answer from the runtime's mount namespace");
  }
  return fs;
}

Status RuntimeMountNsOs::RemountTmpfs(const std::string& path, int64_t bytes, unsigned long st_flags) {
  if (ns_fd_ < 0) return base_->RemountTmpfs(path, bytes, st_flags);
  SHMK_ASSIGN_OR_RETURN(std::string out, InNamespace(ns_fd_, [&] {
                          Status s = base_->RemountTmpfs(path, bytes, st_flags);
                          return s.ok() ? std::string("O") : Encode(s);
                        }));
  return Decode(out);
}

Result<std::string> RuntimeMountNsOs::RealPath(const std::string& path) {
  if (ns_fd_ < 0) return base_->RealPath(path);
  SHMK_ASSIGN_OR_RETURN(std::string out, InNamespace(ns_fd_, [&] {
                          Result<std::string> r = base_->RealPath(path);
                          return r.ok() ? "O" + *r : Encode(r.status());
                        }));
  SHMK_RETURN_IF_ERROR(Decode(out));
  return out.substr(1);
}

Result<std::string> RuntimeMountNsOs::RunInChild(const std::function<std::string()>& fn) {
  return InNamespace(ns_fd_, fn);
}

}  // namespace shmkeeper::agent
