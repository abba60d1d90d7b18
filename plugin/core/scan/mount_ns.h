// Mount namespaces by the ids the kernel never reuses.
//
// Every mount namespace has a 64-bit id (nsfs), drawn from one counter in
// creation order and never given again (unlike its inode number, which is a
// proc inode number and is reused). Since Linux 6.12 an open mount
// namespace answers NS_MNT_GET_INFO (its id) and NS_MNT_GET_NEXT (an fd of
// the next namespace by id that the caller has CAP_SYS_ADMIN over, ENOENT
// after the newest). So the newest id on the node says whether any mount
// namespace was made since it was last asked, in a few syscalls, without
// reading every process's /proc/<pid>/ns/mnt.
//
// Nothing here keeps a namespace open: an open namespace keeps its mounts
// (a dead pod's /dev/shm) alive.
//
// Thread-safety: plain functions.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace shmkeeper {

// The id of the mount namespace `ns_fd` (an open /proc/<pid>/ns/mnt or an
// nsfs fd). An error (errno ENOTTY or EINVAL) on kernels before 6.12.
Result<uint64_t> MountNamespaceId(int ns_fd);

// The highest id among `ns_fd`'s namespace and those made after it that the
// caller may see: NS_MNT_GET_NEXT from it until ENOENT. `steps` (optional)
// gets the number of namespaces stepped over. An error on kernels before
// 6.12, or when a step fails for another reason than the end.
Result<uint64_t> NewestMountNamespaceFrom(int ns_fd, int* steps = nullptr);

}  // namespace shmkeeper
