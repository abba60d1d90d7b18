#include "node/quarantine.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <ctime>
#include <optional>
#include <vector>

#include "base/fileutil.h"
#include "base/safe_path.h"

namespace shmkeeper {

namespace {

// The length of the identity part ("<8 hex>.") after the prefix, or 0.
size_t OwnerPart(std::string_view base) {
  std::string_view rest = base.substr(std::min(base.size(), kQuarantinePrefix.size()));
  if (rest.size() < 10 || rest[8] != '.') return 0;
  for (size_t i = 0; i < 8; ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(rest[i]))) return 0;
  }
  return 9;
}

}  // namespace

std::string QuarantineName(const std::string& base, uint64_t ino, const std::string& agent_id) {
  std::string head = std::string(kQuarantinePrefix) + (agent_id.empty() ? "" : agent_id + ".");
  std::string q = head + base;
  return q.size() <= NAME_MAX ? q : head + "#" + std::to_string(ino);
}

bool NeedsNameXattr(const std::string& quarantine_name) {
  size_t at = kQuarantinePrefix.size() + OwnerPart(quarantine_name);
  return quarantine_name.size() > at && quarantine_name[at] == '#';
}

std::string QuarantineOwner(std::string_view base) {
  size_t n = OwnerPart(base);
  return n ? std::string(base.substr(kQuarantinePrefix.size(), 8)) : "";
}

namespace {

// The original name of a quarantined file: its suffix, or for long names the
// xattr the reclaim set (a planted name without one is left alone).
std::optional<std::string> OriginalName(int dir, const std::string& base) {
  std::string name = base.substr(kQuarantinePrefix.size() + OwnerPart(base));
  if (!NeedsNameXattr(base)) return name;
  UniqueFd f(::openat(dir, base.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  char buf[NAME_MAX + 1];
  ssize_t n = f.valid() ? ::fgetxattr(f.get(), kQuarantineXattr, buf, sizeof buf) : -1;
  if (n <= 0) return std::nullopt;
  name.assign(buf, static_cast<size_t>(n));
  bool valid = name != "." && name != ".." && name.find('/') == std::string::npos &&
               name.find('\0') == std::string::npos && !IsQuarantineName(name);
  if (!valid) return std::nullopt;
  (void)::fremovexattr(f.get(), kQuarantineXattr);
  return name;
}

}  // namespace

bool IsQuarantineName(std::string_view base) {
  return base.size() > kQuarantinePrefix.size() && base.starts_with(kQuarantinePrefix);
}

Status RenameNoReplace(int dir_fd, const std::string& from, const std::string& to) {
  if (::syscall(SYS_renameat2, dir_fd, from.c_str(), dir_fd, to.c_str(), RENAME_NOREPLACE) != 0) {
    return Status::FromErrno(errno, "rename " + from + " to " + to);
  }
  return Status::Ok();
}

Status RenameBack(int dir_fd, const std::string& quarantine_name, const std::string& original, uint64_t ino) {
  Status s = RenameNoReplace(dir_fd, quarantine_name, original);
  if (s.ok() || s.err() != EEXIST) return s;
  std::string suffix = "~" + std::to_string(ino);
  std::string alt = original.substr(0, NAME_MAX - suffix.size()) + suffix;
  return RenameNoReplace(dir_fd, quarantine_name, alt);
}

int RestoreQuarantined(int root_fd, const std::vector<std::string>& rel_paths, const std::string& agent_id,
                       Clock* clock) {
  const int64_t now = std::chrono::system_clock::to_time_t(clock->WallNow());
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
    struct stat st;
    if (::fstatat(dir, base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    // Another agent's claim may be in progress: its name waits until no claim can still be.
    if (QuarantineOwner(base) != agent_id && now - st.st_ctime < kForeignQuarantineAgeSec) continue;
    std::optional<std::string> name = OriginalName(dir, base);
    if (!name) continue;
    if (RenameBack(dir, base, *name, st.st_ino).ok()) ++restored;
  }
  return restored;
}

}  // namespace shmkeeper
