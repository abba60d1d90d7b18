// Registering shmkeeper-runtime as a containerd CRI runtime handler.
//
// containerd 1.x replaces a whole plugin table with the one from an imported
// file (a drop-in with only our runtime would drop every other CRI setting), so
// install edits config.toml in place: it appends one marked block with the
// runtime handler and, with set_as_default, points default_runtime_name at it
// (the original line is kept in a trailing comment). Every byte outside those
// lines stays, comments included; the result is parsed again and must equal the
// original plus exactly our keys, or nothing is written. uninstall removes the
// block and restores the marked lines. Config versions 2 (containerd 1.x) and 3
// (containerd 2.x) are supported.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "install/docker_config.h"

namespace shmkeeper {

inline constexpr const char* kContainerdConfig = "/etc/containerd/config.toml";

struct ContainerdInstallOptions {
  std::string config = kContainerdConfig;
  std::string runtime_name = "shmkeeper";
  std::string runtime_path;  // absolute path of shmkeeper-runtime
  bool set_as_default = false;
  bool dry_run = false;
};

// Annotations the handler passes from the pod (and container) to the OCI spec.
const std::vector<std::string>& ContainerdPassedAnnotations();

// Pure text edits. `name` is the file name used in error messages.
Result<std::string> WithContainerdRuntime(const std::string& text, const std::string& name,
                                          const ContainerdInstallOptions& opts);
Result<std::string> WithoutContainerdRuntime(const std::string& text, const std::string& name);
// The text with every shmkeeper line removed (no parsing: also for templates).
std::string WithoutShmkeeperLines(const std::string& text);

// The `[grpc] address` of a config.toml text ("" when unset or unparsable:
// containerd then listens on /run/containerd/containerd.sock).
std::string ContainerdGrpcAddress(const std::string& text);

// Edit the file (backup once, atomic write). containerd reads its config only
// at start: the caller restarts it when `changed`.
Result<ConfigChange> InstallContainerd(const ContainerdInstallOptions& opts);
Result<ConfigChange> UninstallContainerd(const ContainerdInstallOptions& opts);

}  // namespace shmkeeper
