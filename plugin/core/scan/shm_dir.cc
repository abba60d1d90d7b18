#include "scan/shm_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

// A walk's budget of entries: `left` more may be stat'ed.
struct Budget {
  size_t left = SIZE_MAX;
  bool exceeded = false;
  // Takes one entry; false (and `exceeded`) once the budget is spent.
  bool Take() {
    if (left == 0) {
      exceeded = true;
      return false;
    }
    --left;
    return true;
  }
};

void Walk(int dir_fd, const std::string& prefix, int depth, Budget* budget, ShmDir* out) {
  int fd = ::dup(dir_fd);
  if (fd < 0) return;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(fd), ::closedir);
  if (!dir) {
    ::close(fd);
    return;
  }
  // The copy shares `dir_fd`'s offset: a directory listed before through it
  // (a scan lists a tmpfs again after renaming quarantine names back) is
  // read from its start, not from where the last listing ended.
  ::rewinddir(dir.get());
  while (struct dirent* e = ::readdir(dir.get())) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (!budget->Take()) return;
    out->entries++;
    struct stat st;
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (st.st_dev != out->dev) continue;  // a mount on top: not this tmpfs
    if (S_ISDIR(st.st_mode) && depth > 0) {
      UniqueFd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.valid()) Walk(sub.get(), prefix + name + "/", depth - 1, budget, out);
      if (budget->exceeded) return;
      continue;
    }
    if (!S_ISREG(st.st_mode)) continue;
    ShmFile f{prefix + name, FileKey{st.st_dev, st.st_ino}, static_cast<int64_t>(st.st_blocks) * 512,
              st.st_mtim.tv_sec};
    out->linked_bytes += f.bytes;
    out->files.push_back(std::move(f));
  }
}

}  // namespace

Result<ShmDir> MeasureShmFs(int dir_fd) {
  ShmDir d;
  struct statfs fs;
  if (::fstatfs(dir_fd, &fs) != 0) return Status::FromErrno(errno, "statfs shm dir");
  struct stat st;
  if (::fstat(dir_fd, &st) != 0) return Status::FromErrno(errno, "stat shm dir");
  d.dev = st.st_dev;
  d.is_tmpfs = fs.f_type == TMPFS_MAGIC;
  d.size_bytes = static_cast<int64_t>(fs.f_blocks) * fs.f_bsize;
  d.used_bytes = static_cast<int64_t>(fs.f_blocks - fs.f_bfree) * fs.f_bsize;
  if (fs.f_files > 0) d.inodes_used = static_cast<int64_t>(fs.f_files - fs.f_ffree);
  return d;
}

Result<ShmDir> MeasureShmDir(int dir_fd, int max_depth, size_t max_entries) {
  Result<ShmDir> d = MeasureShmFs(dir_fd);
  if (!d.ok()) return d;
  Budget budget{max_entries, false};
  Walk(dir_fd, "", max_depth, &budget, &*d);
  if (budget.exceeded) {
    d->over_limit = true;
    d->files.clear();
    d->files.shrink_to_fit();
    d->linked_bytes = 0;
  }
  return d;
}

}  // namespace shmkeeper
