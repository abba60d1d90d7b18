// Registering shmkeeper-runtime with Docker in daemon.json.
//
// install adds runtimes.<name> (and default-runtime with set_as_default),
// keeps every other key, backs the original up once, and is idempotent.
// uninstall removes exactly that, restoring the original bytes when nothing
// else changed in between.
#pragma once

#include <string>

#include "base/json.h"
#include "base/status.h"

namespace shmkeeper {

inline constexpr const char* kDockerDaemonJson = "/etc/docker/daemon.json";

struct DockerInstallOptions {
  std::string daemon_json = kDockerDaemonJson;
  std::string runtime_name = "shmkeeper";
  std::string runtime_path;    // absolute path of shmkeeper-runtime
  std::string runtime_config;  // shmkeeper config passed as runtimeArgs; "" = none
  bool set_as_default = false;
  bool dry_run = false;
};

struct ConfigChange {
  bool changed = false;
  std::string before;     // file text before ("" when absent)
  std::string after;      // file text after ("" when removed)
  bool reloaded = false;  // a running dockerd was sent SIGHUP
};

// Pure edits on a parsed daemon.json object.
Json WithDockerRuntime(Json daemon, const DockerInstallOptions& opts);
// `original` is the backed-up document (null when none or absent).
Json WithoutDockerRuntime(Json daemon, const Json& original, const std::string& runtime_name);

Result<ConfigChange> InstallDocker(const DockerInstallOptions& opts);
Result<ConfigChange> UninstallDocker(const DockerInstallOptions& opts);

// The backup paths next to daemon.json.
std::string DockerBackupPath(const std::string& daemon_json);
std::string DockerAbsentMarkerPath(const std::string& daemon_json);

}  // namespace shmkeeper
