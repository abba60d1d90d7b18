// The operating-system calls shmkeeper's decisions depend on, behind a small
// interface so unit tests can inject facts and faults (like leveldb's Env).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace shmkeeper {

struct FsInfo {
  bool is_tmpfs = false;
  bool is_mount_root = false;  // `path` is the root of a mount
  int64_t size_bytes = 0;      // f_blocks * f_bsize
  int64_t used_bytes = 0;      // (f_blocks - f_bfree) * f_bsize
  unsigned long st_flags = 0;  // statvfs f_flag (ST_NOSUID, ST_NODEV, ...)
};

class Os {
 public:
  virtual ~Os() = default;

  // statfs + statvfs + mount-root check of `path`, symlinks followed.
  virtual Result<FsInfo> StatFs(const std::string& path) = 0;
  // Remounts the tmpfs whose root is `path` with size=`bytes`, keeping the
  // mount flags in `st_flags` (nosuid, nodev, noexec, ro, atime flags); the
  // mode and contents are kept by the kernel.
  virtual Status RemountTmpfs(const std::string& path, int64_t bytes, unsigned long st_flags) = 0;
  // Total RAM of the host in bytes (read once per process).
  virtual int64_t HostMemoryBytes() = 0;
  // realpath(3).
  virtual Result<std::string> RealPath(const std::string& path) = 0;
  // The page size a tmpfs rounds its size= up to.
  virtual int64_t PageSize();

  // The real implementation. Thread-safe; never deleted.
  static Os* Default();
};

// Finds an executable: `name` when it contains '/', else the first match on
// $PATH. Skips the file that /proc/self/exe names, so a wrapper never finds
// itself. Returns kNotFound when there is none.
Result<std::string> FindExecutable(const std::string& name);

// execv(path, {argv0, args...}); returns only on failure.
Status Exec(const std::string& path, const std::vector<std::string>& args);

}  // namespace shmkeeper
