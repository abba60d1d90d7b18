#include "base/safe_path.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

namespace shmkeeper {

namespace {

Result<UniqueFd> OpenAt2(int root_fd, const std::string& path, int flags, uint64_t resolve, mode_t mode = 0) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = mode;
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

// The components of `path` with "", "." and ".." resolved lexically.
std::vector<std::string> SplitPath(std::string_view path) {
  std::vector<std::string> parts;
  while (!path.empty()) {
    size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.emplace_back(part);
  }
  return parts;
}

}  // namespace

Result<UniqueFd> OpenInRoot(int root_fd, const std::string& path, int flags, bool allow_xdev) {
  return OpenAt2(root_fd, path, flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | (allow_xdev ? 0 : RESOLVE_NO_XDEV));
}

Result<UniqueFd> OpenNoSymlinks(int root_fd, const std::string& path, int flags, mode_t mode) {
  return OpenAt2(root_fd, path, flags, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, mode);
}

Result<UniqueFd> MakeDirsNoSymlinks(int root_fd, const std::string& path) {
  Result<UniqueFd> dir = OpenNoSymlinks(root_fd, ".", O_PATH | O_DIRECTORY);
  if (!dir.ok()) return dir.status();
  std::string seen;
  for (const std::string& part : SplitPath(NormalizePath(path))) {
    seen += "/" + part;
    Result<UniqueFd> next = OpenNoSymlinks(dir->get(), part, O_PATH | O_DIRECTORY);
    if (!next.ok() && next.status().err() == ENOENT) {
      if (::mkdirat(dir->get(), part.c_str(), 0755) != 0 && errno != EEXIST) {
        return Status::FromErrno(errno, "create " + seen);
      }
      next = OpenNoSymlinks(dir->get(), part, O_PATH | O_DIRECTORY);
    }
    if (!next.ok()) return Status::FromErrno(next.status().err(), seen + " is not a plain directory");
    dir = std::move(next);
  }
  return dir;
}

Status MakeFileNoSymlinks(int dir_fd, const std::string& name) {
  // O_PATH first: an existing device or FIFO is never opened for real.
  Result<UniqueFd> fd = OpenNoSymlinks(dir_fd, name, O_PATH);
  if (!fd.ok() && fd.status().err() == ENOENT) {
    fd = OpenNoSymlinks(dir_fd, name, O_RDONLY | O_CREAT | O_EXCL, 0644);
    if (!fd.ok() && fd.status().err() == EEXIST) fd = OpenNoSymlinks(dir_fd, name, O_PATH);
  }
  if (!fd.ok()) return Status::FromErrno(fd.status().err(), name + " is not a plain file");
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return Status::FromErrno(errno, "stat " + name);
  if (!S_ISREG(st.st_mode)) return Status::Invalid(name + " is not a plain file");
  return Status::Ok();
}

std::string NormalizePath(std::string_view path) {
  std::string out;
  for (const std::string& part : SplitPath(path)) out += "/" + part;
  return out.empty() ? "/" : out;
}

std::string LandingPath(int root_fd, const std::string& host_root, std::string_view path) {
  std::vector<std::string> parts = SplitPath(path);
  for (size_t n = parts.size(); n > 0; --n) {
    std::string prefix;
    for (size_t i = 0; i < n; ++i) prefix += "/" + parts[i];
    Result<UniqueFd> fd = OpenInRoot(root_fd, prefix, O_PATH);
    if (!fd.ok()) continue;
    std::error_code ec;
    std::string real = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd->get()), ec).string();
    // A root at "/" (a detached mount, a host process's /proc/<pid>/root) holds every path.
    const std::string base = host_root == "/" ? "" : host_root;
    if (ec || (real != host_root && !real.starts_with(base + "/"))) break;
    std::string landed = real.substr(base.size());
    for (size_t i = n; i < parts.size(); ++i) landed += "/" + parts[i];
    return NormalizePath(landed);
  }
  return NormalizePath(path);
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
