#include "base/fileutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <vector>

namespace shmkeeper {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "read " + path);
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      return Status::Invalid("read " + path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

namespace {

Status WriteAll(int fd, const std::string& content) {
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "write");
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

Status WriteFileAtomic(const std::string& path, const std::string& content, mode_t mode, bool sync_dir) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) mode = st.st_mode & 07777;
  std::string tmpl = path + ".shmkeeper-XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  UniqueFd fd(::mkostemp(name.data(), O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "create temporary file for " + path);
  std::string tmp(name.data());
  auto fail = [&](Status s) {
    ::unlink(tmp.c_str());
    return s.WithContext("write " + path);
  };
  if (::fchmod(fd.get(), mode) != 0) return fail(Status::FromErrno(errno, "fchmod"));
  if (Status s = WriteAll(fd.get(), content); !s.ok()) return fail(s);
  if (::fsync(fd.get()) != 0) return fail(Status::FromErrno(errno, "fsync"));
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(Status::FromErrno(errno, "rename"));
  if (!sync_dir) return Status::Ok();
  UniqueFd dir(::open(DirName(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.valid()) ::fsync(dir.get());
  return Status::Ok();
}

std::vector<std::string> ListDir(const std::string& path, bool dirs_only) {
  std::vector<std::string> out;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path.c_str()), ::closedir);
  if (!dir) return out;
  while (struct dirent* e = ::readdir(dir.get())) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    struct stat st;
    bool is_dir = e->d_type == DT_DIR ||
                  (e->d_type == DT_UNKNOWN && ::lstat((path + "/" + n).c_str(), &st) == 0 && S_ISDIR(st.st_mode));
    if (!dirs_only || is_dir) out.push_back(std::move(n));
  }
  return out;
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

Result<OptionalFile> ReadOptionalFile(const std::string& path, size_t max_bytes) {
  OptionalFile f;
  Result<std::string> text = ReadFile(path, max_bytes);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) return f;
    return text.status();
  }
  f.exists = true;
  f.text = *text;
  return f;
}

Status MakeDirs(const std::string& dir, mode_t mode) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir " + prefix);
  }
  return Status::Ok();
}

std::string BackupPath(const std::string& path) { return path + ".shmkeeper-backup"; }
std::string AbsentMarkerPath(const std::string& path) { return path + ".shmkeeper-absent"; }

Status WriteBackupOnce(const std::string& path, bool existed, const std::string& original) {
  std::string backup = BackupPath(path), absent = AbsentMarkerPath(path);
  if (PathExists(backup) || PathExists(absent)) return Status::Ok();
  if (existed) return WriteFileAtomic(backup, original, 0600);
  return WriteFileAtomic(absent, "", 0600);
}

Status RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Status::FromErrno(errno, "remove " + path);
  return Status::Ok();
}

Status RemoveBackups(const std::string& path) {
  SHMK_RETURN_IF_ERROR(RemoveFile(BackupPath(path)));
  return RemoveFile(AbsentMarkerPath(path));
}

}  // namespace shmkeeper
