#include "scan/mount_ns.h"

#include <errno.h>
#include <linux/ioctl.h>
#include <sys/ioctl.h>

#include <algorithm>

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
constexpr unsigned long kNsMntGetPrev = _IOR(kNsio, 12, MntNsInfo);
constexpr unsigned long kNsGetTgidFromPidns = _IOR(kNsio, 0x7, int);

// Steps from `ns_fd` with `request` until ENOENT, adding each id to `ids`.
Status Walk(int ns_fd, unsigned long request, std::vector<uint64_t>* ids) {
  UniqueFd cur;
  for (int at = ns_fd;;) {
    MntNsInfo info = {sizeof(MntNsInfo), 0, 0};
    int next = ::ioctl(at, request, &info);
    if (next < 0) {
      if (errno == ENOENT) return Status::Ok();  // past the last
      return Status::FromErrno(errno, request == kNsMntGetNext ? "NS_MNT_GET_NEXT" : "NS_MNT_GET_PREV");
    }
    cur.reset(next);
    at = cur.get();
    ids->push_back(info.mnt_ns_id);
  }
}

}  // namespace

Result<uint64_t> MountNamespaceId(int ns_fd) {
  MntNsInfo info = {sizeof(MntNsInfo), 0, 0};
  if (::ioctl(ns_fd, kNsMntGetInfo, &info) < 0) return Status::FromErrno(errno, "NS_MNT_GET_INFO");
  if (info.mnt_ns_id == 0) return Status::Internal("NS_MNT_GET_INFO: no id");
  return info.mnt_ns_id;
}

Result<std::vector<uint64_t>> MountNamespaceIds(int ns_fd) {
  Result<uint64_t> own = MountNamespaceId(ns_fd);
  if (!own.ok()) return own.status();
  std::vector<uint64_t> ids{*own};
  if (Status s = Walk(ns_fd, kNsMntGetPrev, &ids); !s.ok()) return s;
  if (Status s = Walk(ns_fd, kNsMntGetNext, &ids); !s.ok()) return s;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

Result<pid_t> TgidFromPidNamespace(int pidns_fd, pid_t ns_pid) {
  int tgid = ::ioctl(pidns_fd, kNsGetTgidFromPidns, ns_pid);
  if (tgid > 0) return static_cast<pid_t>(tgid);
  if (tgid < 0 && errno == ESRCH) return static_cast<pid_t>(0);
  return Status::FromErrno(tgid < 0 ? errno : EIO, "NS_GET_TGID_FROM_PIDNS");
}

}  // namespace shmkeeper
