#include "scan/fs_identity.h"

#include <sys/statfs.h>

#include <cerrno>
#include <cstring>

namespace shmkeeper {

Result<uint64_t> FilesystemId(int fd) {
  struct statfs sf;
  if (::fstatfs(fd, &sf) != 0) return Status::FromErrno(errno, "fstatfs");
  int32_t words[2];
  static_assert(sizeof sf.f_fsid == sizeof words);
  std::memcpy(words, &sf.f_fsid, sizeof words);
  uint64_t id = FsidFromWords(words[0], words[1]);
  if (id == 0) return Status::Precondition("the filesystem reports no fsid (tmpfs before Linux 5.13)");
  return id;
}

}  // namespace shmkeeper
