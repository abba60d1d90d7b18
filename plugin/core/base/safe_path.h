// Opening paths inside an untrusted root (a container's rootfs or
// /proc/<pid>/root) without following symlinks out of it.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "base/fileutil.h"
#include "base/status.h"

namespace shmkeeper {

// Opens `path` relative to the directory `root_fd` as if `root_fd` were "/":
// openat2(2) with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV
// unless `allow_xdev`. Absolute symlinks and ".." stay inside the root.
// `flags` are open(2) flags; O_CLOEXEC is always added.
Result<UniqueFd> OpenInRoot(int root_fd, const std::string& path, int flags, bool allow_xdev = true);

// Opens `path` below `root_fd` refusing any symlink on the way (ELOOP), for
// paths shmkeeper is about to create things under; `mode` with O_CREAT.
Result<UniqueFd> OpenNoSymlinks(int root_fd, const std::string& path, int flags, mode_t mode = 0);

// Opens the directory `path` below `root_fd`, creating each missing component
// (mode 0755); any symlink or non-directory on the way refuses it.
Result<UniqueFd> MakeDirsNoSymlinks(int root_fd, const std::string& path);

// Makes sure `name` in the directory `dir_fd` is a regular file, creating it
// empty (mode 0644) when missing; a symlink or anything else refuses it.
Status MakeFileNoSymlinks(int dir_fd, const std::string& name);

// `path` made absolute and lexical: no empty, "." or ".." components (".."
// stops at "/"), no trailing slash.
std::string NormalizePath(std::string_view path);

// Where `path` lands inside the root `root_fd` (whose host path is
// `host_root`): its longest existing prefix with the root's symlinks resolved
// inside it, as openat2(RESOLVE_IN_ROOT) and runc's mount-point lookup do,
// followed by the rest. The lexical path when nothing resolves.
std::string LandingPath(int root_fd, const std::string& host_root, std::string_view path);

// Opens the directory `path` (as seen by process `pid`) through
// /proc/<pid>/root with OpenInRoot, so the container's own symlinks resolve
// inside its root and never on the host.
Result<UniqueFd> OpenProcessDir(int pid, const std::string& path, const std::string& proc = "/proc");

}  // namespace shmkeeper
