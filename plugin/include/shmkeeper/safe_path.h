// Opening paths inside an untrusted root (a container's rootfs or
// /proc/<pid>/root) without following symlinks out of it.
#pragma once

#include <string>

#include "shmkeeper/fileutil.h"
#include "shmkeeper/status.h"

namespace shmkeeper {

// Opens `path` relative to the directory `root_fd` as if `root_fd` were "/":
// openat2(2) with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV
// unless `allow_xdev`. Absolute symlinks and ".." stay inside the root.
// `flags` are open(2) flags; O_CLOEXEC is always added.
Result<UniqueFd> OpenInRoot(int root_fd, const std::string& path, int flags, bool allow_xdev = true);

// Opens `path` below `root_fd` refusing any symlink on the way (ELOOP), for
// paths shmkeeper is about to create things under.
Result<UniqueFd> OpenNoSymlinks(int root_fd, const std::string& path, int flags);

// Opens the directory `path` (as seen by process `pid`) through
// /proc/<pid>/root with OpenInRoot, so the container's own symlinks resolve
// inside its root and never on the host.
Result<UniqueFd> OpenProcessDir(int pid, const std::string& path, const std::string& proc = "/proc");

}  // namespace shmkeeper
