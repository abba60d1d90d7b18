// The running containerd's view of its CRI runtime handlers (CRI `Status`
// with verbose=true: the config it loaded, as JSON), to check that an install
// or uninstall took effect. containerd reads config.toml only at start, so an
// edit is applied by a restart; this says which one.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace shmkeeper::cli {

struct ContainerdLive {
  pid_t pid = 0;
  std::string config;                           // its config file as it names it (--config, or the default)
  std::string socket;                           // its gRPC socket, as reachable from here
  std::string default_runtime;                  // CRI containerd.defaultRuntimeName
  std::map<std::string, std::string> runtimes;  // handler -> options.BinaryName ("" when none)
};

// Every running containerd whose config file is `config` (the same file: its
// path resolved in the process's own root, so a containerd in another mount
// namespace, e.g. the host's seen from a hostPID pod, counts), with the
// runtime config it loaded. A containerd that does not answer CRI Status is
// an error naming it.
Result<std::vector<ContainerdLive>> ContainerdsUsing(const std::string& config);

// The command that restarts that containerd under its init system: the
// systemd unit its cgroup names (`systemctl restart k3s`, `snap restart
// microk8s.daemon-containerd` for a snap), else by its config path (k3s,
// RKE2, MicroK8s) or `systemctl restart containerd` where systemd runs, else
// a sentence saying no init system manages it and how to restart it by hand.
std::string ContainerdRestartHint(const ContainerdLive& c);

// Whether every containerd using `config` runs with (install) or without
// (uninstall) handler `runtime` (for install: with BinaryName `binary`, and as
// the default for `as_default`). *users: how many containerds use the file.
// kFailedPrecondition: one line naming the containerd, what it runs, and the
// restart that applies the file (the caller exits 3). Other errors: it could
// not be asked.
Status VerifyContainerdLive(const std::string& config, const std::string& runtime, const std::string& binary,
                            bool install, bool as_default, size_t* users);

}  // namespace shmkeeper::cli
