#include "base/os.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "base/bytes.h"

namespace shmkeeper {
namespace {

unsigned long MountFlagsFromStatvfs(unsigned long st) {
  struct Pair {
    unsigned long st, ms;
  };
  static constexpr Pair kPairs[] = {
      {ST_RDONLY, MS_RDONLY},   {ST_NOSUID, MS_NOSUID},         {ST_NODEV, MS_NODEV},       {ST_NOEXEC, MS_NOEXEC},
      {ST_NOATIME, MS_NOATIME}, {ST_NODIRATIME, MS_NODIRATIME}, {ST_RELATIME, MS_RELATIME},
  };
  unsigned long ms = 0;
  for (const Pair& p : kPairs) {
    if (st & p.st) ms |= p.ms;
  }
  return ms;
}

bool IsMountRoot(const std::string& path) {
  struct statx stx;
  if (::statx(AT_FDCWD, path.c_str(), 0, STATX_BASIC_STATS, &stx) == 0 &&
      (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)) {
    return stx.stx_attributes & STATX_ATTR_MOUNT_ROOT;
  }
  struct stat self, parent;
  if (::stat(path.c_str(), &self) != 0 || ::stat((path + "/..").c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev || self.st_ino == parent.st_ino;
}

class SystemOs final : public Os {
 public:
  Result<FsInfo> StatFs(const std::string& path) override {
    struct statfs fs;
    if (::statfs(path.c_str(), &fs) != 0) return Status::FromErrno(errno, "statfs " + path);
    struct statvfs vfs;
    if (::statvfs(path.c_str(), &vfs) != 0) return Status::FromErrno(errno, "statvfs " + path);
    FsInfo info;
    info.is_tmpfs = fs.f_type == TMPFS_MAGIC;
    info.is_mount_root = IsMountRoot(path);
    info.size_bytes = static_cast<int64_t>(fs.f_blocks) * fs.f_bsize;
    info.used_bytes = static_cast<int64_t>(fs.f_blocks - fs.f_bfree) * fs.f_bsize;
    info.st_flags = vfs.f_flag;
    return info;
  }

  Status RemountTmpfs(const std::string& path, int64_t bytes, unsigned long st_flags) override {
    std::string data = "size=" + std::to_string(bytes);
    unsigned long flags = MS_REMOUNT | MountFlagsFromStatvfs(st_flags);
    if (::mount(nullptr, path.c_str(), nullptr, flags, data.c_str()) != 0) {
      return Status::FromErrno(errno, "remount " + path + " with " + data);
    }
    return Status::Ok();
  }

  int64_t HostMemoryBytes() override {
    static const int64_t total = [] {
      struct sysinfo si;
      if (::sysinfo(&si) != 0) return int64_t{0};
      return static_cast<int64_t>(si.totalram) * si.mem_unit;
    }();
    return total;
  }

  Result<std::string> RealPath(const std::string& path) override {
    char buf[PATH_MAX];
    if (::realpath(path.c_str(), buf) == nullptr) return Status::FromErrno(errno, "realpath " + path);
    return std::string(buf);
  }
};

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

int64_t Os::PageSize() { return SystemPageSize(); }

Os* Os::Default() {
  static SystemOs* os = new SystemOs();
  return os;
}

Result<std::string> FindExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (IsExecutableFile(name)) return name;
    return Status::NotFound(name + " is not an executable file");
  }
  const char* env = std::getenv("PATH");
  std::stringstream dirs(env && *env ? env : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + name;
    if (IsExecutableFile(candidate) && !SameFile(candidate, "/proc/self/exe")) return candidate;
  }
  return Status::NotFound(name + " not found in PATH");
}

Status Exec(const std::string& path, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.reserve(args.size() + 2);
  argv.push_back(const_cast<char*>(path.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(path.c_str(), argv.data());
  return Status::FromErrno(errno, "exec " + path);
}

}  // namespace shmkeeper
