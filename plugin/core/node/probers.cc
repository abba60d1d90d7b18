#include "node/probers.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <utility>
#include <vector>

#include "base/mutex.h"

namespace shmkeeper {
namespace {

// The registered files of this process: one descriptor per file per process
// (probers.h), closed with the last registry that uses it, under g_mu (so
// that no Join opens the file again in between). An entry made before a fork
// is not the child's: the child leaves its inherited descriptor alone (its
// parent's registry objects still name it) and joins afresh.
struct Shared {
  pid_t owner = 0;
  UniqueFd fd;
  off_t slot = 0;
  int refs = 0;
};
Mutex g_mu;
std::map<std::pair<dev_t, ino_t>, Shared>& Table() SHMK_REQUIRES(g_mu) {
  static auto* table = new std::map<std::pair<dev_t, ino_t>, Shared>();  // never destroyed: used at exit
  return *table;
}

// This process's entry for the file, or null (a stale entry from before a
// fork is dropped, its descriptor left open).
Shared* Mine(dev_t dev, ino_t ino) SHMK_REQUIRES(g_mu) {
  auto it = Table().find({dev, ino});
  if (it == Table().end()) return nullptr;
  if (it->second.owner == ::getpid()) return &it->second;
  (void)it->second.fd.release();
  Table().erase(it);
  return nullptr;
}

}  // namespace

Result<std::set<pid_t>> WriteLockHolders(int fd, int max_calls) {
  struct Range {
    off_t start;
    off_t len;  // 0: to the end of any file (as in struct flock)
  };
  std::vector<Range> todo = {{0, 0}};
  std::set<pid_t> holders;
  for (int calls = 0; !todo.empty() && calls < max_calls; ++calls) {
    Range r = todo.back();
    todo.pop_back();
    struct flock fl = {};
    fl.l_type = F_RDLCK;  // only write locks conflict with it
    fl.l_whence = SEEK_SET;
    fl.l_start = r.start;
    fl.l_len = r.len;
    if (::fcntl(fd, F_GETLK, &fl) != 0) return Status::FromErrno(errno, "fcntl(F_GETLK)");
    if (fl.l_type == F_UNLCK) continue;
    if (fl.l_pid > 0) holders.insert(fl.l_pid);
    // The answer overlaps [r.start, r.start + r.len): ask again on each side.
    off_t start = std::max(fl.l_start, r.start);
    if (start > r.start) todo.push_back({r.start, start - r.start});
    if (fl.l_len == 0) continue;  // it reaches the end
    off_t end = fl.l_start + fl.l_len;
    if (r.len == 0) {
      todo.push_back({end, 0});
    } else if (end < r.start + r.len) {
      todo.push_back({end, r.start + r.len - end});
    }
  }
  holders.erase(::getpid());  // our own locks never conflict; said for clarity
  return holders;
}

ProberRegistry::ProberRegistry(int fd, std::string path, off_t slot, dev_t dev, ino_t ino)
    : fd_(fd), path_(std::move(path)), slot_(slot), dev_(dev), ino_(ino) {}

ProberRegistry::~ProberRegistry() {
  MutexLock l(&g_mu);
  auto it = Table().find({dev_, ino_});
  if (it == Table().end() || it->second.owner != ::getpid()) return;  // a forked child's copy: not ours to close
  if (--it->second.refs == 0) Table().erase(it);                      // closes the file: the lock goes
}

Result<std::unique_ptr<ProberRegistry>> ProberRegistry::Join(const std::string& state_dir) {
  SHMK_RETURN_IF_ERROR(MakeDirs(state_dir));
  std::string path = state_dir + "/" + kProbersFile;
  MutexLock l(&g_mu);
  // Already registered through any path to the same file: never open it again
  // (a close would drop the lock). lstat opens nothing.
  struct stat st = {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    if (Shared* mine = Mine(st.st_dev, st.st_ino)) {
      mine->refs++;
      return std::unique_ptr<ProberRegistry>(
          new ProberRegistry(mine->fd.get(), path, mine->slot, st.st_dev, st.st_ino));
    }
  }
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0600));
  if (!fd.valid()) {
    if (errno == ELOOP) return Status::Precondition(path + " is a symlink: refused");
    return Status::FromErrno(errno, "open " + path);
  }
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "fstat " + path);
  if (Shared* mine = Mine(st.st_dev, st.st_ino)) {  // the name was moved onto our file since lstat
    (void)fd.release();                             // closing it would drop our lock
    mine->refs++;
    return std::unique_ptr<ProberRegistry>(new ProberRegistry(mine->fd.get(), path, mine->slot, st.st_dev, st.st_ino));
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Status::Precondition(path + " is not a regular file owned by uid " + std::to_string(::geteuid()) +
                                " and writable by it alone: refused (remove it; the agent makes it again)");
  }
  // No lock of this process is on this file: closing `fd` on an error below
  // drops nothing.
  pid_t self = ::getpid();
  for (int k = 0; k < kMaxSlots; ++k) {
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = self + k * kPidSlots;
    fl.l_len = 1;
    if (::fcntl(fd.get(), F_SETLK, &fl) == 0) {
      Shared& mine = Table()[{st.st_dev, st.st_ino}];
      mine.owner = self;
      mine.fd = std::move(fd);
      mine.slot = fl.l_start;
      mine.refs = 1;
      return std::unique_ptr<ProberRegistry>(new ProberRegistry(mine.fd.get(), path, mine.slot, st.st_dev, st.st_ino));
    }
    if (errno != EAGAIN && errno != EACCES) return Status::FromErrno(errno, "fcntl(F_SETLK) " + path);
  }
  return Status::Precondition("every slot of pid " + std::to_string(self) + " in " + path +
                              " is locked by other processes");
}

Result<std::set<pid_t>> ProberRegistry::Others() const {
  Result<std::set<pid_t>> holders = WriteLockHolders(fd_);
  if (!holders.ok()) return holders.status().WithContext(path_);
  return holders;
}

}  // namespace shmkeeper
