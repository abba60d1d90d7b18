// Mount namespaces by the ids the kernel never reuses.
//
// Every mount namespace has a 64-bit id (nsfs) that is never given again
// (unlike its inode number, a proc inode number, which is reused). Ids are
// NOT in creation order: since Linux 6.18 they come in per-CPU batches (a
// namespace made on one CPU can get a lower id than one made earlier on
// another; seen here: 21818, then 17738). So "was a namespace made" is a
// question about the set of ids, never about the highest one. Since Linux
// 6.12 an open mount namespace answers NS_MNT_GET_INFO (its id) and
// NS_MNT_GET_NEXT / NS_MNT_GET_PREV (an fd of the next / previous namespace
// by id that the caller has CAP_SYS_ADMIN over, ENOENT past the last): the
// whole set, one ioctl per namespace (about 8 µs each), without reading
// every process's /proc/<pid>/ns/mnt.
//
// Nothing here keeps a namespace open: an open namespace keeps its mounts
// (a dead pod's /dev/shm) alive.
//
// Thread-safety: plain functions.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace shmkeeper {

// The id of the mount namespace `ns_fd` (an open /proc/<pid>/ns/mnt or an
// nsfs fd). An error (errno ENOTTY or EINVAL) on kernels before 6.12.
Result<uint64_t> MountNamespaceId(int ns_fd);

// The ids of every mount namespace the caller may see, sorted: `ns_fd`'s
// own, then NS_MNT_GET_PREV and NS_MNT_GET_NEXT from it until ENOENT. An
// error on kernels before 6.12, or when a step fails for another reason
// than the end.
Result<std::vector<uint64_t>> MountNamespaceIds(int ns_fd);

// The host tgid (in the caller's pid namespace) of the process whose pid is
// `ns_pid` in the pid namespace `pidns_fd` (an open /proc/<pid>/ns/pid):
// NS_GET_TGID_FROM_PIDNS (Linux >= 6.9). 0 when no such process runs
// there (ESRCH); an error on older kernels or another failure.
Result<pid_t> TgidFromPidNamespace(int pidns_fd, pid_t ns_pid);

}  // namespace shmkeeper
