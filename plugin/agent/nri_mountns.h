// The runtime's view of the node's mounts, for the NRI plugin: the pod's shm
// tmpfs is a mount the runtime made in its own mount namespace, which the
// agent may not share (a DaemonSet's own namespace, a runtime in a private
// namespace). RuntimeMountNsOs answers StatFs, RealPath and RemountTmpfs in
// the mount namespace of the process at the other end of the NRI socket
// (SO_PEERCRED; opened, then the connection checked still up, so a pid
// reused after the peer exited is not taken for it): each call runs in a short-lived child that joined it
// (setns(2) needs a single-threaded caller, which the agent is not). When
// that namespace is the agent's own, or cannot be opened, calls go to `base`
// directly.
//
// Thread-safety: as `base`; the namespace fd is owned and closed here.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/os.h"

namespace shmkeeper::agent {

class RuntimeMountNsOs : public Os {
 public:
  // The namespace of the peer of the connected unix socket `fd`. `base`
  // outlives this object.
  static std::unique_ptr<RuntimeMountNsOs> ForPeerOf(int fd, Os* base);
  ~RuntimeMountNsOs() override;

  Result<FsInfo> StatFs(const std::string& path) override;
  Status RemountTmpfs(const std::string& path, int64_t bytes, unsigned long st_flags) override;
  int64_t HostMemoryBytes() override { return base_->HostMemoryBytes(); }
  Result<std::string> RealPath(const std::string& path) override;
  int64_t PageSize() override { return base_->PageSize(); }

  // Runs `fn` in a short-lived child in the runtime's mount namespace (the
  // agent's own when not joined: a child all the same, so that what `fn`
  // mounts or changes in its process ends with it); `fn`'s text comes back
  // (at most 64 KiB). `fn` only makes system calls and formats text.
  Result<std::string> RunInChild(const std::function<std::string()>& fn);

  // Whether calls go through the runtime's namespace (false: directly).
  bool joined() const { return ns_fd_ >= 0; }

 private:
  RuntimeMountNsOs(int ns_fd, Os* base) : ns_fd_(ns_fd), base_(base) {}
  int ns_fd_;  // -1: the agent's own namespace
  Os* base_;
};

}  // namespace shmkeeper::agent
