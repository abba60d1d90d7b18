#include "scan/mount_ns.h"

#include <errno.h>
#include <linux/ioctl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

// include/uapi/linux/nsfs.h (Linux 6.12); Debian 12's headers predate it.
struct MntNsInfo {
  uint32_t size;
  uint32_t nr_mounts;
  uint64_t mnt_ns_id;
};
constexpr unsigned kNsio = 0xb7;
constexpr unsigned long kNsMntGetInfo = _IOR(kNsio, 10, MntNsInfo);
constexpr unsigned long kNsMntGetNext = _IOR(kNsio, 11, MntNsInfo);

}  // namespace

Result<uint64_t> MountNamespaceId(int ns_fd) {
  MntNsInfo info = {sizeof(MntNsInfo), 0, 0};
  if (::ioctl(ns_fd, kNsMntGetInfo, &info) < 0) return Status::FromErrno(errno, "NS_MNT_GET_INFO");
  if (info.mnt_ns_id == 0) return Status::Internal("NS_MNT_GET_INFO: no id");
  return info.mnt_ns_id;
}

Result<uint64_t> NewestMountNamespaceFrom(int ns_fd, int* steps) {
  Result<uint64_t> newest = MountNamespaceId(ns_fd);
  if (!newest.ok()) return newest;
  uint64_t id = *newest;
  UniqueFd cur;
  int n = 0;
  for (int at = ns_fd;; ++n) {
    MntNsInfo info = {sizeof(MntNsInfo), 0, 0};
    int next = ::ioctl(at, kNsMntGetNext, &info);
    if (next < 0) {
      if (errno == ENOENT) break;  // the newest
      return Status::FromErrno(errno, "NS_MNT_GET_NEXT");
    }
    cur.reset(next);
    at = cur.get();
    if (info.mnt_ns_id > id) id = info.mnt_ns_id;
  }
  if (steps) *steps = n;
  return id;
}

}  // namespace shmkeeper
