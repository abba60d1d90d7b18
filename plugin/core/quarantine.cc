#include "shmkeeper/quarantine.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <vector>

#include "shmkeeper/fileutil.h"
#include "shmkeeper/safe_path.h"

namespace shmkeeper {

Result<std::string> QuarantineName(const std::string& base) {
  std::string q = std::string(kQuarantinePrefix) + base;
  if (q.size() > NAME_MAX) return Status::Invalid("name too long to quarantine: " + base);
  return q;
}

bool IsQuarantineName(std::string_view base) {
  return base.size() > kQuarantinePrefix.size() && base.starts_with(kQuarantinePrefix);
}

Status RenameNoReplace(int dir_fd, const std::string& from, const std::string& to) {
  if (::syscall(SYS_renameat2, dir_fd, from.c_str(), dir_fd, to.c_str(), RENAME_NOREPLACE) != 0) {
    return Status::FromErrno(errno, "rename " + from + " to " + to);
  }
  return Status::Ok();
}

int RestoreQuarantined(int root_fd, const std::vector<std::string>& rel_paths) {
  int restored = 0;
  for (const std::string& rel : rel_paths) {
    size_t slash = rel.rfind('/');
    std::string base = slash == std::string::npos ? rel : rel.substr(slash + 1);
    if (!IsQuarantineName(base)) continue;
    UniqueFd sub;
    int dir = root_fd;
    if (slash != std::string::npos) {
      Result<UniqueFd> d = OpenNoSymlinks(root_fd, rel.substr(0, slash), O_RDONLY | O_DIRECTORY);
      if (!d.ok()) continue;
      sub = std::move(*d);
      dir = sub.get();
    }
    if (RenameNoReplace(dir, base, base.substr(kQuarantinePrefix.size())).ok()) ++restored;
  }
  return restored;
}

}  // namespace shmkeeper
