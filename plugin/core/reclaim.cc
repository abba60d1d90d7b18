#include "shmkeeper/reclaim.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "shmkeeper/fileutil.h"
#include "shmkeeper/safe_path.h"
#include "shmkeeper/sysv.h"

namespace shmkeeper {
namespace {

// The pod's shm root through which files can be removed: the access
// process's /dev/shm, or, when that mount is read-only, the host tmpfs the
// spec binds there (accepted only if it is the very filesystem of the leak).
Result<UniqueFd> OpenShmRoot(const LeakRecord& l, const std::string& proc) {
  SHMK_ASSIGN_OR_RETURN(UniqueFd root, OpenProcessDir(l.access_pid, "/dev/shm", proc));
  struct statvfs vfs;
  if (l.shm_host_source.empty() || ::fstatvfs(root.get(), &vfs) != 0 || !(vfs.f_flag & ST_RDONLY)) return root;
  UniqueFd host(::open(l.shm_host_source.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!host.valid() || ::fstat(host.get(), &st) != 0 || st.st_dev != l.key.dev) return root;
  return host;
}

// Opens the directory that contains `l.rel` inside the pod's shm root.
Result<UniqueFd> OpenParent(const LeakRecord& l, const std::string& proc, std::string* base) {
  size_t slash = l.rel.rfind('/');
  *base = slash == std::string::npos ? l.rel : l.rel.substr(slash + 1);
  std::string sub = slash == std::string::npos ? "" : l.rel.substr(0, slash);
  UniqueFd root;
  if (!l.host_dir.empty()) {
    root.reset(::open(l.host_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!root.valid()) return Status::FromErrno(errno, "open " + l.host_dir);
  } else {
    SHMK_ASSIGN_OR_RETURN(root, OpenShmRoot(l, proc));
  }
  if (sub.empty()) return root;
  return OpenInRoot(root.get(), sub, O_RDONLY | O_DIRECTORY, /*allow_xdev=*/false);
}

// The file checks: same inode, and no holder in the fresh scan.
Status CheckFile(const LeakRecord& l, int dir_fd, const std::string& base,
                 const std::map<FileKey, std::vector<HolderRef>>& holders) {
  struct stat st;
  if (::fstatat(dir_fd, base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return Status::FromErrno(errno, "stat " + l.path);
  }
  if (!S_ISREG(st.st_mode) || st.st_dev != l.key.dev || st.st_ino != l.key.ino) {
    return Status::Precondition("replaced since the scan");
  }
  auto it = holders.find(l.key);
  if (it != holders.end() && !it->second.empty()) {
    return Status::Precondition("held by pid " + std::to_string(it->second.front().pid));
  }
  return Status::Ok();
}

Status ReclaimFile(const LeakRecord& l, bool dry_run, const std::string& proc,
                   const std::map<FileKey, std::vector<HolderRef>>& holders) {
  std::string base;
  SHMK_ASSIGN_OR_RETURN(UniqueFd dir, OpenParent(l, proc, &base));
  SHMK_RETURN_IF_ERROR(CheckFile(l, dir.get(), base, holders));
  if (dry_run) return Status::Ok();
  if (::unlinkat(dir.get(), base.c_str(), 0) != 0) return Status::FromErrno(errno, "unlink " + l.path);
  return Status::Ok();
}

}  // namespace

ReclaimOutcome ReclaimLeaks(const std::vector<LeakRecord>& candidates, bool dry_run, const std::string& proc) {
  ReclaimOutcome out;
  // One fresh pass over every process, right before the removals (a pass per
  // file would cost a full /proc scan per leak); each file's inode is still
  // re-checked at its unlink.
  std::set<FileKey> keys;
  for (const LeakRecord& l : candidates) {
    if (l.sysv_id < 0 && l.reclaimable) keys.insert(l.key);
  }
  std::map<FileKey, std::vector<HolderRef>> holders = ScanHolders(keys, proc);
  for (const LeakRecord& l : candidates) {
    if (!l.reclaimable) {
      out.skipped.push_back({l, l.state == LeakState::kLeaked ? "unheld for less than leaks.grace"
                                                              : "orphaned: its creator is not known to be dead"});
      continue;
    }
    Status s = l.sysv_id >= 0 ? (dry_run ? Status::Ok() : RemoveSysvShm(l.access_pid, l.sysv_id, l.sysv_cpid, proc))
                              : ReclaimFile(l, dry_run, proc, holders);
    if (!s.ok()) {
      out.skipped.push_back({l, s.message()});
      continue;
    }
    out.freed_bytes += l.bytes;
    out.reclaimed.push_back(l);
  }
  return out;
}

}  // namespace shmkeeper
