// Small file helpers with Status errors and RAII descriptors.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace shmkeeper {

// Owns a file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Reads a whole regular file of at most max_bytes.
Result<std::string> ReadFile(const std::string& path, size_t max_bytes = 16 << 20);

// A file that may legitimately be absent (an engine config before install).
struct OptionalFile {
  bool exists = false;
  std::string text;
};
Result<OptionalFile> ReadOptionalFile(const std::string& path, size_t max_bytes = 16 << 20);

// Replaces `path` atomically: writes a temporary file in the same directory,
// fsyncs it, renames it over `path` and fsyncs the directory. On any error the
// temporary file is removed and `path` is untouched. `mode` applies only when
// `path` does not exist yet; otherwise the existing mode is kept. With
// `sync_dir` the directory is fsynced too, so the rename survives a crash;
// files whose life ends at reboot anyway (a bundle's config.json) skip it.
Status WriteFileAtomic(const std::string& path, const std::string& content, mode_t mode = 0644, bool sync_dir = true);

// Creates `dir` and its missing parents with `mode` (like mkdir -p).
Status MakeDirs(const std::string& dir, mode_t mode = 0755);

// True when `path` exists (any type, symlinks not followed).
bool PathExists(const std::string& path);

// The names in directory `path` (without "." and ".."), in readdir order;
// empty when it cannot be opened. With `dirs_only`, only entries that are
// directories (symlinks not followed).
std::vector<std::string> ListDir(const std::string& path, bool dirs_only = false);

// Backups that `shmkeeper install` keeps next to an engine config it edits:
// `<path>.shmkeeper-backup` holds the original bytes, `<path>.shmkeeper-absent`
// says there was no file. Written once (the first install wins); removed by the
// uninstall that undoes the edit.
std::string BackupPath(const std::string& path);
std::string AbsentMarkerPath(const std::string& path);
Status WriteBackupOnce(const std::string& path, bool existed, const std::string& original);
Status RemoveBackups(const std::string& path);

// Removes `path`; one that is already gone is not an error.
Status RemoveFile(const std::string& path);

}  // namespace shmkeeper
